"""Fused operations that run a backend kernel: softmax, log-softmax, layer norm, GELU.

A ``FusedFunction`` computes its forward with one kernel call and its first-order backward with
another. When a graph of the gradient must be recorded (``create_graph=True``), the kernels are no
use: the backward then rebuilds the operation from differentiable primitives (``composite``) and
differentiates that, so second derivatives come out right on every backend.
"""
from __future__ import annotations

import math

from . import dtypes, grad_mode
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
        peak = x.max(axis=axis, keepdims=True).detach()
        e = (x - peak.masked_fill(~peak.isfinite(), 0.0)).exp()
        total = e.sum(axis=axis, keepdims=True)
        return e / total.masked_fill(total == 0, 1.0)  # all -inf rows give 0, as the kernel does


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


class Logcumsumexp(FusedFunction):
    """log(cumsum(exp(x))) along ``axis`` as running ``logaddexp``s: each step is shifted by the
    running maximum, so entries far below a later maximum stay exact (no overflow at 1e4; -inf
    entries give -inf until a finite one arrives, and get gradient 0)."""

    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.save_inputs(0)
        ctx.save_output()
        ctx.static = {"axis": axis}
        return running_logaddexp(ctx.backend.xp, x, axis)

    @staticmethod
    def fast_backward(ctx, grad):
        # dx_j = sum_{i >= j} g_i e^(x_j - y_i) = e^(x_j - y_j) S_j with the reversed recurrence
        # S_j = g_j + e^(y_j - y_{j+1}) S_{j+1}: only differences of neighbours are
        # exponentiated (each <= 0, as y never decreases), so logits of 1e9 keep their digits;
        # outputs y_j = -inf (an all -inf prefix) send back nothing. Summed in float64.
        xp = ctx.backend.xp
        axis = ctx.static["axis"]
        (x,) = ctx.saved_tensors
        x, y, grad = (xp.moveaxis(a.astype(xp.float64), axis, -1)
                      for a in (x.data, ctx.output.data, grad))
        live = y != -xp.inf
        with dtypes.quiet(xp, invalid="ignore"):
            decay = xp.where(live[..., :-1], xp.exp(y[..., :-1] - y[..., 1:]), 0.0)
            within = xp.where(live, xp.exp(x - y), 0.0)
        tails = grad.copy()
        for j in range(tails.shape[-1] - 2, -1, -1):
            tails[..., j] += decay[..., j] * tails[..., j + 1]
        return (xp.moveaxis(within * tails, -1, axis).astype(ctx.saved_tensors[0].dtype),)

    @staticmethod
    def composite(x, *, axis):
        # y_i = logsumexp_j (x_j + 0 if j <= i else -inf): a (T, T) form, twice differentiable
        xp = x.backend.xp
        steps = x.shape[axis]
        later = xp.where(xp.tri(steps, dtype=bool), 0.0, -xp.inf).astype(x.dtype)
        rows = x.swapaxes(axis, -1).unsqueeze(-2) + later
        return rows.logsumexp(axis=-1).swapaxes(axis, -1)


def running_logaddexp(xp, x, axis):
    """``logaddexp.accumulate`` along ``axis``: NumPy's ufunc method, a loop over the axis on
    array libraries whose ufuncs have no ``accumulate`` (CuPy)."""
    if xp.__name__ == "numpy":
        return xp.logaddexp.accumulate(x, axis=axis)
    steps = xp.moveaxis(x, axis, 0)
    out = xp.empty_like(steps)
    out[0] = steps[0]
    for i in range(1, steps.shape[0]):
        out[i] = xp.logaddexp(out[i - 1], steps[i])
    return xp.moveaxis(out, 0, axis)


class LayerNorm(FusedFunction):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis (Ba et al., 2016)."""

    @staticmethod
    def forward(ctx, x, weight, bias, *, eps):
        ctx.save_inputs(0, 1, 2)
        ctx.static = {"eps": eps}
        y, state = ctx.backend.layer_norm(x, weight, bias, eps)
        if ctx.recorded:   # else no backward will run: nothing to keep
            ctx.kernel_state = state
        return y

    @staticmethod
    def fast_backward(ctx, grad):
        x, weight, _ = ctx.saved_tensors
        dx, dweight, dbias = ctx.backend.layer_norm_backward(
            grad, x.data, ctx.kernel_state, None if weight is None else weight.data)
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
    """GELU (Hendrycks & Gimpel, 2016): x Phi(x), exactly with erf or with the tanh
    approximation."""

    @staticmethod
    def forward(ctx, x, *, approximate):
        ctx.save_inputs(0)
        ctx.static = {"approximate": approximate}
        if x.ndim == 0:  # kernels write in place; a ufunc on a 0-d array returns a scalar
            return ctx.backend.gelu(x.reshape(1), approximate).reshape(())
        return ctx.backend.gelu(x, approximate)

    @staticmethod
    def fast_backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if x.ndim == 0:
            return (ctx.backend.gelu_backward(x.data.reshape(1), grad.reshape(1),
                                              ctx.static["approximate"]).reshape(()),)
        return (ctx.backend.gelu_backward(x.data, grad, ctx.static["approximate"]),)

    @staticmethod
    def composite(x, *, approximate):
        if approximate == "tanh":
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
            return 0.5 * x * (1.0 + inner.tanh())
        return 0.5 * x * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())


class BiasGelu(FusedFunction):
    """gelu(x + bias) in one pass (the feed-forward activation after a linear layer)."""

    @staticmethod
    def forward(ctx, x, bias, *, approximate):
        ctx.save_inputs(0, 1)
        ctx.static = {"approximate": approximate}
        return ctx.backend.bias_gelu(x, bias, approximate)

    @staticmethod
    def fast_backward(ctx, grad):
        x, bias = ctx.saved_tensors
        dx = ctx.backend.bias_gelu_backward(x.data, bias.data, grad, ctx.static["approximate"])
        return dx, dx  # the engine sums the bias gradient over the broadcast rows

    @staticmethod
    def composite(x, bias, *, approximate):
        return Gelu.composite(x + bias, approximate=approximate)


class CrossEntropy(FusedFunction):
    """Per-row cross-entropy of logits (N, C) against integer targets (N,), with label smoothing
    (Szegedy et al., 2016): (1 - eps) * -log p[t] + eps * mean_c(-log p[c]); rows whose target is
    ``ignore_index`` give 0."""

    @staticmethod
    def forward(ctx, logits, target, *, ignore_index, label_smoothing):
        ctx.save_inputs(0, 1)
        ctx.static = {"ignore_index": ignore_index, "label_smoothing": label_smoothing}
        loss, ctx.kernel_state = ctx.backend.cross_entropy(logits, target, ignore_index,
                                                           label_smoothing)
        return loss

    @staticmethod
    def fast_backward(ctx, grad):
        from .tensor import Tensor

        _, target = ctx.saved_tensors
        target = target.data if isinstance(target, Tensor) else target  # as given to forward
        return (ctx.backend.cross_entropy_backward(ctx.kernel_state, target, grad,
                                                   ctx.static["ignore_index"],
                                                   ctx.static["label_smoothing"]), None)

    @staticmethod
    def composite(logits, target, *, ignore_index, label_smoothing):
        xp = logits.backend.xp
        log_probs = logits.log_softmax(-1)
        keep = target != ignore_index
        picked = log_probs[xp.arange(target.shape[0]), xp.where(keep, target, 0)]
        loss = -picked if not label_smoothing else (
            -(1 - label_smoothing) * picked - label_smoothing * log_probs.mean(axis=-1))
        return loss * keep


def visible_keys(xp, q_time, k_time, causal, key_mask):
    """Which keys each query sees under the masks the fused attention kernels apply inside: a
    bool array broadcastable to (batch, heads, q_time, k_time), the causal mask (queries aligned
    with the last keys) and the key mask (batch, k_time), True = visible."""
    allowed = xp.ones((1, 1, q_time, k_time), dtype=bool)
    if causal:
        allowed = allowed & xp.tri(q_time, k_time, k=k_time - q_time, dtype=bool)
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    return allowed


class Attention(FusedFunction):
    """Scaled dot-product attention softmax(q k^T * scale + bias) v on (B, H, T, D) arrays
    (Vaswani et al., 2017, eq. 1), with a causal mask and a key mask (B, Tk; True = real token)
    applied inside the kernel, and an additive score bias (None, or a tensor broadcastable to
    (B, H, Tq, Tk) of q's dtype: T5's position bias, Transformer-XL's positional terms, a mask
    as -inf entries) added inside it too. The bias's gradient is the scores' gradient summed
    over the axes it was broadcast along. A query whose keys are all masked gets output 0 and
    gradient 0."""

    @staticmethod
    def forward(ctx, q, k, v, key_mask, bias, *, scale, causal):
        ctx.save_inputs(0, 1, 2, 3, 4)
        ctx.static = {"scale": scale, "causal": causal}
        if not ctx.recorded:   # no backward will run: nothing to keep
            return ctx.backend.attention_inference(q, k, v, scale, causal, key_mask, bias)
        out, ctx.kernel_state = ctx.backend.attention(q, k, v, scale, causal, key_mask, bias)
        return out

    @staticmethod
    def fast_backward(ctx, grad):
        q, k, v, key_mask, _ = ctx.saved_tensors
        dq, dk, dv, dbias = ctx.backend.attention_backward(
            grad, q.data, k.data, v.data, ctx.kernel_state, ctx.static["scale"],
            ctx.static["causal"], key_mask, ctx.needs_input_grad[4])
        return dq, dk, dv, None, dbias

    @staticmethod
    def composite(q, k, v, key_mask, bias, *, scale, causal):
        allowed = visible_keys(q.backend.xp, q.shape[-2], k.shape[-2], causal, key_mask)
        scores = (q @ k.mT) * scale
        if bias is not None:
            scores = scores + bias
        return scores.masked_fill(~allowed, -math.inf).softmax(-1) @ v


class BandedAttention(FusedFunction):
    """Sliding-window self-attention: query i attends keys i + o * dilation for |o| <= window
    (o <= 0 when causal) — Longformer's local pattern (Beltagy et al., 2020). The backend keeps
    only the band's scores, or blocks of them (``numpy_tuning.BandBlocks``), so memory grows
    linearly in n."""

    @staticmethod
    def forward(ctx, q, k, v, key_mask, *, scale, window, dilation, causal):
        ctx.save_inputs(0, 1, 2, 3)
        ctx.static = {"scale": scale, "window": window, "dilation": dilation, "causal": causal}
        out, ctx.kernel_state = ctx.backend.banded_attention(q, k, v, scale, window, dilation,
                                                             causal, key_mask)
        return out

    @staticmethod
    def fast_backward(ctx, grad):
        q, k, v, key_mask = ctx.saved_tensors
        st = ctx.static
        return ctx.backend.banded_attention_backward(
            grad, q.data, k.data, v.data, ctx.kernel_state, st["scale"], st["window"],
            st["dilation"], st["causal"], key_mask) + (None,)

    @staticmethod
    def composite(q, k, v, key_mask, *, scale, window, dilation, causal):
        backend = q.backend
        n = q.shape[-2]
        offsets = backend.xp.asarray(backend.band_offsets(window, dilation, causal))
        idx = backend.xp.arange(n)[:, None] + offsets[None, :]
        allowed = (idx >= 0) & (idx < n)
        idx = backend.xp.clip(idx, 0, n - 1)
        allowed = allowed[None, None]
        if key_mask is not None:
            allowed = allowed & key_mask[:, idx][:, None]
        from .ops_linalg import einsum

        scores = einsum("bhnd,bhnwd->bhnw", q, k[:, :, idx, :]) * scale
        probs = scores.masked_fill(~allowed, -math.inf).softmax(-1)
        return einsum("bhnw,bhnwd->bhnd", probs, v[:, :, idx, :])
