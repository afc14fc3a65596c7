"""A registry model's training run spread over MPI ranks: the layout that
``mpirun -n 4 minitorch-nlp train gpt --parallel dp=2,tp=2 --zero 1`` hands to
``training.LanguageModelRun``, whose one training loop asks it at each point where ranks differ
from one process.

The world's ranks form a dp x tp grid, rank = d * tp + t (Megatron's order: the ranks of one
tensor-parallel group are neighbours). The tp ranks of a group hold the shards of one
``TensorParallelGPT2``; the dp groups each see a share of every batch:

* every rank draws the same global batch from the run's random stream and keeps its dp share
  (``local``), so the loss of a rank is the mean over ``batch_size / dp`` windows;
* after ``backward``, the gradients are averaged over the dp ranks (``DataParallel``), or, with
  ``zero``, reduce-scattered into ``ZeroAdamW``'s partitions;
* a model with mixture-of-experts layers (``--experts E``) has its experts split over the dp
  ranks (``ExpertParallelMoE``, GShard's expert parallelism); each sequence is a routing group
  of its own, so the routing does not depend on how the batch is shared out;
* the gradient norm for clipping is that of the whole model: the squares of the tensor-parallel
  shards summed over the tp ranks, those of replicated parameters counted once, those of ZeRO's
  partitions and of the experts summed over the dp ranks;
* checkpoints are gathered: every rank takes part, rank 0 writes one file, the same as a
  one-process run's (whole parameters and whole AdamW state). Loading shards it for the layout
  at hand, so a run saved by 4 ranks resumes on 2, or on one process, and goes on exactly as if
  it had not stopped.

The run equals the one-process run on the global batch (up to float rounding of the sums) when
dropout is 0 (each rank would draw its own dropout masks).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .. import optim
from ..autograd import random as mt_random
from ..checks import SettingError
from ..models import registry
from ..nn.moe import MixtureOfExperts
from .communicator import SingleProcess
from .data_parallel import DataParallel
from .expert_parallel import ExpertParallelMoE
from .plan import parse_layout
from .zero import ZeroAdamW

__all__ = ["ParallelTraining"]

ZERO_STAGES = (0, 1, 2, 3)


class ParallelTraining:
    """The layout ``parallel`` (``"dp=2,tp=2"``; empty: dp = all ranks) of a run over ``comm``
    (default: one process) with ZeRO stage ``zero`` (0: none) over the dp ranks. Errors are
    ``checks.SettingError`` naming the setting (``parallel``, ``zero``, ``n_head`` ...)."""

    def __init__(self, parallel="", zero=0, comm=None):
        self.comm = SingleProcess() if comm is None else comm
        try:
            layout = parse_layout(parallel, self.comm.size, command="train",
                                  devices_name="the number of ranks (mpirun -n)")
        except ValueError as error:
            raise SettingError("parallel", f"{parallel}: "
                               + str(error).removeprefix("train: --parallel: ")) from None
        if layout.pp > 1:
            raise SettingError("parallel", f"{parallel}: train does not pipeline (pp); GPipe "
                               "is the class distributed.PipelineParallelGPT2, and minitorch-nlp "
                               "plan models pp; train with dp and tp")
        if zero not in ZERO_STAGES:
            raise SettingError("zero", f"must be one of {ZERO_STAGES} (0: none), got {zero!r}")
        self.layout, self.dp, self.tp, self.zero = parallel, layout.dp, layout.tp, zero
        self.dp_rank, self.tp_rank = divmod(self.comm.rank, self.tp)
        self.tp_comm = self.comm.split(self.dp_rank)       # my tensor-parallel group
        self.dp_comm = self.comm.split(self.tp_rank)       # the ranks holding my shards
        self.data_parallel = None
        self.dense_shapes, self.expert_names = {}, set()

    @property
    def is_parallel(self):
        return self.comm.size > 1 or self.zero > 0

    @property
    def writes(self):
        """Whether this rank writes files and prints (rank 0)."""
        return self.comm.rank == 0

    def describe(self):
        zero = f", ZeRO stage {self.zero}" if self.zero else ""
        experts = ", experts split over the dp ranks" if self.expert_names else ""
        return f"{self.comm.size} rank(s): dp={self.dp} tp={self.tp}{zero}{experts}"

    def num_parameters(self, model):
        """The whole model's parameter count (``model`` being this rank's shards)."""
        return sum(int(np.prod(self.dense_shapes.get(name, p.shape)))
                   for name, p in model.named_parameters())

    def check(self, config, vocab_size):
        """Refuse a run the layout cannot split: ``config`` a ``TrainConfig``, ``vocab_size`` its
        tokenizer's."""
        if self.is_parallel and not registry.family(config.model).trains_in_parallel:
            names = [name for name, family in registry.families().items()
                     if family.trains_in_parallel]
            raise SettingError("parallel", f"{self.layout or 'dp'} / --zero: parallel training is "
                               f"built for the {', '.join(names)} family (TensorParallelGPT2, "
                               f"data parallelism on its token-mean loss), not {config.model}")
        if config.batch_size % self.dp:
            raise SettingError("batch_size", f"={config.batch_size} must be divisible by dp="
                               f"{self.dp}: each data-parallel rank takes an equal share")
        if self.tp > 1 and config.n_head % self.tp:
            raise SettingError("parallel", f"{self.layout}: tp={self.tp} must divide --n-head "
                               f"{config.n_head}: the heads are split over the tp ranks")
        if config.experts and (self.tp > 1 or self.zero):
            raise SettingError("experts", f"={config.experts} works with dp only: "
                               + ("tensor parallelism (tp) does not split MoE layers"
                                  if self.tp > 1 else "ZeRO's partitions would mix the ranks' "
                                  "different experts") + "; leave out --parallel tp / --zero")
        if config.experts % self.dp:
            raise SettingError("experts", f"={config.experts} must be divisible by dp={self.dp}: "
                               "the experts are split over the data-parallel ranks")
        if self.tp > 1 and vocab_size % self.tp:
            raise SettingError("parallel", f"{self.layout}: tp={self.tp} must divide the "
                               f"vocabulary ({vocab_size} tokens), which is split over the tp "
                               "ranks; choose --tokenizer bpe with --vocab-size a multiple of "
                               f"{self.tp}, or a text whose character count is one")

    # ---- the model and its optimizer ---------------------------------------------------------
    def build(self, make_model):
        """``make_model()`` (the family's dense model), or, with tp > 1, this rank's
        ``TensorParallelGPT2`` shards of it: drawn from the same random stream, so they are the
        dense model's weights, and the stream goes on as after the dense model."""
        from .tensor_parallel import TensorParallelGPT2
        generator = mt_random.default_generator()
        before = generator.get_state()
        dense = make_model()
        self.dense_shapes = {name: tuple(value.shape)
                             for name, value in dense.state_dict().items()}
        self.dense_order = {name: i for i, (name, _) in enumerate(dense.named_parameters())}
        after = generator.get_state()
        if self.tp > 1:
            generator.set_state(before)
            dense = TensorParallelGPT2(dense.config, self.tp_comm)
        if self.dp > 1:
            for name, module in list(dense.named_modules()):
                for child, layer in list(module._modules.items()):
                    if isinstance(layer, MixtureOfExperts):
                        setattr(module, child, ExpertParallelMoE.from_dense(layer, self.dp_comm))
                        prefix = f"{name}.{child}." if name else f"{child}."
                        self.expert_names |= {prefix + "experts.wi", prefix + "experts.wo"}
        generator.set_state(after)                 # the shards' own draws are undone
        return dense

    def optimizer(self, model, groups, **options):
        """``AdamW(groups, **options)``, or ``ZeroAdamW`` over the dp ranks; without ZeRO and
        with dp > 1, the model's gradients are averaged by ``DataParallel`` in ``step``."""
        self._sharded = {id(p) for name, p in model.named_parameters()
                         if tuple(p.shape) != self.dense_shapes.get(name, tuple(p.shape))
                         and name not in self.expert_names}
        self._experts = [p for name, p in model.named_parameters() if name in self.expert_names]
        self._expert_ids = {id(p) for p in self._experts}
        if self.zero:
            optimizer = ZeroAdamW(groups, self.dp_comm, self.zero, **options)
            self._norm_weights = np.concatenate(optimizer._cut(optimizer._flatten(
                np.full(p.shape, self._norm_weight(p, partitioned=True))
                for p in optimizer.params)))
            return optimizer
        if self.dp > 1:
            self.data_parallel = DataParallel(model, self.dp_comm, local=self._experts)
        return optim.AdamW(groups, **options)

    @staticmethod
    def scheduled(optimizer):
        """The ``optim.Optimizer`` whose learning rates a scheduler sets."""
        return optimizer.inner if isinstance(optimizer, ZeroAdamW) else optimizer

    def _norm_weight(self, parameter, partitioned=False):
        """How much a parameter's squared gradient counts in the norm summed over all ranks:
        one over the number of ranks holding the same copy (tp ranks hold the same replicated
        parameters, dp ranks the same everything but the experts and ZeRO's partitions)."""
        tp_copies = 1 if id(parameter) in self._sharded else self.tp
        dp_copies = 1 if partitioned or id(parameter) in self._expert_ids else self.dp
        return 1.0 / (tp_copies * dp_copies)

    # ---- a step ------------------------------------------------------------------------------
    def local(self, batch):
        """This rank's dp share of a batch (a tuple of arrays with the examples first)."""
        share = len(batch[0]) // self.dp
        return tuple(part[self.dp_rank * share:(self.dp_rank + 1) * share] for part in batch)

    def gathered(self, optimizer):
        """Where the whole parameters must be present (ZeRO stage 3: forward, backward,
        checkpoints)."""
        return optimizer.gathered() if isinstance(optimizer, ZeroAdamW) else \
            contextlib.nullcontext()

    def step(self, parameters, optimizer, max_norm):
        """Average the gradients over the dp ranks, clip those of ``parameters`` (what the run
        trains: this rank's shards) to the whole model's norm ``max_norm``, and update."""
        if isinstance(optimizer, ZeroAdamW):
            optimizer.step(before_update=lambda gradient: self._clip(
                [(gradient, self._norm_weights)], max_norm)[0])
            return
        if self.data_parallel is not None:
            self.data_parallel.sync_gradients()
        if self.comm.size == 1:
            optim.clip_grad_norm_(parameters, max_norm)
        else:
            grads = [(p.grad.data, self._norm_weight(p)) for p in parameters
                     if p.grad is not None]
            for (array, _), clipped in zip(grads, self._clip(grads, max_norm)):
                array[...] = clipped
        optimizer.step()

    def _clip(self, gradients, max_norm):
        """``gradients`` [(array, weight)] scaled together so that the norm of the whole
        gradient, sqrt(sum weight * g^2) summed over every rank, is at most ``max_norm``
        (``optim.clip_grad_norm_``'s rule and 1e-6 guard)."""
        squares = [np.asarray(w, np.float64) * np.square(np.asarray(g, np.float64))
                   for g, w in gradients]
        square = self.comm.all_reduce(np.array([sum(float(np.sum(s)) for s in squares)]))
        coef = max_norm / (math.sqrt(square[0]) + 1e-6)
        return [g * g.dtype.type(coef) if coef < 1.0 else g for g, _ in gradients]

    def mean(self, value):
        """The mean over the dp ranks of a number each computed on its share (the loss)."""
        return value if self.dp == 1 else float(self.dp_comm.all_reduce(
            np.array([value], dtype=np.float64))[0] / self.dp)

    def agree(self, *flags):
        """The flags (save now? stop?) as any rank has them, so that every rank takes the same
        turn: a checkpoint is a collective."""
        flags = np.array([bool(flag) for flag in flags], dtype=np.float64)
        if self.comm.size > 1:
            flags = self.comm.all_reduce(flags, op="max")
        return tuple(bool(flag) for flag in flags)

    # ---- checkpoints -------------------------------------------------------------------------
    def _split(self, name, shape):
        """(the axis along which ``name`` is split, None: held whole; the communicator of the
        ranks holding its parts: the tp group, or the dp ranks for the experts)."""
        dense = self.dense_shapes.get(name, tuple(shape))
        axes = [a for a, (d, s) in enumerate(zip(dense, shape)) if d != s]
        return (axes[0] if axes else None,
                self.dp_comm if name in self.expert_names else self.tp_comm)

    def _whole(self, name, array):
        axis, comm = self._split(name, array.shape)
        return array if axis is None else comm.all_gather(np.ascontiguousarray(array), axis=axis)

    def _mine(self, name, array, shape):
        axis, comm = self._split(name, shape)
        return array if axis is None else np.split(np.asarray(array), comm.size,
                                                   axis=axis)[comm.rank]

    def _optimizer_names(self, model, optimizer):
        """The parameters' names in the order an optimizer's state numbers them, and the number
        each has in a one-process run's optimizer (whose model may list its parameters in
        another order: within each group, the dense model's order)."""
        names = {id(p): name for name, p in model.named_parameters()}
        if isinstance(optimizer, ZeroAdamW):
            ends = np.cumsum(optimizer._group_sizes)
            groups = [optimizer.params[end - size:end]
                      for size, end in zip(optimizer._group_sizes, ends)]
        else:
            groups = [group["params"] for group in optimizer.param_groups]
        ordered, numbers = [], []
        for group in groups:
            first = len(ordered)
            ordered += [names[id(p)] for p in group]
            dense = sorted(ordered[first:], key=lambda name: self.dense_order.get(name, 0))
            numbers += [first + dense.index(name) for name in ordered[first:]]
        return ordered, numbers

    def state(self, model, optimizer):
        """(model state, optimizer state) of the whole model, as a one-process run holds them;
        every rank must call it. In one process, the model's and optimizer's own (the optimizer
        may update more than the model: a distillation run's projections)."""
        if not self.is_parallel:
            return model.state_dict(), optimizer.state_dict()
        with self.gathered(optimizer):
            model_state = {name: self._whole(name, value.numpy())
                           for name, value in model.state_dict().items()}
        optimizer_state = optimizer.state_dict()
        names, numbers = self._optimizer_names(model, optimizer)
        optimizer_state["state"] = {
            numbers[index]: {key: self._whole(names[index], value) if key != "step" else value
                             for key, value in values.items()}
            for index, values in optimizer_state["state"].items()}
        return model_state, optimizer_state

    def load_state(self, model, optimizer, model_state, optimizer_state):
        """Load a whole model's ``state`` (from any layout) into this rank's shards."""
        if not self.is_parallel:
            model.load_state_dict(model_state)
            optimizer.load_state_dict(optimizer_state)
            return
        shapes = {name: tuple(value.shape) for name, value in model.state_dict().items()}
        names, numbers = self._optimizer_names(model, optimizer)
        saved = {int(number): values for number, values in optimizer_state["state"].items()}
        optimizer_state = {**optimizer_state, "state": {
            index: {key: value if key == "step" else self._mine(name, value, shapes[name])
                    for key, value in saved[numbers[index]].items()}
            for index, name in enumerate(names) if numbers[index] in saved}}
        with self.gathered(optimizer):
            model.load_state_dict({name: self._mine(name, value, shapes[name])
                                   for name, value in model_state.items()})
            optimizer.load_state_dict(optimizer_state)

    def dense_model(self, model, optimizer, make_model):
        """The whole model in one process (``make_model()`` loaded with the gathered state);
        every rank must call it. ``model`` itself without tp or ZeRO."""
        if self.tp == 1 and not self.zero and not self.expert_names:
            return model
        model_state, _ = self.state(model, optimizer)
        generator = mt_random.default_generator()
        stream = generator.get_state()
        dense = make_model()                     # its initial draws are overwritten, and undone
        generator.set_state(stream)
        dense.load_state_dict(model_state)
        return dense
