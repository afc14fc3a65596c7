"""Elementwise primitives: arithmetic, transcendental functions, activations, ``where``, casts.

Each backward is written with tensor operations (so it can itself be differentiated). Broadcasting
is NumPy's; the engine reduces each gradient back to its input's shape.
"""
from __future__ import annotations

import math

from . import dtypes
from .function import Function


def _xp(ctx):
    return ctx.backend.xp


def _promoted(*operands):
    """The operands cast to their ``dtypes.result_type`` (Python numbers stay numbers: NumPy
    then keeps the arrays' dtype)."""
    first = operands[0]
    if not dtypes._is_number(first) and all(
            not dtypes._is_number(x) and x.dtype == first.dtype for x in operands[1:]):
        return operands  # one dtype already: nothing to cast
    dtype = dtypes.result_type(*operands)
    return tuple(x if dtypes._is_number(x) else x.astype(dtype, copy=False) for x in operands)


def _real(x):
    """``x`` as a floating array (integer and bool inputs become the default float dtype)."""
    return x.astype(dtypes.floating(x.dtype), copy=False)


# ---- arithmetic --------------------------------------------------------------------------------
class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = _promoted(a, b)
        return _xp(ctx).add(a, b)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = _promoted(a, b)
        return _xp(ctx).subtract(a, b)

    @staticmethod
    def backward(ctx, grad):
        return grad, (-grad if ctx.needs_input_grad[1] else None)


class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = _promoted(a, b)
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
        a, b = (x if dtypes._is_number(x) else _real(x) for x in _promoted(a, b))
        return _xp(ctx).true_divide(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad / b if ctx.needs_input_grad[0] else None
        grad_b = -grad * a / (b * b) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class Pow(Function):
    """a ** b. Where the chain rule multiplies 0 by an infinity, the gradients take PyTorch's
    values: d/da is 0 where b == 0 (at a == 0 and a == +-inf too), d/db is 0 where a == 0 and
    b >= 0 (and -inf where a == 0 and b < 0)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_inputs(0, 1)
        ctx.save_output()
        return _xp(ctx).power(*_promoted(a, b))

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            if _is_tensor(b):
                # b * a^(b-1), with the exponent 1 where b == 0 and a == 0 so that no 0 * inf
                # appears (elsewhere b - 1 stays: the mixed derivative at b == 0 is a^-1, and
                # a^-1 is 0 at a == +-inf)
                grad_a = grad * b * a ** where((b == 0) & (a == 0), 1.0, b - 1.0)
            elif b == 0:
                # a^0 is 1 for every a, +-inf and nan included: 0, still a function of a (its
                # second derivative is asked for too), through a's finite entries only
                grad_a = grad * where(a.isfinite(), a, 0.0) * 0.0
            else:
                grad_a = grad * b * a ** (b - 1.0)
        if ctx.needs_input_grad[1]:
            if not _is_tensor(a):
                a = _tensor_like(a, grad)
            at_zero = a == 0
            log_a = where(at_zero, -math.inf, log(where(at_zero, 1.0, a)))
            keep = ~(at_zero & (b >= 0))
            grad_b = grad * where(keep, ctx.output * where(keep, log_a, 0.0), 0.0)
        return grad_a, grad_b


def _is_tensor(x):
    from .tensor import Tensor

    return isinstance(x, Tensor)


def _tensor_like(value, like):
    """A constant operand (Python number or array) as a tensor of ``like``'s dtype and backend."""
    from .tensor import Tensor

    return Tensor._wrap(like.backend.xp.asarray(value, dtype=like.dtype), like.backend)


class Copysign(Function):
    """|a| with the sign of b (its sign bit: -0.0 counts as negative), as NumPy's and PyTorch's
    ``copysign``. d/da = +-1 (the sign a is multiplied by), 0 at a == 0 as PyTorch; d/db = 0
    (piecewise constant in b)."""

    @staticmethod
    def forward(ctx, a, b):
        xp = _xp(ctx)
        a, b = (v if dtypes._is_number(v) else _real(v) for v in _promoted(a, b))
        out = xp.copysign(a, b)
        flip = xp.where(xp.asarray(a) == 0, 0.0, xp.where(xp.signbit(out) == xp.signbit(a),
                                                          1.0, -1.0))
        ctx.flip = flip.astype(out.dtype, copy=False)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (grad * ctx.flip if ctx.needs_input_grad[0] else None,
                grad * 0.0 if ctx.needs_input_grad[1] else None)


class Maximum(Function):
    """max(a, b); at ties the gradient is split equally (as HIPS autograd and PyTorch do)."""

    @staticmethod
    def forward(ctx, a, b):
        xp = _xp(ctx)
        a, b = _promoted(a, b)
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
        a, b = _promoted(a, b)
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


class _OutputDerivative(Function):
    """A real function computed by the ufunc ``ufunc`` of the backend, whose derivative
    ``derivative(y)`` is written with tensor operations of its output y (so it differentiates
    again, and the input need not be kept)."""

    ufunc = ""

    @classmethod
    def forward(cls, ctx, x):
        x = _real(x)
        ctx.save_output()
        return getattr(_xp(ctx), cls.ufunc)(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.fn.derivative(ctx.output)


class Exp(_OutputDerivative):
    ufunc = "exp"

    @staticmethod
    def derivative(y):
        return y


class Log(Function):
    @staticmethod
    def forward(ctx, x):
        x = _real(x)
        ctx.save_inputs(0)
        return _xp(ctx).log(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x


class Log1p(Function):
    @staticmethod
    def forward(ctx, x):
        x = _real(x)
        ctx.save_inputs(0)
        return _xp(ctx).log1p(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1.0 + x)


class Sqrt(Function):
    @staticmethod
    def forward(ctx, x):
        x = _real(x)
        ctx.save_output()
        return _xp(ctx).sqrt(x)

    @staticmethod
    def backward(ctx, grad):
        return grad / (2.0 * ctx.output)


class Rsqrt(Function):
    @staticmethod
    def forward(ctx, x):
        x = _real(x)
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
        x = _real(x)
        ctx.save_inputs(0)
        return _xp(ctx).sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * cos(x)


class Cos(Function):
    @staticmethod
    def forward(ctx, x):
        x = _real(x)
        ctx.save_inputs(0)
        return _xp(ctx).cos(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * sin(x)


class Expm1(_OutputDerivative):
    """e^x - 1, accurate for small x."""

    ufunc = "expm1"

    @staticmethod
    def derivative(y):
        return y + 1.0


class Tan(_OutputDerivative):
    ufunc = "tan"

    @staticmethod
    def derivative(y):
        return 1.0 + y * y


class _InputDerivative(Function):
    """A real function computed by the ufunc ``ufunc`` of the backend, whose derivative
    ``derivative(x)`` is written with tensor operations of its input (so it differentiates
    again)."""

    ufunc = ""

    @classmethod
    def forward(cls, ctx, x):
        x = _real(x)
        ctx.save_inputs(0)
        return getattr(_xp(ctx), cls.ufunc)(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.fn.derivative(x)


class Arcsin(_InputDerivative):
    ufunc = "arcsin"

    @staticmethod
    def derivative(x):
        return rsqrt(1.0 - x * x)


class Arccos(_InputDerivative):
    ufunc = "arccos"

    @staticmethod
    def derivative(x):
        return -rsqrt(1.0 - x * x)


class Arctan(_InputDerivative):
    ufunc = "arctan"

    @staticmethod
    def derivative(x):
        return 1.0 / (1.0 + x * x)


class Sinh(_InputDerivative):
    ufunc = "sinh"

    @staticmethod
    def derivative(x):
        return cosh(x)


class Cosh(_InputDerivative):
    ufunc = "cosh"

    @staticmethod
    def derivative(x):
        return sinh(x)


class Arcsinh(_InputDerivative):
    ufunc = "arcsinh"

    @staticmethod
    def derivative(x):
        return rsqrt(x * x + 1.0)


class Arccosh(_InputDerivative):
    ufunc = "arccosh"

    @staticmethod
    def derivative(x):
        return rsqrt(x * x - 1.0)


class Arctanh(_InputDerivative):
    ufunc = "arctanh"

    @staticmethod
    def derivative(x):
        return 1.0 / (1.0 - x * x)


class Rounding(Function):
    """floor / ceil / round (half to even) / trunc / sign: piecewise constant, so the gradient is
    0 everywhere (as PyTorch defines it, including at the jumps)."""

    @staticmethod
    def forward(ctx, x, *, how):
        ctx.dtype = x.dtype
        return getattr(_xp(ctx), how)(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.0


class XLogY(Function):
    """x * log(y), defined as 0 where x == 0 (unless y is nan), as ``torch.xlogy``: entropies
    sum p log p over probabilities that may be 0. Gradients: d/dx = log(y), except 0 where
    x == 0 and y <= 0 (as PyTorch); d/dy = x / y, except 0 where x == 0 (the product is 0 for
    every y there; PyTorch gives 0 / 0 = nan at x == y == 0)."""

    @staticmethod
    def forward(ctx, x, y):
        x, y = (v if dtypes._is_number(v) else _real(v) for v in _promoted(x, y))
        ctx.save_inputs(0, 1)
        xp = _xp(ctx)
        with dtypes.quiet(xp, divide="ignore", invalid="ignore"):
            product = xp.multiply(x, xp.log(y))
        return xp.where((xp.asarray(x) == 0) & ~xp.isnan(y), 0.0, product).astype(
            product.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        grad_x = grad_y = None
        if ctx.needs_input_grad[0]:
            y_tensor = y if _is_tensor(y) else _tensor_like(y, grad)
            off = (x == 0) & (y_tensor <= 0)  # log y would be -inf or nan where x is 0
            grad_x = grad * where(off, 0.0, log(where(off, 1.0, y_tensor)))
        if ctx.needs_input_grad[1]:
            x_tensor = x if _is_tensor(x) else _tensor_like(x, grad)
            grad_y = grad * x / where(x_tensor == 0, 1.0, y)
        return grad_x, grad_y


class Tanh(_OutputDerivative):
    ufunc = "tanh"

    @staticmethod
    def derivative(y):
        return 1.0 - y * y


class Sigmoid(Function):
    @staticmethod
    def forward(ctx, x):
        x = _real(x)
        ctx.save_output()
        xp = _xp(ctx)
        # 0.5 (1 + tanh(x / 2)) never overflows, unlike 1 / (1 + exp(-x)); far below 0 it
        # rounds to 0 (x < -37 in float64) where e^x is still representable
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
        x = _real(x)
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
        x = _real(x)
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
        return _xp(ctx).where(condition, *_promoted(a, b))

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


def expm1(x):
    return Expm1.apply(_tensor(x))


def exp2(x):
    return exp(_tensor(x) * math.log(2.0))


def log2(x):
    return log(x) * (1.0 / math.log(2.0))


def log10(x):
    return log(x) * (1.0 / math.log(10.0))


def tan(x):
    return Tan.apply(_tensor(x))


def arcsin(x):
    return Arcsin.apply(_tensor(x))


def arccos(x):
    return Arccos.apply(_tensor(x))


def arctan(x):
    return Arctan.apply(_tensor(x))


def sinh(x):
    return Sinh.apply(_tensor(x))


def cosh(x):
    return Cosh.apply(_tensor(x))


def arcsinh(x):
    return Arcsinh.apply(_tensor(x))


def arccosh(x):
    return Arccosh.apply(_tensor(x))


def arctanh(x):
    return Arctanh.apply(_tensor(x))


def floor(x):
    return Rounding.apply(_tensor(x), how="floor")


def ceil(x):
    return Rounding.apply(_tensor(x), how="ceil")


def round(x):  # noqa: A001 - mirrors numpy.round
    """Round half to even (NumPy's and PyTorch's rule); gradient 0."""
    return Rounding.apply(_tensor(x), how="round")


def trunc(x):
    return Rounding.apply(_tensor(x), how="trunc")


def sign(x):
    return Rounding.apply(_tensor(x), how="sign")


def floor_divide(a, b):
    """a // b rounded toward -inf (Python's and PyTorch's ``//``); gradient 0 (it is piecewise
    constant)."""
    a, b = _one_tensor(a, b, "floor_divide")
    if _result_kind(a, b) != "f":
        return _integer_op("floor_divide", a, b)
    return floor(a / b)


DIVISION_ROUNDING = (None, "trunc", "floor")


def div(a, b, rounding_mode=None):
    """a / b (``rounding_mode=None``: true division, integers give floats), rounded toward 0
    (``"trunc"``: C's and PyTorch's integer division) or toward -inf (``"floor"``: Python's
    ``//``). The rounded quotients keep an integer dtype for integer operands and have gradient
    0 (they are piecewise constant); an integer division by 0 raises ``ZeroDivisionError``."""
    if rounding_mode not in DIVISION_ROUNDING:
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got "
                         f"{rounding_mode!r}")
    a, b = _one_tensor(a, b, "div")
    if rounding_mode is None:
        return Div.apply(a, b)
    if _result_kind(a, b) == "f":
        return Rounding.apply(Div.apply(a, b), how=rounding_mode)
    from .tensor import Tensor

    owner = a if _is_tensor(a) else b
    xp = owner.backend.xp
    x, y = (xp.asarray(v) for v in _promoted(*(v.data if _is_tensor(v) else v for v in (a, b))))
    if bool((y == 0).any()):
        raise ZeroDivisionError(f"div: integer division by zero (rounding_mode="
                                f"{rounding_mode!r})")
    quotient = xp.floor_divide(x, y)
    if rounding_mode == "trunc":  # one above the floor where a negative quotient is not whole
        quotient = quotient + ((xp.remainder(x, y) != 0) & ((x < 0) != (y < 0))).astype(
            quotient.dtype)
    return Tensor._wrap(quotient, owner.backend)


def remainder(a, b):
    """a - b * floor(a / b): the sign of b (Python's ``%``, PyTorch's ``remainder``)."""
    return _fractional_part(a, b, floor, "remainder")


def fmod(a, b):
    """a - b * trunc(a / b): the sign of a (C's fmod, PyTorch's ``fmod``)."""
    return _fractional_part(a, b, trunc, "fmod")


def _fractional_part(a, b, rounding, name):
    a, b = _one_tensor(a, b, name)
    if _result_kind(a, b) != "f":
        return _integer_op(name, a, b)
    return a - b * rounding(a / b).detach()


def _result_kind(a, b):
    return dtypes.result_type(*(v.data if _is_tensor(v) else v for v in (a, b))).kind


def _integer_op(name, a, b):
    """Integer // and % and fmod: no gradient, NumPy's kernel (``fmod`` keeps the sign of a)."""
    from .tensor import Tensor

    owner = a if _is_tensor(a) else b
    xp = owner.backend.xp
    arrays = _promoted(*(v.data if _is_tensor(v) else v for v in (a, b)))
    return Tensor._wrap(getattr(xp, name)(*arrays), owner.backend)


def bitwise(name, a, b=None, op=None):
    """The bitwise ufunc ``name`` ("bitwise_and", "left_shift" ...) of integer or bool tensors,
    no gradient. The result has ``dtypes.result_type``'s dtype and wraps around as NumPy's and
    PyTorch's integers do: a Python int is taken modulo 2^bits of the tensor's dtype (int8 & 300
    is int8 & 44), never widening it; shifting by the width or more gives 0 (-1 for a negative
    number shifted right). ``op`` names the operation in errors (default ``name``)."""
    from .tensor import Tensor

    owner = a if _is_tensor(a) else b if _is_tensor(b) else _tensor(a)
    xp = owner.backend.xp
    operands = [v.data if _is_tensor(v) else v if dtypes._is_number(v) else xp.asarray(v)
                for v in ((a,) if b is None else (a, b))]
    kinds = [xp.asarray(v).dtype.kind if dtypes._is_number(v) else v.dtype.kind
             for v in operands]
    if any(kind not in "iub" for kind in kinds):
        raise TypeError(f"{op or name}: needs integer or bool operands, got dtype kinds {kinds} "
                        "(i: integer, u: unsigned, b: bool, f: float)")
    dtype = dtypes.result_type(*operands)
    arrays = [xp.asarray(v).astype(dtype) if dtypes._is_number(v) else v.astype(dtype, copy=False)
              for v in operands]
    return Tensor._wrap(getattr(xp, name)(*arrays), owner.backend)


def copysign(a, b):
    return Copysign.apply(*_one_tensor(a, b, "copysign"))


def xlogy(x, y):
    return XLogY.apply(*_one_tensor(x, y, "xlogy"))


def logaddexp(a, b):
    """log(e^a + e^b) without overflow: max(a, b) + log1p(e^-|a - b|)."""
    a, b = _one_tensor(a, b, "logaddexp")
    return maximum(a, b) + log1p(exp(-abs(a - b)))


def lerp(start, end, weight):
    """start + weight (end - start)."""
    start = _tensor(start)
    return start + weight * (end - start)


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
