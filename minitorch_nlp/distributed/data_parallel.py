"""Data parallelism: every rank holds the whole model and a slice of the global batch; after
``backward`` the gradients are averaged over the ranks, so that every rank takes the optimizer
step that one process would take on the global batch.

The gradients are all-reduced in buckets (as PyTorch's DistributedDataParallel does): the
parameters, last layers first (the order in which backward finishes them), are grouped into
flat buffers of at most ``bucket_bytes``, one all-reduce per buffer, so that a model of many
small tensors costs a few large messages instead of many small ones.
"""
from __future__ import annotations

import numpy as np

from .. import checks
from ..autograd import tensor
from ..autograd.function import memory_order, writable

__all__ = ["DataParallel"]


class DataParallel:
    """``module`` replicated over ``comm``'s ranks: its parameters are broadcast from rank 0 when
    wrapped; ``sync_gradients()`` (call it after ``backward``, before the optimizer step)
    replaces every parameter's gradient by its mean over the ranks. Calling the wrapper calls
    the module.

    Equal to one process on the global batch when each rank's loss is the mean over an equal
    share of it (then the mean of the ranks' gradients is the global mean's gradient). A
    parameter without a gradient on this rank contributes zeros.

    ``local`` parameters are each rank's own (``ExpertParallelMoE``'s experts): not broadcast,
    and their gradients, which already sum every rank's tokens (the all-to-all's backward
    brought them), are divided by the number of ranks instead of all-reduced.
    """

    def __init__(self, module, comm, bucket_bytes=25 * 2 ** 20, local=()):
        self.module, self.comm = module, comm
        self.bucket_bytes = checks.positive_int(bucket_bytes, "bucket_bytes", "DataParallel")
        own = {id(p) for p in local}
        self.local = [p for p in module.parameters() if id(p) in own]
        parameters = [p for p in module.parameters() if p.requires_grad and id(p) not in own]
        for parameter in parameters:   # in place: the parameter keeps its memory layout
            with writable(parameter) as data:
                data[...] = parameter.backend.asarray(comm.broadcast(
                    parameter.backend.to_numpy(parameter.data), root=0))
        self.buckets = self._buckets(parameters[::-1])

    def _buckets(self, parameters):
        buckets, sizes = [], []
        for parameter in parameters:
            nbytes = parameter.size * np.dtype(parameter.dtype).itemsize
            for i, bucket in enumerate(buckets):
                if bucket[0].dtype == parameter.dtype and sizes[i] + nbytes <= self.bucket_bytes:
                    bucket.append(parameter)
                    sizes[i] += nbytes
                    break
            else:
                buckets.append([parameter])
                sizes.append(nbytes)
        return buckets

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def sync_gradients(self):
        """Average every parameter's gradient over the ranks: one all-reduce per bucket."""
        for parameter in self.local:
            if parameter.grad is not None:
                parameter.grad = parameter.grad / self.comm.size
        for bucket in self.buckets:
            flat = np.concatenate([
                np.zeros(p.size, dtype=p.dtype) if p.grad is None
                else np.ravel(p.backend.to_numpy(p.grad.data)) for p in bucket])
            flat = self.comm.all_reduce(flat) / self.comm.size
            offset = 0
            for parameter in bucket:
                piece = np.array(flat[offset:offset + parameter.size].reshape(parameter.shape),
                                 order=memory_order(parameter.data))   # the parameter's layout
                parameter.grad = tensor(parameter.backend.asarray(piece), dtype=parameter.dtype,
                                        backend=parameter.backend)
                offset += parameter.size
