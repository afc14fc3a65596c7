"""Fused operations that run a backend kernel: softmax, log-softmax, layer norm, GELU.

A ``FusedFunction`` computes its forward with one kernel call and its first-order backward with
another. When a graph of the gradient must be recorded (``create_graph=True``), the kernels are no
use: the backward then rebuilds the operation from differentiable primitives (``composite``) and
differentiates that, so second derivatives come out right on every backend.
"""
from __future__ import annotations

import math

from . import grad_mode
from .function import Function


class Alias(Function):
    """Identity with a node of its own: marks where a composite backward should stop."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class FusedFunction(Function):
    """Subclasses define ``forward`` (calling a kernel, saving every input with ``save_inputs`` and
    their static arguments in ``ctx.static``), ``fast_backward(ctx, grad_array)`` returning raw
    arrays, and ``composite(*tensors, **static)`` built from primitives."""

    @classmethod
    def backward(cls, ctx, grad):
        from .tensor import Tensor

        if not grad_mode.is_grad_enabled():
            arrays = cls.fast_backward(ctx, grad.data)
            return tuple(None if a is None else Tensor._wrap(a, ctx.backend) for a in arrays)
        from .engine_api import grad as autograd_grad

        inputs = ctx.saved_tensors
        needs = ctx.needs_input_grad
        aliases = [Alias.apply(t) if need else t for t, need in zip(inputs, needs)]
        out = cls.composite(*aliases, **ctx.static)
        wanted = [a for a, need in zip(aliases, needs) if need]
        found = iter(autograd_grad(out, wanted, grad_outputs=grad, create_graph=True,
                                   allow_unused=True))
        return tuple(next(found) if need else None for need in needs)


class Softmax(FusedFunction):
    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.save_inputs(0)
        ctx.save_output()
        ctx.static = {"axis": axis}
        return ctx.backend.softmax(x, axis)

    @staticmethod
    def fast_backward(ctx, grad):
        return (ctx.backend.softmax_backward(ctx.output.data, grad, ctx.static["axis"]),)

    @staticmethod
    def composite(x, *, axis):
        shifted = x - x.max(axis=axis, keepdims=True).detach()
        e = shifted.exp()
        return e / e.sum(axis=axis, keepdims=True)


class LogSoftmax(FusedFunction):
    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.save_inputs(0)
        ctx.save_output()
        ctx.static = {"axis": axis}
        return ctx.backend.log_softmax(x, axis)

    @staticmethod
    def fast_backward(ctx, grad):
        return (ctx.backend.log_softmax_backward(ctx.output.data, grad, ctx.static["axis"]),)

    @staticmethod
    def composite(x, *, axis):
        return x - x.logsumexp(axis=axis, keepdims=True)


class LayerNorm(FusedFunction):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis (Ba et al., 2016)."""

    @staticmethod
    def forward(ctx, x, weight, bias, *, eps):
        ctx.save_inputs(0, 1, 2)
        ctx.static = {"eps": eps}
        y, ctx.xhat, ctx.rstd = ctx.backend.layer_norm(x, weight, bias, eps)
        return y

    @staticmethod
    def fast_backward(ctx, grad):
        _, weight, _ = ctx.saved_tensors
        dx, dweight, dbias = ctx.backend.layer_norm_backward(
            grad, ctx.xhat, ctx.rstd, None if weight is None else weight.data)
        needs = ctx.needs_input_grad
        return (dx if needs[0] else None, dweight if needs[1] else None,
                dbias if needs[2] else None)

    @staticmethod
    def composite(x, weight, bias, *, eps):
        centred = x - x.mean(axis=-1, keepdims=True)
        var = (centred * centred).mean(axis=-1, keepdims=True)
        y = centred * (var + eps).rsqrt()
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
        return y


class Gelu(FusedFunction):
    """GELU (Hendrycks & Gimpel, 2016): x Phi(x), exactly with erf or with the tanh approximation."""

    @staticmethod
    def forward(ctx, x, *, approximate):
        ctx.save_inputs(0)
        ctx.static = {"approximate": approximate}
        return ctx.backend.gelu(x, approximate)

    @staticmethod
    def fast_backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (ctx.backend.gelu_backward(x.data, grad, ctx.static["approximate"]),)

    @staticmethod
    def composite(x, *, approximate):
        if approximate == "tanh":
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
            return 0.5 * x * (1.0 + inner.tanh())
        return 0.5 * x * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())
