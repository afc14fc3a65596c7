"""``minitorch_nlp.testing``: finite-difference gradcheck and gradgradcheck."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.autograd.ops_fused import LayerNorm
from minitorch_nlp.testing import GradcheckError, gradcheck, gradgradcheck


def leaf(*shape, low=None, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape)
    if low is not None:
        a = np.abs(a) + low
    return mt.tensor(a, dtype=mt.float64, requires_grad=True)


CORRECT = {
    "exp": (lambda x: x.exp(), lambda: (leaf(2, 3),)),
    "log": (lambda x: x.log(), lambda: (leaf(4, low=0.5),)),
    "matmul_tanh": (lambda x, w: (x @ w).tanh(), lambda: (leaf(2, 3), leaf(3, 4, seed=1))),
    "softmax": (lambda x: x.softmax(axis=0), lambda: (leaf(3, 2),)),
    "layer_norm": (lambda x, w, b: LayerNorm.apply(x, w, b, eps=1e-5),
                   lambda: (leaf(2, 4), leaf(4, seed=1), leaf(4, seed=2))),
    "getitem_repeats": (lambda x: x[mt.tensor([0, 2, 0, -1])] * x[1], lambda: (leaf(3, 2),)),
    "broadcast_div": (lambda a, b: a / b, lambda: (leaf(2, 3), leaf(3, low=1.0, seed=1))),
    "two_outputs": (lambda x: (x.sin(), x.sum(axis=0) ** 2), lambda: (leaf(3, 2),)),
    "scalar_output": (lambda x: (x * x).sum(), lambda: (leaf(3),)),
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_gradcheck_and_gradgradcheck_pass_on_correct_ops(name):
    fn, make_inputs = CORRECT[name]
    assert gradcheck(fn, make_inputs())
    assert gradgradcheck(fn, make_inputs())


class WrongSquare(mt.Function):
    """x^2 with a backward that forgets the factor 2."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x


class FrozenSin(mt.Function):
    """sin(x) with a correct value for the gradient, computed on raw arrays: the gradient records
    no graph, so its own derivative comes out as zero."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        return np.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return mt.Tensor._wrap(grad.data * np.cos(x.data), grad.backend)


def test_gradcheck_catches_a_wrong_backward_and_names_the_worst_entry():
    x = mt.tensor([[1.0, -2.0], [3.0, 0.5]], dtype=mt.float64, requires_grad=True)
    with pytest.raises(GradcheckError) as info:
        gradcheck(WrongSquare.apply, (x,))
    message = str(info.value)
    # the worst entry is d y[1, 0] / d x[1, 0] = 2 * 3 = 6, where the wrong backward gives 3
    assert "4 of 16 Jacobian entries differ" in message
    assert "d output 0[1, 0] / d input 0[1, 0]" in message
    assert "analytical 3," in message and "numerical 6" in message


def test_gradcheck_without_raising_returns_false():
    assert gradcheck(WrongSquare.apply, (leaf(3),), raise_exception=False) is False


def test_gradcheck_passes_first_order_of_a_graph_free_backward_but_gradgradcheck_fails():
    x = leaf(2, 2)
    assert gradcheck(FrozenSin.apply, (x,))
    with pytest.raises(GradcheckError, match="analytical 0, numerical"):
        gradgradcheck(FrozenSin.apply, (x,))


def test_gradgradcheck_with_given_grad_outputs():
    x = leaf(3)
    g = mt.tensor([1.0, -2.0, 0.5], dtype=mt.float64)
    assert gradgradcheck(lambda x: x.tanh() * x, (x,), grad_outputs=(g,))


def test_non_tensor_arguments_and_constant_tensors_pass_through():
    x = leaf(2, 3)
    weights = mt.tensor([1.0, 2.0, 3.0])  # float32, no gradient: not checked, still used

    def fn(x, axis, w):
        return (x * w).logsumexp(axis=axis)

    assert gradcheck(fn, (x, 1, weights))
    assert gradcheck(fn, (x, 0, weights))


def test_float32_inputs_are_checked_in_float64_and_left_untouched():
    x = mt.tensor([[0.3, -1.2, 2.0]], requires_grad=True)
    before = x.numpy().copy()
    assert x.dtype == mt.float32
    # in float32, eps = 1e-6 would drown in rounding; the check runs on float64 copies
    assert gradcheck(lambda x: (x * 3.0).sigmoid(), (x,), atol=1e-7, rtol=1e-6)
    np.testing.assert_array_equal(x.numpy(), before)
    assert x.grad is None


def test_a_single_tensor_input_needs_no_tuple():
    assert gradcheck(lambda x: x.sqrt(), leaf(3, low=1.0))


def test_needs_a_tensor_that_requires_grad():
    with pytest.raises(ValueError, match="no input is a floating tensor with requires_grad"):
        gradcheck(lambda x: x * 2, (mt.tensor([1.0]),))


def test_outputs_must_be_tensors():
    with pytest.raises(TypeError, match="output 0 of the function is a float"):
        gradcheck(lambda x: 1.0, (leaf(2),))


def test_tolerances_are_used():
    x = mt.tensor([1.0], dtype=mt.float64, requires_grad=True)

    class AlmostExp(mt.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_inputs(0)
            return np.exp(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x.exp() * (1 + 1e-4)

    assert gradcheck(AlmostExp.apply, (x,), rtol=1e-3)
    with pytest.raises(GradcheckError, match="numerical 2.718281828"):
        gradcheck(AlmostExp.apply, (x,), rtol=1e-6, atol=1e-8)
