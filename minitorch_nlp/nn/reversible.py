"""Reversible residual layers (Gomez et al., 2017, RevNets; the Reformer, Kitaev et al., 2020,
section 4; the survey's eq 104-105), the Reformer's chunked feed-forward network and its axial
position embeddings.

A reversible block keeps two streams and computes

    Y1 = X1 + F(X2)        Y2 = X2 + G(Y1)                  (eq 104; F attention, G feed-forward)

whose inputs follow from its outputs:

    X2 = Y2 - G(Y1)        X1 = Y1 - F(X2)                  (eq 105)

so a stack of them need not keep any layer's activations for backward: ``ReversibleStack`` runs
forward without recording, keeps only the last outputs, and its backward walks the blocks from
the top, rebuilding each block's inputs from its outputs and recomputing F and G to take their
gradients. Activation memory is then flat in depth. (The survey writes eq 104-105 with f
throughout and the streams crossed; this is the RevNet / Reformer form.)

Recomputation needs F and G to compute, in backward, the same function they computed forward.
Random draws are replayed from the default generator's saved state. A module that changes
itself on a schedule of calls (a Performer redrawing its random features every k training
calls) exposes ``advance_schedule()``: the stack calls it once per forward, before any block
runs, and while the stack runs forward or recomputes, ``schedules_frozen()`` is True and such a
module leaves its schedule alone.
"""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable

import numpy as np

from .. import checks, cookbook
from ..autograd import Function, Tensor, concatenate, empty, enable_grad, grad, no_grad
from ..autograd import random as mt_random
from . import init
from .containers import ModuleList
from .module import Module
from .parameter import Parameter
from .transformer import _PositionTable

__all__ = ["AxialPositionEmbedding", "ChunkedFeedForward", "ReversibleBlock", "ReversibleStack",
           "schedules_frozen"]

_frozen = [False]


def schedules_frozen() -> bool:
    """True while a ``ReversibleStack`` runs its blocks forward or recomputes them in backward:
    a module with ``advance_schedule()`` must not advance it then (the stack already has)."""
    return _frozen[0]


@contextlib.contextmanager
def _frozen_schedules():
    before, _frozen[0] = _frozen[0], True
    try:
        yield
    finally:
        _frozen[0] = before


class ReversibleBlock(Module):
    """One reversible block from two residual functions ``f`` and ``g``, each a module mapping
    (batch, time, d) to itself (in the Reformer, f = attention after a LayerNorm, g = the
    feed-forward network after a LayerNorm). ``forward(x1, x2, **kwargs)`` passes ``kwargs``
    (``key_mask``, ``causal`` ...) to ``f``."""

    def __init__(self, f: Module, g: Module) -> None:
        super().__init__()
        self.f, self.g = f, g

    @cookbook.equation(104)
    def forward(self, x1: Tensor, x2: Tensor, **kwargs) -> tuple[Tensor, Tensor]:
        """(Y1, Y2) = (X1 + F(X2), X2 + G(Y1)) (eq 104)."""
        y1 = x1 + self.f(x2, **kwargs)
        return y1, x2 + self.g(y1)

    @cookbook.equation(105)
    def inverse(self, y1: Tensor, y2: Tensor, **kwargs) -> tuple[Tensor, Tensor]:
        """(X1, X2) = (Y1 - F(X2), Y2 - G(Y1)) with X2 computed first (eq 105)."""
        x2 = y2 - self.g(y1)
        return y1 - self.f(x2, **kwargs), x2


def _random_state():
    return copy.deepcopy(mt_random.default_generator().numpy_rng.bit_generator.state)


def _set_random_state(state):
    mt_random.default_generator().numpy_rng.bit_generator.state = copy.deepcopy(state)


class _Reversible(Function):
    """The whole stack as one node: forward unrecorded, backward by reconstruction."""

    multi_output = True

    @staticmethod
    def forward(ctx, x1, x2, *parameters, stack, kwargs):
        ctx.stack, ctx.kwargs = stack, kwargs
        ctx.parameters_in = ctx._inputs[2:]
        ctx.parameters = [p for p in ctx.parameters_in if p.requires_grad]
        # the generator's state before each F and G, so that recomputing them draws the same
        # dropout masks and LSH rotations as this forward did
        ctx.states = []
        backend = ctx.backend
        y1, y2 = Tensor._wrap(x1, backend), Tensor._wrap(x2, backend)
        with no_grad():
            for block in stack.blocks:
                f_state = _random_state()
                y1 = y1 + block.f(y2, **kwargs)
                ctx.states.append((f_state, _random_state()))
                y2 = y2 + block.g(y1)
        ctx.outputs = (y1.data, y2.data)
        return y1.data, y2.data

    @staticmethod
    def backward(ctx, grads):
        with _frozen_schedules():
            return _Reversible._rebuild_and_differentiate(ctx, grads)

    @staticmethod
    def _rebuild_and_differentiate(ctx, grads):
        backend = ctx.backend
        y1, y2 = (Tensor._wrap(a, backend) for a in ctx.outputs)
        dy1, dy2 = (g if g is not None else Tensor._wrap(backend.xp.zeros_like(a), backend)
                    for g, a in zip(grads, ctx.outputs))
        parameters = ctx.parameters
        totals = [None] * len(parameters)
        after = _random_state()
        for block, (f_state, g_state) in zip(reversed(ctx.stack.blocks), reversed(ctx.states)):
            with enable_grad():
                z1 = y1.detach().requires_grad_()
                _set_random_state(g_state)
                g_out = block.g(z1)                                        # G(Y1)
                found = grad([g_out], [z1] + parameters, [dy2], allow_unused=True)
                dz1 = dy1 + found[0]
                _accumulate(totals, found[1:])
                x2 = (y2 - g_out.detach()).requires_grad_()                # X2 = Y2 - G(Y1)
                _set_random_state(f_state)
                f_out = block.f(x2, **ctx.kwargs)                          # F(X2)
                found = grad([f_out], [x2] + parameters, [dz1], allow_unused=True)
                dx2 = dy2 + found[0]
                _accumulate(totals, found[1:])
            y1, y2 = (z1 - f_out).detach(), x2.detach()                    # X1 = Y1 - F(X2)
            dy1, dy2 = dz1, dx2
        _set_random_state(after)
        by_id = {id(p): g for p, g in zip(parameters, totals)}
        return (dy1, dy2, *(by_id.get(id(p)) for p in ctx.parameters_in))


def _accumulate(totals, grads):
    for i, g in enumerate(grads):
        if g is not None:
            totals[i] = g if totals[i] is None else totals[i] + g


class ReversibleStack(Module):
    """Reversible blocks in turn (the Reformer's layers). ``forward(x1, x2, **kwargs)`` returns
    (Y1, Y2) of the last block; with ``recompute=True`` (the default, while gradients are
    recorded) no block's activations are kept: backward rebuilds them from the outputs (eq 105)
    and recomputes F and G, the random draws (dropout, LSH rotations) replayed from the default
    generator's saved state (a part drawing from its own ``mt.Generator`` would draw anew: give
    it a seed instead). ``recompute=False`` records the graph as usual (for comparison).
    Gradients through the stack are first order only."""

    def __init__(self, blocks: Iterable[ReversibleBlock], recompute: bool = True) -> None:
        super().__init__()
        self.blocks = ModuleList(blocks)
        self.recompute = bool(recompute)

    def forward(self, x1: Tensor, x2: Tensor, **kwargs) -> tuple[Tensor, Tensor]:
        if x1.shape != x2.shape:
            raise ValueError(f"ReversibleStack: the two streams must have the same shape, got "
                             f"{x1.shape} and {x2.shape}")
        if not self.recompute:
            for block in self.blocks:
                x1, x2 = block(x1, x2, **kwargs)
            return x1, x2
        for module in self.modules():
            advance = getattr(module, "advance_schedule", None)
            if advance is not None:
                advance()
        parameters = list(self.parameters())
        with _frozen_schedules():
            return _Reversible.apply(x1, x2, *parameters, stack=self, kwargs=kwargs)


class ChunkedFeedForward(Module):
    """``feed_forward`` applied to ``chunk_size`` positions at a time and the pieces concatenated
    (the Reformer's chunked feed-forward, section 5): the same output, while the (chunk, d_ff)
    hidden activations are the largest thing alive instead of (time, d_ff)."""

    def __init__(self, feed_forward: Module, chunk_size: int) -> None:
        super().__init__()
        self.feed_forward = feed_forward
        self.chunk_size = checks.positive_int(chunk_size, "chunk_size", "ChunkedFeedForward")

    def forward(self, x: Tensor) -> Tensor:
        time = x.shape[1]
        if time <= self.chunk_size:
            return self.feed_forward(x)
        return concatenate([self.feed_forward(x[:, start:start + self.chunk_size])
                            for start in range(0, time, self.chunk_size)], axis=1)

    def extra_repr(self):
        return f"chunk_size={self.chunk_size}"


class AxialPositionEmbedding(_PositionTable):
    """The Reformer's axial position embeddings: a table for n = n1 * n2 positions from two small
    ones. Position p = i1 * n2 + i2 gets the concatenation [rows[i1]; columns[i2]] of a row
    vector (``rows``, n1 x d1) and a column vector (``columns``, n2 x d2), d1 + d2 = d_model.
    That is n1 d1 + n2 d2 numbers where a full table has n d_model (for 64K positions of 1024
    features, 256 x 256 factors take 0.26M numbers where the full table would take 67M).

    ``shape`` is (n1, n2), ``dims`` is (d1, d2), and the vectors start as N(0, std^2).
    ``forward(x, start=0, position_ids=None)`` adds the rows of positions ``start .. start + time
    - 1`` (or ``position_ids``), as ``LearnedPositionalEmbedding`` does. Any time up to n1 * n2
    works (HuggingFace's Reformer asks for exactly n1 * n2 in training).
    """

    def __init__(self, shape: tuple[int, int], dims: tuple[int, int], std: float = 0.02) -> None:
        name = "AxialPositionEmbedding"
        shape, dims = tuple(shape), tuple(dims)
        if len(shape) != 2 or len(dims) != 2:
            raise ValueError(f"{name}: shape (n1, n2) and dims (d1, d2) need two entries each, "
                             f"got shape={shape}, dims={dims}")
        n1, n2 = (checks.positive_int(n, "shape", name) for n in shape)
        d1, d2 = (checks.positive_int(d, "dims", name) for d in dims)
        super().__init__(n1 * n2, d1 + d2)
        self.shape, self.dims = (n1, n2), (d1, d2)
        self.rows = Parameter(init.normal_(empty(n1, d1), std=std))
        self.columns = Parameter(init.normal_(empty(n2, d2), std=std))

    @property
    def table(self) -> Tensor:
        """The (n1 * n2, d1 + d2) table: row p is [rows[p // n2]; columns[p % n2]]."""
        positions = np.arange(self.max_len)
        return concatenate([self.rows[positions // self.shape[1]],
                            self.columns[positions % self.shape[1]]], axis=1)

    def extra_repr(self):
        return f"shape={self.shape}, dims={self.dims}"
