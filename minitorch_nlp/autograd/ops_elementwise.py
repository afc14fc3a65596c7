"""Elementwise primitives: arithmetic, transcendental functions, activations, ``where``, casts.

Each backward is written with tensor operations (so it can itself be differentiated). Broadcasting
is NumPy's; the engine reduces each gradient back to its input's shape.
"""
from __future__ import annotations

import math

from .function import Function


def _xp(ctx):
    return ctx.backend.xp


# ---- arithmetic --------------------------------------------------------------------------------
class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        return _xp(ctx).add(a, b)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        return _xp(ctx).subtract(a, b)

    @staticmethod
    def backward(ctx, grad):
        return grad, (-grad if ctx.needs_input_grad[1] else None)


class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        need_a, need_b = ctx.needs_input_grad
        if need_a or need_b:  # keep only the operand whose partner needs a gradient
            ctx.save_for_backward(ctx._inputs[1] if need_a else None,
                                  ctx._inputs[0] if need_b else None)
        return _xp(ctx).multiply(a, b)

    @staticmethod
    def backward(ctx, grad):
        b, a = ctx.saved_tensors
        return (grad * b if ctx.needs_input_grad[0] else None,
                grad * a if ctx.needs_input_grad[1] else None)


class Div(Function):
    @staticmethod
    def forward(ctx, a, b):
        # the numerator is needed only for the denominator's gradient (so that y /= 2 works)
        ctx.save_for_backward(ctx._inputs[0] if ctx.needs_input_grad[1] else None, ctx._inputs[1])
        return _xp(ctx).true_divide(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad / b if ctx.needs_input_grad[0] else None
        grad_b = -grad * a / (b * b) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class Pow(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_inputs(0, 1)
        ctx.save_output()
        return _xp(ctx).power(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = grad * b * a ** (b - 1)
        if ctx.needs_input_grad[1]:
            from .tensor import Tensor

            if not isinstance(a, Tensor):
                a = Tensor._wrap(ctx.backend.xp.asarray(a, dtype=grad.dtype), ctx.backend)
            # d/db a^b = a^b log a (defined as 0 where a == 0, the limit for b > 0)
            safe_log = where(a == 0, 0.0, log(where(a == 0, 1.0, a)))
            grad_b = grad * ctx.output * safe_log
        return grad_a, grad_b


class Maximum(Function):
    """max(a, b); at ties the gradient is split equally (as HIPS autograd and PyTorch do)."""

    @staticmethod
    def forward(ctx, a, b):
        xp = _xp(ctx)
        ctx.share_a = xp.where(a > b, 1.0, xp.where(a == b, 0.5, 0.0)).astype(
            xp.result_type(a, b), copy=False)
        return xp.maximum(a, b)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.share_a, grad * (1.0 - ctx.share_a)


class Minimum(Function):
    @staticmethod
    def forward(ctx, a, b):
        xp = _xp(ctx)
        ctx.share_a = xp.where(a < b, 1.0, xp.where(a == b, 0.5, 0.0)).astype(
            xp.result_type(a, b), copy=False)
        return xp.minimum(a, b)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.share_a, grad * (1.0 - ctx.share_a)


# ---- unary -------------------------------------------------------------------------------------
class Neg(Function):
    @staticmethod
    def forward(ctx, x):
        return _xp(ctx).negative(x)

    @staticmethod
    def backward(ctx, grad):
        return -grad


class Abs(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.sign = _xp(ctx).sign(x)
        return _xp(ctx).abs(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.sign


class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_output()
        return _xp(ctx).exp(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.output


class Log(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        return _xp(ctx).log(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x


class Log1p(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        return _xp(ctx).log1p(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1.0 + x)


class Sqrt(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_output()
        return _xp(ctx).sqrt(x)

    @staticmethod
    def backward(ctx, grad):
        return grad / (2.0 * ctx.output)


class Rsqrt(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        ctx.save_output()
        return 1.0 / _xp(ctx).sqrt(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (-0.5) * ctx.output / x


class Sin(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        return _xp(ctx).sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * cos(x)


class Cos(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        return _xp(ctx).cos(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * sin(x)


class Tanh(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_output()
        return _xp(ctx).tanh(x)

    @staticmethod
    def backward(ctx, grad):
        y = ctx.output
        return grad * (1.0 - y * y)


class Sigmoid(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_output()
        xp = _xp(ctx)
        # 0.5 (1 + tanh(x / 2)) never overflows, unlike 1 / (1 + exp(-x))
        y = xp.tanh(x * 0.5)
        y += 1
        y *= 0.5
        return y

    @staticmethod
    def backward(ctx, grad):
        y = ctx.output
        return grad * y * (1.0 - y)


class Relu(Function):
    @staticmethod
    def forward(ctx, x):
        xp = _xp(ctx)
        ctx.positive = x > 0
        return xp.maximum(x, 0)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.positive


class Softplus(Function):
    """log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|) so it never overflows."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        xp = _xp(ctx)
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * sigmoid(x)


class Erf(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        return ctx.backend.erf(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (2.0 / math.sqrt(math.pi)) * exp(-(x * x))


class Clip(Function):
    """Clamp to [low, high]; the gradient passes where low <= x <= high (PyTorch's convention)."""

    @staticmethod
    def forward(ctx, x, *, low, high):
        xp = _xp(ctx)
        inside = True
        if low is not None:
            inside = x >= low
        if high is not None:
            inside = inside & (x <= high)
        ctx.inside = inside
        return xp.clip(x, low, high)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.inside


class Where(Function):
    """``where(condition, a, b)``: the condition is a constant boolean array."""

    @staticmethod
    def forward(ctx, condition, a, b):
        ctx.condition = condition
        return _xp(ctx).where(condition, a, b)

    @staticmethod
    def backward(ctx, grad):
        cond = ctx.condition
        return (None,
                where(cond, grad, 0.0) if ctx.needs_input_grad[1] else None,
                where(cond, 0.0, grad) if ctx.needs_input_grad[2] else None)


class Cast(Function):
    @staticmethod
    def forward(ctx, x, *, dtype):
        ctx.input_dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.input_dtype)


class Copy(Function):
    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return grad


# ---- tensor-level entry points -------------------------------------------------------------------
def _tensor(x):
    from .creation import tensor
    from .tensor import Tensor

    return x if isinstance(x, Tensor) else tensor(x)


def exp(x):
    return Exp.apply(_tensor(x))


def log(x):
    return Log.apply(_tensor(x))


def log1p(x):
    return Log1p.apply(_tensor(x))


def sqrt(x):
    return Sqrt.apply(_tensor(x))


def rsqrt(x):
    return Rsqrt.apply(_tensor(x))


def sin(x):
    return Sin.apply(_tensor(x))


def cos(x):
    return Cos.apply(_tensor(x))


def tanh(x):
    return Tanh.apply(_tensor(x))


def sigmoid(x):
    return Sigmoid.apply(_tensor(x))


def relu(x):
    return Relu.apply(_tensor(x))


def softplus(x):
    return Softplus.apply(_tensor(x))


def erf(x):
    return Erf.apply(_tensor(x))


def abs(x):  # noqa: A001 - mirrors numpy.abs
    return Abs.apply(_tensor(x))


def negative(x):
    return Neg.apply(_tensor(x))


def clip(x, low=None, high=None):
    if low is None and high is None:
        raise ValueError("clip: give at least one of low and high")
    return Clip.apply(_tensor(x), low=low, high=high)


def maximum(a, b):
    return Maximum.apply(*_one_tensor(a, b, "maximum"))


def minimum(a, b):
    return Minimum.apply(*_one_tensor(a, b, "minimum"))


def where(condition, a, b):
    """Elementwise ``a`` where ``condition`` is true, else ``b`` (either may be a scalar)."""
    from .tensor import Tensor

    if isinstance(condition, Tensor):
        if condition.dtype.kind != "b":
            raise TypeError(f"where: the condition must be a bool tensor, got {condition.dtype}")
        condition_data = condition.data
    else:
        condition_data = condition
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = _tensor(a)
    return Where.apply(condition_data, a, b)


def _one_tensor(a, b, name):
    from .tensor import Tensor

    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = _tensor(a)
    return a, b
