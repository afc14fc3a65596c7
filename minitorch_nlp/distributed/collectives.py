"""The collectives as autograd Functions: what the parallel methods are built from.

Megatron-LM (Shoeybi et al., 2019, section 3 and figure 3) needs two conjugate operators around
each parallel sub-block:

* f = ``copy_to_parallel``: the identity forward, an all-reduce of the gradient backward (the
  input feeds every rank's shard, so its gradient is the sum of the shards' gradients);
* g = ``reduce_from_parallel``: an all-reduce forward (the partial outputs of the shards are
  summed), the identity backward.

``all_gather`` and ``reduce_scatter`` are each other's backward (a sequence- or
vocabulary-sharded tensor gathered, its gradient summed and split back), and ``all_to_all`` is
its own backward (GShard's dispatch of tokens to the experts' ranks and its combine).

Each takes the communicator as ``comm``; the backward runs collectives too, so every rank must
call ``backward`` (MPI's rule: every rank calls every collective).
"""
from __future__ import annotations

from ..autograd import Tensor
from ..autograd.function import Function

__all__ = ["all_gather", "all_to_all", "copy_to_parallel", "reduce_from_parallel",
           "reduce_scatter"]


class _CopyToParallel(Function):
    @staticmethod
    def forward(ctx, x, *, comm):
        ctx.comm = comm
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return reduce_from_parallel(grad, ctx.comm)


class _ReduceFromParallel(Function):
    @staticmethod
    def forward(ctx, x, *, comm):
        ctx.comm = comm
        return comm.all_reduce(x)

    @staticmethod
    def backward(ctx, grad):
        return copy_to_parallel(grad, ctx.comm)


class _AxisCollective(Function):
    """all-gather, reduce-scatter or all-to-all along ``axis`` (``op``: the communicator's
    method); backward, the collective that undoes its data movement (``_BACKWARD``)."""

    @staticmethod
    def forward(ctx, x, *, comm, op, axis):
        ctx.comm, ctx.op, ctx.axis = comm, op, axis
        return getattr(comm, op)(x, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        return _AxisCollective.apply(grad, comm=ctx.comm, op=_BACKWARD[ctx.op], axis=ctx.axis)


_BACKWARD = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather",
             "all_to_all": "all_to_all"}


def _tensor(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: x must be a Tensor, got {type(x).__name__}")
    return x


def copy_to_parallel(x, comm):
    """Megatron's f: ``x`` unchanged forward; backward, the gradient all-reduced over ``comm``."""
    return _CopyToParallel.apply(_tensor(x, "copy_to_parallel"), comm=comm)


def reduce_from_parallel(x, comm):
    """Megatron's g: ``x`` all-reduced (summed) over ``comm`` forward; backward, the identity."""
    return _ReduceFromParallel.apply(_tensor(x, "reduce_from_parallel"), comm=comm)


def all_gather(x, comm, axis=0):
    """Every rank's ``x`` concatenated along ``axis``; backward, reduce-scatter."""
    return _AxisCollective.apply(_tensor(x, "all_gather"), comm=comm, op="all_gather", axis=axis)


def reduce_scatter(x, comm, axis=0):
    """``x`` summed over the ranks and split along ``axis``, this rank's part; backward,
    all-gather."""
    return _AxisCollective.apply(_tensor(x, "reduce_scatter"), comm=comm, op="reduce_scatter",
                                 axis=axis)


def all_to_all(x, comm, axis=0):
    """Part j of ``x`` (split along ``axis``) to rank j; backward, the same exchange of the
    gradient, which sends each part back where it came from."""
    return _AxisCollective.apply(_tensor(x, "all_to_all"), comm=comm, op="all_to_all", axis=axis)
