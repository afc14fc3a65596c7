"""The engine at its edges (issues 11 and 22): gradients at the points where the chain rule
multiplies 0 by an infinity, the dtype promotion rule, 0-d and empty tensors, arrays saved for
backward being read-only, layers computing in their parameters' dtype, and the errors of the ops
added for issue 11. Gradients away from these points are checked against HIPS autograd in
``test_primitives.py``."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn, optim


def _grad(fn, *values):
    xs = [mt.tensor(v, dtype=mt.float64, requires_grad=True) for v in values]
    return [g.numpy() for g in mt.grad(fn(*xs).sum(), xs)]


# ---- special points: PyTorch's values where 0 * inf appears --------------------------------------
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_gradients_at_zero_take_pytorchs_values():
    # d/dx x**0 = 0 everywhere, also at x = 0 (0 * 0**-1 would be nan)
    (gx,) = _grad(lambda x: x ** 0, [0.0, 2.0])
    np.testing.assert_array_equal(gx, [0.0, 0.0])
    # d/dy 0**y: -inf for y < 0, 0 for y >= 0 (0**y log 0 is inf * -inf and 0 * -inf)
    zeros = mt.tensor([0.0, 0.0, 0.0], dtype=mt.float64)
    (gy,) = _grad(lambda y: zeros ** y, [-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(gy, [-math.inf, 0.0, 0.0])
    # both at once: d/dx 0**0 = 0 and d/dy 0**0 = 0
    gx, gy = _grad(lambda x, y: x ** y, [0.0], [0.0])
    np.testing.assert_array_equal(np.concatenate([gx, gy]), [0.0, 0.0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("exponent", [0, 0.0, "tensor"])
def test_pow_gradient_of_a_zero_exponent_is_zero_at_infinities_and_zero(exponent):
    values = [math.inf, -math.inf, 0.0, -3.0, 2.5]
    if exponent == "tensor":
        (gx, _) = _grad(lambda x, y: x ** y, values, [0.0] * len(values))
    else:
        (gx,) = _grad(lambda x: x ** exponent, values)
    np.testing.assert_array_equal(gx, [0.0] * len(values))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_gradient_at_infinities_for_other_exponents():
    # d/dx x^b = b x^(b-1) where that is defined: 1 for b = 1, +-inf for b = 2, 0 for b = -1
    (g1,) = _grad(lambda x: x ** 1, [math.inf, -math.inf])
    (g2,) = _grad(lambda x: x ** 2, [math.inf, -math.inf])
    (gm,) = _grad(lambda x: x ** -1.0, [math.inf, -math.inf])
    np.testing.assert_array_equal(g1, [1.0, 1.0])
    np.testing.assert_array_equal(g2, [math.inf, -math.inf])
    np.testing.assert_array_equal(gm, [0.0, 0.0])


@pytest.mark.parametrize("values, expected, gradient", [
    ([0.0, 100.0], [0.0, 100.0], [1.0, 1.0]),
    ([0.0, 200.0], [0.0, 200.0], [1.0, 1.0]),
    ([-1e4, 0.0], [-1e4, 0.0], [1.0, 1.0]),
    ([1e4, -1e4], [1e4, 1e4], [2.0, 0.0]),
    ([-math.inf, 0.0], [-math.inf, 0.0], [0.0, 1.0]),
    ([-math.inf, -math.inf, 3.0], [-math.inf, -math.inf, 3.0], [0.0, 0.0, 1.0]),
])
def test_logcumsumexp_is_exact_far_below_a_later_maximum(values, expected, gradient):
    # each running log-sum is shifted by its own running maximum, not the axis' maximum:
    # log(e^0) stays 0 next to a later 200 (e^-200 relative to it underflows)
    x = mt.tensor(values, dtype=mt.float64, requires_grad=True)
    out = x.logcumsumexp(0)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-15)
    (fast,) = mt.grad(out.sum(), x)
    (recorded,) = mt.grad(x.logcumsumexp(0).sum(), x, create_graph=True)
    np.testing.assert_allclose(fast.numpy(), gradient, rtol=1e-12)
    np.testing.assert_allclose(recorded.numpy(), gradient, rtol=1e-12)


def test_logcumsumexp_float32_at_masking_values_stays_finite():
    x = mt.tensor([[-1e4, 0.0, 1e4, -1e9]], requires_grad=True)
    out = mt.logcumsumexp(x, 1)
    out.sum().backward()
    np.testing.assert_array_equal(out.numpy(), [[-1e4, 0.0, 1e4, 1e4]])
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 1.0, 2.0, 0.0]])


def test_logsumexp_of_an_all_minus_inf_slice_is_minus_inf_with_gradient_zero():
    x = mt.tensor([[-math.inf, -math.inf], [0.0, -math.inf]], dtype=mt.float64,
                  requires_grad=True)
    out = x.logsumexp(axis=1)
    np.testing.assert_array_equal(out.numpy(), [-math.inf, 0.0])
    (g,) = mt.grad(out.sum(), x)
    np.testing.assert_array_equal(g.numpy(), [[0.0, 0.0], [1.0, 0.0]])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_second_derivative_at_zero_exponent_is_finite():
    x = mt.tensor([0.0, 1.5], dtype=mt.float64, requires_grad=True)
    (g,) = mt.grad((x ** 0).sum(), x, create_graph=True)
    (h,) = mt.grad(g.sum(), x)
    np.testing.assert_array_equal(h.numpy(), [0.0, 0.0])


def test_xlogy_is_zero_where_x_is_zero_and_so_is_its_gradient_there():
    x = mt.tensor([0.0, 0.0, 2.0], dtype=mt.float64, requires_grad=True)
    y = mt.tensor([0.0, 0.5, 0.5], dtype=mt.float64, requires_grad=True)
    out = mt.xlogy(x, y)
    np.testing.assert_array_equal(out.numpy(), [0.0, 0.0, 2.0 * math.log(0.5)])
    gx, gy = mt.grad(out.sum(), [x, y])
    np.testing.assert_array_equal(gx.numpy(), [0.0, math.log(0.5), math.log(0.5)])
    np.testing.assert_array_equal(gy.numpy()[1:], [0.0, 4.0])


def test_entropy_of_a_distribution_with_zeros_has_a_finite_gradient():
    p = mt.tensor([0.0, 0.25, 0.75], dtype=mt.float64, requires_grad=True)
    entropy = -mt.xlogy(p, p.detach()).sum()
    (g,) = mt.grad(entropy, p)
    np.testing.assert_allclose(g.numpy(), [0.0, -math.log(0.25), -math.log(0.75)])


@pytest.mark.parametrize("p", [1, 2, 3, math.inf, "fro"])
def test_norm_of_a_zero_vector_has_gradient_zero(p):
    (g,) = _grad(lambda x: x.norm(p), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])


def test_norm2_second_order_at_a_nonzero_vector_is_finite_next_to_a_zero_one():
    x = mt.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=mt.float64, requires_grad=True)
    (g,) = mt.grad(x.norm(axis=1).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), [[0.0, 0.0], [0.6, 0.8]])
    (h,) = mt.grad((g * g).sum(), x)
    assert np.isfinite(h.numpy()).all()


def test_normalize_of_a_zero_row_is_zero_with_zero_gradient():
    x = mt.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=mt.float64, requires_grad=True)
    y = F.normalize(x, axis=1)
    np.testing.assert_allclose(y.numpy(), [[0.0, 0.0], [0.6, 0.8]])
    (g,) = mt.grad(y.sum(), x)
    assert np.isfinite(g.numpy()).all()


# ---- repeated indices, one spelling per row -----------------------------------------------------
@pytest.mark.parametrize("index, expected", [
    (lambda: ((0, 0, 1),), [[2, 2], [1, 1], [0, 0]]),
    (lambda: [0, 0, 1], [[2, 2], [1, 1], [0, 0]]),
    (lambda: np.array([0, 0, 1]), [[2, 2], [1, 1], [0, 0]]),
    (lambda: mt.tensor([0, 0, 1]), [[2, 2], [1, 1], [0, 0]]),
    (lambda: (slice(None), (0, 0)), [[2, 0], [2, 0], [2, 0]]),
    (lambda: ((2, 2), (1, 1)), [[0, 0], [0, 0], [0, 2]]),
    (lambda: ([0, 0], (1, 1)), [[0, 2], [0, 0], [0, 0]]),
    (lambda: (Ellipsis, (1, 1, 1)), [[0, 3], [0, 3], [0, 3]]),
    (lambda: (None, (0, 0)), [[2, 2], [0, 0], [0, 0]]),
], ids=["tuple", "list", "array", "tensor", "slice_tuple", "tuple_pair", "list_tuple",
        "ellipsis_tuple", "none_tuple"])
def test_repeated_positions_accumulate_in_every_index_spelling(index, expected):
    x = mt.ones(3, 2, dtype=mt.float64, requires_grad=True)
    x[index()].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), expected)


@pytest.mark.parametrize("spelling", [tuple, list, np.array, mt.tensor])
def test_index_select_with_repeats_accumulates(spelling):
    x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.index_select(0, spelling([0, 0, 1])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 1.0, 0.0])


def test_a_list_index_of_non_integers_is_refused():
    with pytest.raises(IndexError, match="must hold integers or bools"):
        mt.zeros(3)[[0.5, 1.0]]


# ---- dtype promotion ---------------------------------------------------------------------------
F32, F64, I64, I32, BOOL = mt.float32, mt.float64, mt.int64, mt.int32, mt.bool_


def _t(dtype):
    return mt.tensor([1, 2], dtype=dtype)


PROMOTION = [
    # (expression, expected dtype)
    ("f32 + f64", lambda: _t(F32) + _t(F64), F64),
    ("i64 + f32", lambda: _t(I64) + _t(F32), F32),
    ("i32 + i64", lambda: _t(I32) + _t(I64), I64),
    ("bool + i32", lambda: _t(BOOL) + _t(I32), I32),
    ("bool + f64", lambda: _t(BOOL) * _t(F64), F64),
    ("f32 + 0.5", lambda: _t(F32) + 0.5, F32),
    ("f64 * 2", lambda: _t(F64) * 2, F64),
    ("i32 + 2", lambda: _t(I32) + 2, I32),
    ("i64 + 0.5", lambda: _t(I64) + 0.5, F32),
    ("0.5 - i64", lambda: 0.5 - _t(I64), F32),
    ("i64 / 2", lambda: _t(I64) / 2, F32),
    ("i64 / i64", lambda: _t(I64) / _t(I64), F32),
    ("f64 / i64", lambda: _t(F64) / _t(I64), F64),
    ("bool + 1", lambda: _t(BOOL) + 1, I64),
    ("bool + 1.5", lambda: _t(BOOL) + 1.5, F32),
    ("i64 ** 0.5", lambda: _t(I64) ** 0.5, F32),
    ("i64 ** 2", lambda: _t(I64) ** 2, I64),
    ("exp(i64)", lambda: _t(I64).exp(), F32),
    ("log(i32)", lambda: _t(I32).log(), F32),
    ("sqrt(bool)", lambda: _t(BOOL).sqrt(), F32),
    ("sin(f64)", lambda: _t(F64).sin(), F64),
    ("mean(i64)", lambda: _t(I64).mean(), F32),
    ("maximum(i64, 0.5)", lambda: mt.maximum(_t(I64), 0.5), F32),
    ("where(c, i64, 0.5)", lambda: mt.where(mt.tensor([True, False]), _t(I64), 0.5), F32),
    ("xlogy(i64, f64)", lambda: mt.xlogy(_t(I64), _t(F64)), F64),
]


@pytest.mark.parametrize("expression, make, expected", PROMOTION, ids=[p[0] for p in PROMOTION])
def test_dtype_promotion_table(expression, make, expected):
    assert make().dtype == expected, expression


def test_the_default_float_dtype_is_what_integers_promote_to():
    mt.set_default_dtype(mt.float64)
    try:
        assert (_t(I64) + 0.5).dtype == F64
        assert _t(I64).exp().dtype == F64
    finally:
        mt.set_default_dtype(mt.float32)


# ---- 0-d and empty tensors ---------------------------------------------------------------------
@pytest.mark.parametrize("op", [
    lambda x: x.sum(0), lambda x: x.sum(-1), lambda x: x.mean(0), lambda x: x.max(-1),
    lambda x: x.softmax(-1), lambda x: x.log_softmax(0), lambda x: x.logsumexp(-1),
    lambda x: x.cumsum(0), lambda x: x.cumprod(0), lambda x: x.logcumsumexp(-1),
    lambda x: x.squeeze(0), lambda x: x.norm(),
], ids=["sum0", "sum-1", "mean", "max", "softmax", "log_softmax", "logsumexp", "cumsum",
        "cumprod", "logcumsumexp", "squeeze", "norm"])
def test_0d_tensors_take_axis_0_and_minus_1(op):
    x = mt.tensor(1.5, dtype=mt.float64, requires_grad=True)
    y = op(x)
    assert y.shape == ()
    (g,) = mt.grad(y, x)
    assert g.shape == () and np.isfinite(g.item())


def test_0d_tensor_refuses_other_axes():
    with pytest.raises(ValueError, match="sum: axis 1 is out of range for a 0-d tensor"):
        mt.tensor(1.0).sum(1)


def test_logsumexp_over_an_empty_axis_is_minus_inf():
    np.testing.assert_array_equal(mt.zeros(2, 0).logsumexp(1).numpy(), [-math.inf, -math.inf])


def test_mean_over_an_empty_axis_is_nan_and_its_backward_is_empty():
    x = mt.zeros(0, 3, dtype=mt.float64, requires_grad=True)
    y = x.mean(axis=0)
    assert np.isnan(y.numpy()).all() and y.shape == (3,)
    y.sum().backward()
    assert x.grad.shape == (0, 3)
    z = mt.zeros(0, 3, dtype=mt.float64, requires_grad=True)
    z.mean(axis=1).sum().backward()
    assert z.grad.shape == (0, 3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_var_and_std_without_degrees_of_freedom_give_nan_or_inf_and_so_do_their_gradients():
    one = mt.tensor([2.0], dtype=mt.float64, requires_grad=True)
    v = one.var(ddof=1)
    assert np.isnan(v.item())
    (g,) = mt.grad(v, one)
    assert np.isnan(g.numpy()).all()
    two = mt.tensor([1.0, 3.0], dtype=mt.float64, requires_grad=True)
    v = two.var(ddof=2)
    assert v.item() == math.inf
    (g,) = mt.grad(v, two)
    assert not np.isfinite(g.numpy()).any()
    assert np.isnan(mt.zeros(0).std().item())


def test_squeeze_refuses_an_axis_that_is_not_1_naming_it():
    with pytest.raises(ValueError, match="axis 1 of a tensor of shape \\(2, 3\\) has size 3"):
        mt.zeros(2, 3).squeeze(1)


def test_negative_pad_widths_crop_and_the_gradient_skips_the_cropped_entries():
    x = mt.arange(6.0).reshape(2, 3).requires_grad_()
    y = mt.pad(x, [(0, 1), (-1, 1)])
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 0], [4, 5, 0], [0, 0, 0]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 1], [0, 1, 1]])
    with pytest.raises(ValueError, match="crops more than the 3 entries of axis 1"):
        mt.pad(x, [(0, 0), (-2, -2)])


def test_pad_takes_pytorchs_widths_replicate_any_and_crop_with_pad():
    x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    np.testing.assert_array_equal(mt.pad(x, [(4, 1)], mode="replicate").numpy(),
                                  [1, 1, 1, 1, 1, 2, 3, 3])
    # cropping one side and padding the other mirrors about the whole axis' edges
    np.testing.assert_array_equal(mt.pad(x, [(-1, 2)], mode="reflect").numpy(), [2, 3, 2, 1])
    np.testing.assert_array_equal(mt.pad(x, [(2, -1)], mode="circular").numpy(), [2, 3, 1, 2])
    np.testing.assert_array_equal(mt.pad(x, [(-2, 2)], mode="replicate").numpy(), [3, 3, 3])
    mt.pad(x, [(-1, 2)], mode="reflect").sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 2, 1])


def test_scatter_reads_only_the_index_extent_of_a_larger_src():
    index = mt.tensor([[0, 1]])
    src = mt.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]], requires_grad=True)
    for scatter in (lambda: mt.scatter(mt.zeros(2, 2), 0, index, src),
                    lambda: mt.scatter_add(mt.zeros(2, 2), 0, index, src),
                    lambda: mt.zeros(2, 2).scatter_reduce(0, index, src, "amax")):
        out = scatter()
        np.testing.assert_array_equal(out.numpy(), [[5, 0], [0, 6]])
        (g,) = mt.grad(out.sum(), src)
        np.testing.assert_array_equal(g.numpy(), [[1, 1, 0], [0, 0, 0]])


def test_meshgrid_treats_a_0d_tensor_as_one_entry():
    a, b = mt.meshgrid(mt.tensor(2.0), mt.tensor([1.0, 3.0]))
    np.testing.assert_array_equal(a.numpy(), [[2, 2]])
    np.testing.assert_array_equal(b.numpy(), [[1, 3]])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_integer_bitwise_ops_and_shifts_wrap_like_numpy(dtype):
    values = np.array([100, -3, 0, 127], dtype=np.int64).astype(dtype)
    x = mt.tensor(values)
    other = 300  # wraps into the dtype: 300 mod 2^bits
    wrapped = np.asarray(other).astype(dtype)
    for ours, numpys in [(x & other, values & wrapped), (other | x, wrapped | values),
                         (mt.bitwise_xor(x, -200), values ^ np.asarray(-200).astype(dtype)),
                         (~x, ~values), (x << 3, values << dtype(3)), (x >> 1, values >> dtype(1)),
                         (x << 70, np.left_shift(values, np.asarray(70).astype(dtype))),
                         (mt.bitwise_left_shift(x, x % 5), np.left_shift(values, values % 5)),
                         (mt.bitwise_right_shift(x, 2), np.right_shift(values, dtype(2)))]:
        assert ours.dtype == dtype
        np.testing.assert_array_equal(ours.numpy(), numpys)


def test_shifts_by_the_width_or_more_give_zero_or_the_sign():
    x = mt.tensor(np.array([1, -100], dtype=np.int8))
    np.testing.assert_array_equal((x << 8).numpy(), [0, 0])
    np.testing.assert_array_equal((x >> 9).numpy(), [0, -1])
    np.testing.assert_array_equal((1 << mt.tensor([3, 4])).numpy(), [8, 16])
    np.testing.assert_array_equal((mt.tensor([True, False]) & mt.tensor([True, True])).numpy(),
                                  [True, False])


def test_integer_division_rounds_toward_zero_or_minus_infinity():
    a = np.array([7, -7, 7, -7, 6, -6, 0])
    b = np.array([2, 2, -2, -2, 3, 4, -5])
    trunc = mt.div(mt.tensor(a), mt.tensor(b), rounding_mode="trunc")
    floor = mt.tensor(a).div(mt.tensor(b), rounding_mode="floor")
    assert trunc.dtype == floor.dtype == np.int64
    np.testing.assert_array_equal(trunc.numpy(), [int(x / y) for x, y in zip(a, b)])
    np.testing.assert_array_equal(floor.numpy(), [x // y for x, y in zip(a, b)])
    np.testing.assert_array_equal((mt.tensor(a) // mt.tensor(b)).numpy(), a // b)
    np.testing.assert_array_equal((mt.tensor(a) % mt.tensor(b)).numpy(), a % b)
    np.testing.assert_array_equal(mt.div(-7, mt.tensor([2]), rounding_mode="trunc").numpy(), [-3])
    np.testing.assert_array_equal(mt.div(mt.tensor([7, -7]), 2).numpy(), [3.5, -3.5])


def test_copysign_reads_the_sign_bit_and_its_gradient_is_zero_at_zero():
    a = mt.tensor([1.0, -2.0, 0.0, 3.0, 4.0], dtype=mt.float64, requires_grad=True)
    b = mt.tensor([-1.0, -1.0, -1.0, -0.0, math.inf], dtype=mt.float64, requires_grad=True)
    out = mt.copysign(a, b)
    np.testing.assert_array_equal(np.signbit(out.numpy()), [True, True, True, True, False])
    ga, gb = mt.grad(out.sum(), [a, b])
    np.testing.assert_array_equal(ga.numpy(), [-1, 1, 0, -1, 1])
    np.testing.assert_array_equal(gb.numpy(), [0, 0, 0, 0, 0])


def test_new_activations_at_large_inputs_stay_finite():
    x = mt.tensor([-1e4, -50.0, 0.0, 50.0, 1e4], dtype=mt.float64, requires_grad=True)
    # (sigmoid rounds to 0 below -37: quick_gelu(-50) is -0.0, not -5.5e-36)
    for fn, expected in [(F.quick_gelu, [0, 0, 0, 50, 1e4]),
                         (lambda t: F.celu(t, 2.0), [-2, 2 * math.expm1(-25), 0, 50, 1e4])]:
        out = fn(x)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-300)
        (g,) = mt.grad(out.sum(), x)
        assert np.isfinite(g.numpy()).all()
    weights = F.softmin(mt.tensor([[1e4, -1e4, 0.0], [math.inf, math.inf, math.inf]]), axis=1)
    np.testing.assert_array_equal(weights.numpy(), [[0, 1, 0], [0, 0, 0]])


def test_pad_modes_refuse_widths_beyond_the_axis():
    with pytest.raises(ValueError, match="mode 'reflect' needs widths <= 2 on axis 0"):
        mt.pad(mt.zeros(3), [(3, 0)], mode="reflect")
    with pytest.raises(ValueError, match="mode must be"):
        mt.pad(mt.zeros(3), [(1, 0)], mode="mirror")


def test_linspace_with_an_integer_dtype_truncates_toward_zero_and_refuses_bool():
    np.testing.assert_array_equal(mt.linspace(-1, 1, 4, dtype=mt.int64).numpy(), [-1, 0, 0, 1])
    with pytest.raises(TypeError, match="linspace: dtype bool"):
        mt.linspace(0, 1, 3, dtype=bool)


# ---- arrays saved for backward are read-only while a graph holds them ----------------------------
def test_writing_into_a_saved_array_is_refused_while_the_graph_lives():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(x)[0] = 10.0
    with pytest.raises(ValueError, match="read-only"):
        x.data[0] = 10.0
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    np.asarray(x)[0] = 10.0  # the backward freed the graph: the array is writable again
    assert x.data.flags.writeable


def test_dropping_a_graph_without_backward_makes_its_arrays_writable_again():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp() * x
    assert not x.data.flags.writeable
    del y
    assert x.data.flags.writeable


def test_a_saved_view_released_before_its_saved_base_becomes_writable_with_the_base():
    x = mt.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    h = x * 1.0
    view = h.reshape(2, 2)
    first = (view * view).sum()   # holds the view
    second = (h * h).sum()        # holds its base
    del first                     # the view's hold ends while the base is still held
    assert not view.data.flags.writeable
    second.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0, 8.0])
    assert view.data.flags.writeable and h.data.flags.writeable


def test_in_place_changes_through_the_engine_still_get_the_version_error():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with mt.no_grad():
        x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()


def test_an_optimizer_step_and_load_state_dict_work_while_a_graph_holds_the_parameters():
    layer = nn.Linear(2, 1)
    opt = optim.SGD(layer.parameters(), lr=0.1)
    kept = layer(mt.ones(1, 2))  # a second graph, never run backward
    layer(mt.ones(1, 2)).sum().backward()
    before = layer.weight.numpy().copy()
    opt.step()
    assert not np.array_equal(layer.weight.numpy(), before)
    layer.load_state_dict({"weight": np.zeros((1, 2), np.float32),
                           "bias": np.zeros(1, np.float32)})
    np.testing.assert_array_equal(layer.weight.numpy(), 0.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        kept.sum().backward()


# ---- layers compute in their parameters' dtype -------------------------------------------------
@pytest.mark.parametrize("make", [lambda: nn.Linear(3, 2), lambda: nn.LayerNorm(3)],
                         ids=["Linear", "LayerNorm"])
def test_a_float32_layer_casts_float64_input_and_returns_the_gradient_in_float64(make):
    layer = make()
    x = mt.randn(4, 3, dtype=mt.float64, requires_grad=True)
    y = layer(x)
    assert y.dtype == mt.float32
    y.sum().backward()
    assert x.grad.dtype == mt.float64
    expected = layer(x.detach().astype(mt.float32))
    np.testing.assert_array_equal(y.numpy(), expected.numpy())


def test_a_float64_linear_layer_takes_integer_input_as_float64():
    layer = nn.Linear(2, 1, dtype=mt.float64)
    assert layer(mt.tensor([[1, 2]])).dtype == mt.float64


def test_embedding_output_has_the_weight_dtype():
    assert nn.Embedding(5, 2, dtype=mt.float64)(mt.tensor([1, 4])).dtype == mt.float64


# ---- ragged lists --------------------------------------------------------------------------------
@pytest.mark.parametrize("data, depth, where", [
    ([[1, 2], [3]], 1, "data[1]"),
    ([[[1, 2], [3, 4]], [[1, 2], [3]]], 2, "data[1][1]"),
    ([1, [2]], 1, "data[1]"),
])
def test_a_ragged_list_names_its_depth(data, depth, where):
    with pytest.raises(ValueError, match=f"ragged at depth {depth}.*{where.replace('[', '.')}"):
        mt.tensor(data)


# ---- errors of the ops added for issue 11 -------------------------------------------------------
@pytest.mark.parametrize("call, error, message", [
    (lambda: mt.zeros(3).unfold(0, 4, 1), ValueError, "unfold: windows of size 4"),
    (lambda: mt.zeros(2, 3).repeat(2), ValueError, "repeat: 1 repetitions for a tensor with 2"),
    (lambda: mt.zeros(3).tile(-1), ValueError, "tile: repetitions must be >= 0"),
    (lambda: mt.zeros(3).repeat_interleave([1, 2]), ValueError, "repeat_interleave"),
    (lambda: mt.zeros(2, 3).unflatten(1, (2, 2)), ValueError, "unflatten: sizes \\(2, 2\\)"),
    (lambda: mt.zeros(2, 2).diagonal(0, 1, 1), ValueError, "diagonal: axis1 and axis2"),
    (lambda: mt.diag(mt.zeros(2, 2, 2)), ValueError, "diag: needs a 1-D or 2-D"),
    (lambda: mt.zeros(3).norm(p=0), ValueError, "norm: p must be"),
    (lambda: F.glu(mt.zeros(2, 3)), ValueError, "glu: axis -1 of a tensor of shape \\(2, 3\\)"),
    (lambda: F.binary_cross_entropy(mt.tensor([1.5]), mt.tensor([1.0])), ValueError,
     "probabilities must lie in \\[0, 1\\]"),
    (lambda: F.softplus(mt.zeros(2), beta=0), ValueError, "softplus: beta must be > 0"),
    (lambda: F.hardtanh(mt.zeros(2), 1.0, -1.0), ValueError, "hardtanh: min_val"),
    (lambda: mt.meshgrid(mt.zeros(2, 2)), ValueError, "meshgrid: tensor 0 has shape"),
    (lambda: mt.bitwise_and(mt.zeros(2), mt.zeros(2)), TypeError, "bitwise_and: needs integer"),
    (lambda: mt.zeros(3).masked_select(mt.tensor([True, False])), ValueError,
     "masked_select: a mask of shape \\(2,\\)"),
    (lambda: mt.zeros(3).scatter_reduce(0, mt.tensor([0]), mt.ones(1), "median"), ValueError,
     "scatter_reduce: reduce must be one of"),
    (lambda: mt.zeros(3).scatter(0, mt.tensor([0, 1]), mt.ones(1)), ValueError,
     "scatter: src of shape \\(1,\\) must be at least as large as the index, \\(2,\\)"),
    (lambda: mt.scatter_add(mt.zeros(3, 2), 0, mt.tensor([[0, 1]]), mt.ones(2)), ValueError,
     "scatter_add: src of shape \\(2,\\) must be at least as large as the index"),
    (lambda: mt.div(mt.tensor([1]), mt.tensor([0]), rounding_mode="trunc"), ZeroDivisionError,
     "div: integer division by zero \\(rounding_mode='trunc'\\)"),
    (lambda: mt.div(mt.zeros(2), 2.0, rounding_mode="round"), ValueError,
     "div: rounding_mode must be None, 'trunc' or 'floor', got 'round'"),
    (lambda: F.celu(mt.zeros(2), alpha=0.0), ValueError, "celu: alpha must be a non-zero"),
    (lambda: mt.tensor([1.5]) << 1, TypeError, "left_shift: needs integer or bool operands"),
    (lambda: mt.bitwise_right_shift(mt.tensor([4]), 1.0), TypeError,
     "bitwise_right_shift: needs integer"),
    (lambda: mt.pad(mt.zeros(3), [(0, 4)], mode="circular"), ValueError,
     "mode 'circular' needs widths <= 3 on axis 0 of size 3"),
])
def test_new_ops_name_the_bad_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_integer_floor_divide_remainder_and_fmod_follow_python_and_c():
    a, b = mt.tensor([-7, 7]), 2
    np.testing.assert_array_equal(mt.floor_divide(a, b).numpy(), [-4, 3])
    np.testing.assert_array_equal(mt.remainder(a, b).numpy(), [1, 1])
    np.testing.assert_array_equal(mt.fmod(a, b).numpy(), [-1, 1])


def test_cummax_returns_the_later_index_on_ties():
    values, indices = mt.cummax(mt.tensor([1.0, 3.0, 3.0, 2.0]), 0)
    np.testing.assert_array_equal(values.numpy(), [1, 3, 3, 3])
    np.testing.assert_array_equal(indices.numpy(), [0, 1, 2, 2])


def test_nonzero_isclose_and_logical_ops():
    x = mt.tensor([[0.0, 1.0], [2.0, 0.0]])
    np.testing.assert_array_equal(x.nonzero().numpy(), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(mt.isclose(x, x + 1e-9).numpy(), True)
    assert mt.allclose(x, x.numpy())
    np.testing.assert_array_equal(mt.isinf(mt.tensor([1.0, math.inf])).numpy(), [False, True])
    np.testing.assert_array_equal(mt.logical_xor(mt.tensor([1, 0]), mt.tensor([1, 1])).numpy(),
                                  [False, True])
    np.testing.assert_array_equal(mt.bitwise_not(mt.tensor([0], dtype=mt.int8)).numpy(), [-1])


def test_binary_cross_entropy_clamps_the_logs_at_minus_100_like_pytorch():
    loss = F.binary_cross_entropy(mt.tensor([0.0, 1.0]), mt.tensor([1.0, 0.0]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [100.0, 100.0])


@pytest.mark.parametrize("op", [
    lambda x: x.sum(0), lambda x: x.sum(1), lambda x: x.mean(1), lambda x: x.prod(0),
    lambda x: x.softmax(0), lambda x: x.log_softmax(1), lambda x: x.cumsum(0),
    lambda x: x.cumprod(0), lambda x: x.logcumsumexp(0), lambda x: x.norm(axis=1),
    lambda x: x.tile(2, 1), lambda x: x.repeat_interleave(2, 0), lambda x: x.flip(0),
    lambda x: mt.pad(x, [(1, 1), (0, 0)]), lambda x: x[[0, 0]] if x.shape[0] else x[[]],
    lambda x: x.exp() * x, lambda x: x.T @ x, lambda x: x.unfold(1, 2, 1),
    lambda x: F.gelu(x), lambda x: F.silu(x), lambda x: x.var(1), lambda x: x.logsumexp(1),
    lambda x: x.logsumexp(0),
], ids=["sum0", "sum1", "mean1", "prod0", "softmax0", "log_softmax1", "cumsum0", "cumprod0",
        "logcumsumexp0", "norm1", "tile", "repeat_interleave", "flip", "pad", "index", "exp_mul",
        "matmul", "unfold", "gelu", "silu", "var1", "logsumexp1", "logsumexp0"])
def test_ops_on_a_tensor_with_an_empty_axis_run_forward_and_backward(op):
    x = mt.zeros(0, 3, dtype=mt.float64, requires_grad=True)
    y = op(x)
    (g,) = mt.grad(y.masked_fill(~y.isfinite(), 0.0).sum(), x, allow_unused=True)
    assert g is None or g.shape == (0, 3)
