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
    """AdamW on ``model``'s parameters, data-parallel over ``comm`` with ZeRO ``stage`` 1, 2 or
    3; the other arguments are ``AdamW``'s. Rank 0's parameters are broadcast to every rank.

    A step::

        optimizer.zero_grad()
        with optimizer.gathered():          # stage 3: the full parameters; 1, 2: nothing to do
            loss = model(local_batch).loss  # each rank: the mean over its share of the batch
            loss.backward()
        optimizer.step()                    # reduce-scatter, AdamW on the partition, all-gather

    Equal to AdamW on one process over the global batch (the ranks' shares of equal size).
    Outside ``gathered()``, a stage-3 model's parameters are zero-byte placeholders of the right
    shape (they read as zeros).
    """

    def __init__(self, model, comm, stage, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2):
        if stage not in STAGES:
            raise ValueError(f"ZeroAdamW: stage must be 1, 2 or 3, got {stage!r}")
        self.comm, self.stage = comm, stage
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params or len({p.dtype for p in self.params}) != 1:
            raise ValueError("ZeroAdamW: the model needs trainable parameters, all of one dtype, "
                             f"got dtypes {sorted({str(p.dtype) for p in self.params})}")
        self.dtype = np.dtype(self.params[0].dtype)
        self.num_parameters = sum(p.size for p in self.params)
        self.partition = -(-self.num_parameters // comm.size)          # ceil: the last is padded
        flat = comm.broadcast(self._flatten(p.data for p in self.params), root=0)
        start = comm.rank * self.partition
        self.shard = Parameter(tensor(flat[start:start + self.partition].copy()))
        self.inner = AdamW([self.shard], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._scatter(flat) if stage < 3 else self._release()

    def _flatten(self, arrays):
        flat = np.zeros(self.partition * self.comm.size, dtype=self.dtype)
        offset = 0
        for array, p in zip(arrays, self.params):
            flat[offset:offset + p.size] = np.ravel(np.asarray(array))
            offset += p.size
        return flat

    def _scatter(self, flat):
        """The model's parameters set from the flat vector of all of them."""
        offset = 0
        for p in self.params:
            p.data = p.backend.asarray(flat[offset:offset + p.size].reshape(p.shape).copy())
            offset += p.size

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
        self._scatter(self.comm.all_gather(self.shard.numpy()))
        try:
            yield
        finally:
            self._release()

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        self.inner.zero_grad()

    def step(self):
        """Average the gradients over the ranks into this rank's partition (reduce-scatter),
        update the partition with AdamW, and (stages 1 and 2) all-gather the parameters."""
        gradients = self._flatten(np.zeros(p.shape, self.dtype) if p.grad is None
                                  else p.grad.numpy() for p in self.params)
        mine = self.comm.reduce_scatter(gradients) / self.comm.size
        self.shard.grad = tensor(mine, dtype=self.dtype)
        if self.stage >= 2:
            for p in self.params:
                p.grad = None                  # only the partition of the gradient is kept
        self.inner.step()
        if self.stage == 1:
            self.shard.grad = None                 # stage 1 keeps the full gradient instead
        if self.stage < 3:
            self._scatter(self.comm.all_gather(self.shard.numpy()))

    def state_bytes(self):
        """What this rank holds between steps, measured from its arrays, in bytes:
        ``{"parameters", "gradients", "optimizer"}`` (compare ``zero_state_bytes``)."""
        def held(array):
            return 0 if array is None or 0 in getattr(array, "strides", (1,)) else array.nbytes
        model = sum(held(p.data) for p in self.params)
        gradients = sum(held(None if p.grad is None else p.grad.data) for p in self.params)
        state = self.inner.state[self.shard] if self.shard in self.inner.state else {}
        return {"parameters": model + (self.shard.data.nbytes if self.stage == 3 else 0),
                "gradients": gradients + (0 if self.shard.grad is None
                                          else self.shard.grad.data.nbytes),
                "optimizer": sum(v.nbytes for v in state.values() if hasattr(v, "nbytes"))}
