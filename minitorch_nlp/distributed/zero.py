"""ZeRO, the Zero Redundancy Optimizer (Rajbhandari et al., 2020), behind T-NLG (the survey's
V-E): data parallelism without every rank holding every copy of the model state.

Plain data parallelism keeps on each of N ranks all Psi parameters, their gradients and the
optimizer's state: with float32 AdamW, 4 + 4 + 8 bytes per parameter (the paper's mixed-precision
Adam counts 2 + 2 + K with K = 12). ZeRO splits the flat vector of parameters into N equal
partitions, and rank r owns partition r:

* stage 1 (P_os): the optimizer state of its partition only -- 4 Psi + 4 Psi + 8 Psi / N;
* stage 2 (P_os+g): also only its partition of the averaged gradient -- 4 Psi + 12 Psi / N;
* stage 3 (P_os+g+p): also only its partition of the parameters -- 16 Psi / N.

Each step: the gradients are reduce-scattered (rank r receives the sum of partition r, divided
by N: the data-parallel mean), rank r runs AdamW on its partition (this library's ``AdamW`` on
one flat Parameter: the update is element-wise, so it is exactly AdamW on the whole model), and
the updated partitions are all-gathered back into the model (stages 1 and 2); stage 3 keeps its
partition and all-gathers the full parameters only inside ``gathered()``, around forward and
backward.

Two simplifications, which ``state_bytes`` makes visible: the gradients are reduce-scattered
after ``backward`` (the paper's stage 2 does it bucket by bucket during backward, so that the full
gradient never exists), and stage 3 gathers every parameter for the whole forward and backward
(the paper gathers one layer at a time and frees it after use). What ``state_bytes`` measures is
what a rank holds between steps.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import checks
from ..autograd import tensor
from ..autograd.function import memory_order
from ..nn import Parameter
from ..optim import AdamW

__all__ = ["ZeroAdamW", "zero_state_bytes"]

STAGES = (1, 2, 3)


def zero_state_bytes(num_parameters, ranks, stage, *, parameter_bytes=4, gradient_bytes=4,
                     optimizer_bytes=8):
    """The paper's model-state memory per rank (section 5, figure 1), in bytes, by part:
    ``{"parameters", "gradients", "optimizer"}`` for Psi = ``num_parameters`` on N = ``ranks``.
    Stage 0 is plain data parallelism. Defaults: float32 AdamW (4 + 4 + 8); the paper's
    mixed precision is ``parameter_bytes=2, gradient_bytes=2, optimizer_bytes=12``."""
    where = "zero_state_bytes"
    psi = checks.positive_int(num_parameters, "num_parameters", where)
    ranks = checks.positive_int(ranks, "ranks", where)
    if stage not in (0,) + STAGES:
        raise ValueError(f"{where}: stage must be 0 (data parallelism), 1, 2 or 3, got {stage!r}")
    divided = {"parameters": stage >= 3, "gradients": stage >= 2, "optimizer": stage >= 1}
    per_parameter = {"parameters": parameter_bytes, "gradients": gradient_bytes,
                     "optimizer": optimizer_bytes}
    return {part: per_parameter[part] * psi / (ranks if divided[part] else 1)
            for part in per_parameter}


class ZeroAdamW:
    """AdamW on ``params``, data-parallel over ``comm`` with ZeRO ``stage`` 1, 2 or 3. ``params``
    is a model (all its trainable parameters, one group) or a list of parameter groups as
    ``AdamW`` takes them (dicts with ``"params"`` and, optionally, ``"weight_decay"``); the other
    arguments are ``AdamW``'s. Rank 0's parameters are broadcast to every rank.

    A step::

        optimizer.zero_grad()
        with optimizer.gathered():          # stage 3: the full parameters; 1, 2: nothing to do
            loss = model(local_batch).loss  # each rank: the mean over its share of the batch
            loss.backward()
        optimizer.step()                    # reduce-scatter, AdamW on the partition, all-gather

    Equal to AdamW on one process over the global batch (the ranks' shares of equal size).
    Outside ``gathered()``, a stage-3 model's parameters are zero-byte placeholders of the right
    shape (they read as zeros).

    The partition of rank r is cut at the groups' boundaries into one flat piece per group, so
    that ``inner`` -- the ``AdamW`` on this rank's pieces, one parameter group each, with its
    group's weight decay -- has the groups of an ``AdamW`` on the whole model (give ``inner`` to
    a learning-rate scheduler). ``state_dict`` and ``load_state_dict`` read and write that whole
    model's ``AdamW`` state (all-gathered from the partitions), so a checkpoint does not depend on
    the number of ranks.
    """

    def __init__(self, params, comm, stage, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2):
        if stage not in STAGES:
            raise ValueError(f"ZeroAdamW: stage must be 1, 2 or 3, got {stage!r}")
        self.comm, self.stage = comm, stage
        params = list(params.parameters() if hasattr(params, "parameters") else params)
        groups = ([dict(group) for group in params] if params and isinstance(params[0], dict)
                  else [{"params": params}])
        for group in groups:
            group["params"] = [p for p in group["params"] if p.requires_grad]
        self.params = [p for group in groups for p in group["params"]]
        if not self.params or len({p.dtype for p in self.params}) != 1:
            raise ValueError("ZeroAdamW: the model needs trainable parameters, all of one dtype, "
                             f"got dtypes {sorted({str(p.dtype) for p in self.params})}")
        self.dtype = np.dtype(self.params[0].dtype)
        self._orders = [memory_order(p.data) for p in self.params]   # kept through releases
        self.num_parameters = sum(p.size for p in self.params)
        self.partition = -(-self.num_parameters // comm.size)          # ceil: the last is padded
        flat = comm.broadcast(self._flatten(p.data for p in self.params), root=0)
        self.start = comm.rank * self.partition
        self._group_sizes = [len(group["params"]) for group in groups]
        self.pieces = [Parameter(tensor(piece)) for piece in self._cut(flat)]
        self.inner = AdamW([{**{k: v for k, v in group.items() if k != "params"},
                             "params": [piece]} for group, piece in zip(groups, self.pieces)],
                           lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._scatter(flat) if stage < 3 else self._release()

    def _cut(self, flat):
        """This rank's partition of the flat vector ``flat``, cut into one copy per group (the
        padding past the last parameter goes with the last group)."""
        bounds, offset = [], 0
        parameters = iter(self.params)
        for count in self._group_sizes:
            offset += sum(next(parameters).size for _ in range(count))
            bounds.append(offset)
        bounds[-1] = len(flat)
        end, pieces, low = self.start + self.partition, [], 0
        for high in bounds:
            pieces.append(flat[min(max(low, self.start), end):max(min(high, end), self.start)]
                          .copy())
            low = high
        return pieces

    def shard(self):
        """This rank's partition of the flat parameters (a NumPy array)."""
        return np.concatenate([piece.numpy() for piece in self.pieces])

    def _flatten(self, arrays):
        flat = np.zeros(self.partition * self.comm.size, dtype=self.dtype)
        offset = 0
        for array, p in zip(arrays, self.params):
            flat[offset:offset + p.size] = np.ravel(np.asarray(array))
            offset += p.size
        return flat

    def _unflatten(self, flat):
        """The per-parameter arrays of the flat vector ``flat`` (copies, each in the memory
        layout its parameter had, e.g. a column-major ``Linear`` weight)."""
        arrays, offset = [], 0
        for p, order in zip(self.params, self._orders):
            arrays.append(np.array(flat[offset:offset + p.size].reshape(p.shape), order=order))
            offset += p.size
        return arrays

    def _scatter(self, flat):
        """The model's parameters set from the flat vector of all of them."""
        for p, array in zip(self.params, self._unflatten(flat)):
            p.data = p.backend.asarray(array)

    def _release(self):
        for p in self.params:
            p.data = np.broadcast_to(np.zeros((), dtype=self.dtype), p.shape)

    @contextlib.contextmanager
    def gathered(self):
        """Stage 3: every parameter all-gathered from the partitions for the duration (forward
        and backward), released afterwards. Stages 1 and 2 hold the parameters anyway."""
        if self.stage < 3:
            yield
            return
        self._scatter(self.comm.all_gather(self.shard()))
        try:
            yield
        finally:
            self._release()

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        self.inner.zero_grad()

    def step(self, before_update=None):
        """Average the gradients over the ranks into this rank's partition (reduce-scatter),
        update the partition with AdamW, and (stages 1 and 2) all-gather the parameters.
        ``before_update(gradient)``, when given, returns the partition's averaged gradient to
        use instead (e.g. clipped to a norm computed over every rank's partition)."""
        gradients = self._flatten(np.zeros(p.shape, self.dtype) if p.grad is None
                                  else p.grad.numpy() for p in self.params)
        mine = self.comm.reduce_scatter(gradients) / self.comm.size
        if before_update is not None:
            mine = before_update(mine)
        offset = 0
        for piece in self.pieces:
            piece.grad = tensor(mine[offset:offset + piece.size], dtype=self.dtype)
            offset += piece.size
        if self.stage >= 2:
            for p in self.params:
                p.grad = None                  # only the partition of the gradient is kept
        self.inner.step()
        if self.stage == 1:
            for piece in self.pieces:
                piece.grad = None                  # stage 1 keeps the full gradient instead
        if self.stage < 3:
            self._scatter(self.comm.all_gather(self.shard()))

    def state_dict(self):
        """The ``AdamW`` state of the whole model, as ``AdamW(params).state_dict()`` gives it
        (parameters numbered in the groups' order), all-gathered from the partitions: every rank
        must call it."""
        inner = self.inner.state_dict()
        state = {}
        if all(piece in self.inner.state for piece in self.pieces):
            step = self.inner.state[self.pieces[0]]["step"]
            moments = {key: self._unflatten(self.comm.all_gather(np.concatenate(
                [np.asarray(self.inner.state[piece][key]) for piece in self.pieces])))
                for key in ("exp_avg", "exp_avg_sq")}
            state = {i: {"step": step, **{key: arrays[i] for key, arrays in moments.items()}}
                     for i in range(len(self.params))}
        numbers = iter(range(len(self.params)))
        groups = [{**group, "params": [next(numbers) for _ in range(count)]}
                  for group, count in zip(inner["param_groups"], self._group_sizes)]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore what ``state_dict`` (of any number of ranks, or of a plain ``AdamW`` on the
        same groups) gave, and take this rank's partition of the model's current parameters
        (call it where they are whole: inside ``gathered()`` for stage 3)."""
        groups = list(state_dict["param_groups"])
        if [len(group["params"]) for group in groups] != self._group_sizes:
            raise ValueError(f"ZeroAdamW.load_state_dict: the state dict's groups hold "
                             f"{[len(group['params']) for group in groups]} parameters, this "
                             f"optimizer's {self._group_sizes}")
        order = [int(i) for group in groups for i in group["params"]]
        saved = state_dict["state"]
        state = {}
        if saved:
            moments = {key: self._cut(self._flatten(np.asarray(saved[i][key]) for i in order))
                       for key in ("exp_avg", "exp_avg_sq")}
            state = {g: {"step": saved[order[0]]["step"], "exp_avg": moments["exp_avg"][g],
                         "exp_avg_sq": moments["exp_avg_sq"][g]}
                     for g in range(len(self.pieces))}
        self.inner.load_state_dict({"state": state, "param_groups": [
            {**group, "params": [g]} for g, group in enumerate(groups)]})
        for piece, values in zip(self.pieces, self._cut(self._flatten(
                p.numpy() for p in self.params))):
            piece.data = piece.backend.asarray(values)

    def state_bytes(self):
        """What this rank holds between steps, measured from its arrays, in bytes:
        ``{"parameters", "gradients", "optimizer"}`` (compare ``zero_state_bytes``)."""
        def held(array):
            return 0 if array is None or 0 in getattr(array, "strides", (1,)) else array.nbytes
        model = sum(held(p.data) for p in self.params)
        gradients = sum(held(None if p.grad is None else p.grad.data) for p in self.params)
        pieces = sum(piece.data.nbytes for piece in self.pieces)
        return {"parameters": model + (pieces if self.stage == 3 else 0),
                "gradients": gradients + sum(0 if piece.grad is None else piece.grad.data.nbytes
                                             for piece in self.pieces),
                "optimizer": sum(v.nbytes for piece in self.pieces
                                 for v in self.inner.state[piece].values()
                                 if piece in self.inner.state and hasattr(v, "nbytes"))}
