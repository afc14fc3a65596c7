"""Numerics under stress: every operation that reduces or accumulates in exp / log space stays
exact at logits of +-1e4, with masking values of -1e4, -1e9 and -inf, and on fully masked rows,
forward and gradient, on the NumPy and Numba backends; and every loss with a log of a
probability is defined at exact zeros as the maths defines it (0 log 0 = 0).

The references are float64 NumPy: ``np.logaddexp`` reductions of the logits less each slice's
largest finite entry (so that -1e9 + log 2 keeps its digits). An implementation that
exponentiates the logits without shifting them overflows or underflows on these draws.

What a fully masked row (every entry -inf) gives, forward / gradient:
softmax 0 / 0, log_softmax -inf / 0, logsumexp -inf / 0, logcumsumexp -inf until the first
finite entry / 0 there, attention output 0 / 0 (for a query whose keys are all masked).
A row masked with a finite value (-1e4, -1e9) is an ordinary row: the maths gives the uniform
distribution over its entries when they are all equal.
"""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp.compress.distillation import soft_target_loss
from minitorch_nlp.compress.mobilebert_losses import attention_transfer_loss
from minitorch_nlp.compress.tinybert import attention_loss, prediction_loss
from minitorch_nlp.testing import strategies as S

MASKING_VALUES = (-1e4, -1e9, -math.inf)


BACKENDS = pytest.mark.parametrize("backend", [
    "numpy", pytest.param("numba", marks=pytest.mark.skipif(
        importlib.util.find_spec("numba") is None, reason="needs numba"))])


# ---- references: float64 -------------------------------------------------------------------------
def _ref_log_softmax_and_lse(x, axis):
    """log p and log-sum-exp along ``axis``; an all -inf slice gives -inf for both."""
    top = np.max(np.where(np.isfinite(x), x, -np.inf), axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted_lse = np.logaddexp.reduce(x - top, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):
        log_p = np.where(shifted_lse == -np.inf, -np.inf, (x - top) - shifted_lse)
    return log_p, shifted_lse + top


def ref_logsumexp(x, axis=-1, keepdims=False):
    lse = _ref_log_softmax_and_lse(x, axis)[1]
    return lse if keepdims else np.squeeze(lse, axis)


def ref_softmax(x, axis=-1):
    return np.exp(ref_log_softmax(x, axis))


def ref_log_softmax(x, axis=-1):
    return _ref_log_softmax_and_lse(x, axis)[0]


def ref_logcumsumexp(x, axis):
    return np.logaddexp.accumulate(x, axis=axis)


# ---- strategies ----------------------------------------------------------------------------------
@st.composite
def stressed_logits(draw, min_rows=1, max_rows=4, min_cols=1, max_cols=6, fully_masked=True):
    """(rows, cols) float64 logits of scale 1, 1e2 or 1e4, some entries replaced by a masking
    value, and perhaps a row masked entirely with -inf."""
    rows = draw(st.integers(min_rows, max_rows))
    cols = draw(st.integers(min_cols, max_cols))
    scale = draw(st.sampled_from([1.0, 1e2, 1e4]))
    x = draw(S.arrays((rows, cols), -1.0, 1.0)) * scale
    masked = draw(S.bool_masks((rows, cols), all_false_row=False))
    x = np.where(~masked, draw(st.sampled_from(MASKING_VALUES)), x)
    if fully_masked and rows > 1 and draw(st.booleans()):
        x[draw(st.integers(0, rows - 1))] = -np.inf
    return x


def _cotangent(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _finite_or_equal(actual, expected, rtol, atol):
    """Equal values, infinities in the same places."""
    np.testing.assert_array_equal(np.isposinf(actual), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=rtol, atol=atol)


def _rounding_of_outputs(x, u):
    """The absolute tolerance of a gradient computed from log-sum-exp outputs as large as the
    logits x: each output carries a rounding of |y| 2^-53, and e^(x - y) inherits it."""
    magnitude = np.abs(x[np.isfinite(x)]).max(initial=0.0)
    return 1e-12 + 1e-15 * magnitude * np.abs(u).max(initial=0.0)


# ---- softmax, log-softmax, logsumexp, logcumsumexp -----------------------------------------------
@BACKENDS
@pytest.mark.eq(35)
@pytest.mark.sec6
@given(x=stressed_logits(), seed=S.seeds(), axis=st.sampled_from([0, -1]))
def test_softmax_is_exact_at_large_logits_and_masks(backend, x, seed, axis):
    with mt.backend(backend):
        u = _cotangent(x.shape, seed)
        t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
        y = t.softmax(axis=axis)
        (g,) = mt.grad((y * mt.tensor(u, dtype=mt.float64)).sum(), t)
        p = ref_softmax(x, axis)
        np.testing.assert_allclose(y.numpy(), p, rtol=1e-12, atol=1e-300)
        # d softmax . u = p * (u - sum(p u))
        expected = p * (u - (p * u).sum(axis=axis, keepdims=True))
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.eq(35)
@pytest.mark.sec6
@BACKENDS
@given(x=stressed_logits(), seed=S.seeds(), axis=st.sampled_from([0, -1]))
def test_log_softmax_is_exact_at_large_logits_and_masks(backend, x, seed, axis):
    with mt.backend(backend):
        u = _cotangent(x.shape, seed)
        t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
        y = t.log_softmax(axis=axis)
        # the -inf outputs (masked entries) are left out of the loss: their cotangent is 0
        finite_u = np.where(np.isneginf(ref_log_softmax(x, axis)), 0.0, u)
        (g,) = mt.grad(y.masked_fill(y == -math.inf, 0.0), t,
                       grad_outputs=mt.tensor(u, dtype=mt.float64))
        _finite_or_equal(y.numpy(), ref_log_softmax(x, axis), rtol=1e-12, atol=1e-9)
        # d log_softmax . u = u - p sum(u), over the entries whose output is finite
        p = ref_softmax(x, axis)
        expected = finite_u - p * finite_u.sum(axis=axis, keepdims=True)
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-9, atol=1e-12)


@given(x=stressed_logits(), seed=S.seeds(), axis=st.sampled_from([0, -1]),
       keepdims=st.booleans())
def test_logsumexp_is_exact_at_large_logits_and_masks(x, seed, axis, keepdims):
    t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    y = t.logsumexp(axis=axis, keepdims=keepdims)
    expected = ref_logsumexp(x, axis, keepdims)
    _finite_or_equal(y.numpy(), expected, rtol=1e-13, atol=1e-9)
    u = _cotangent(y.shape, seed)
    (g,) = mt.grad((y.masked_fill(y == -math.inf, 0.0) * mt.tensor(u, dtype=mt.float64)).sum(),
                   t)
    u_kept = u if keepdims else np.expand_dims(u, axis)
    np.testing.assert_allclose(g.numpy(), ref_softmax(x, axis) * u_kept, rtol=1e-9,
                               atol=_rounding_of_outputs(x, u))


@given(x=stressed_logits(max_cols=8), seed=S.seeds(), axis=st.sampled_from([0, 1]))
def test_logcumsumexp_is_exact_at_large_logits_and_masks(x, seed, axis):
    expected = ref_logcumsumexp(x, axis)
    u = np.where(np.isneginf(expected), 0.0, _cotangent(x.shape, seed))
    t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    y = t.logcumsumexp(axis)
    _finite_or_equal(y.numpy(), expected, rtol=1e-13, atol=1e-9)
    (g,) = mt.grad((y.masked_fill(y == -math.inf, 0.0) * mt.tensor(u, dtype=mt.float64)).sum(), t)
    # dy_i / dx_j = e^(x_j - y_i) for j <= i: each output's softmax over its prefix
    xs, us = np.moveaxis(x, axis, -1), np.moveaxis(u, axis, -1)
    want = np.zeros_like(xs)
    n = xs.shape[-1]
    for i in range(n):
        prefix = ref_softmax(xs[..., :i + 1], -1)
        want[..., :i + 1] += prefix * us[..., i:i + 1]
    np.testing.assert_allclose(g.numpy(), np.moveaxis(want, -1, axis), rtol=1e-9,
                               atol=_rounding_of_outputs(x, u))


# ---- cross-entropy: class ids (label smoothing, ignore_index) and probabilities ------------------
@st.composite
def classification(draw):
    x = draw(stressed_logits(min_cols=2, fully_masked=False))
    rows = x.shape[0]
    # a target class never sits on a -inf logit (that loss is inf, the maths' value)
    allowed = [np.flatnonzero(np.isfinite(row)) for row in x]
    target = np.array([draw(st.sampled_from(list(a))) if a.size else -100 for a in allowed])
    ignored = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    target = np.where(ignored, -100, target)
    return x, target


def _ref_cross_entropy(x, target, smoothing):
    """Per row: (1 - eps) (-log p_t) + eps mean_c(-log p_c), 0 on ignored rows."""
    log_p = ref_log_softmax(x)
    loss = np.zeros(x.shape[0])
    grad = np.zeros_like(x)
    for r, t in enumerate(target):
        if t == -100:
            continue
        loss[r] = -(1 - smoothing) * log_p[r, t] - (smoothing * log_p[r].mean() if smoothing
                                                     else 0.0)
        grad[r] = ref_softmax(x[r])
        grad[r, t] -= 1 - smoothing
        grad[r] -= smoothing / x.shape[1]
    return loss, grad


@pytest.mark.eq(38)
@pytest.mark.sec6
@BACKENDS
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@given(data=classification())
def test_cross_entropy_is_exact_at_large_logits(backend, smoothing, data):
    with mt.backend(backend):
        x, target = data
        if smoothing and not np.isfinite(x).all():
            x = np.where(np.isinf(x), -1e9, x)  # smoothing puts mass on every class: -inf gives inf
        t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
        loss = F.cross_entropy(t, target, reduction="none", label_smoothing=smoothing)
        (g,) = mt.grad(loss.sum(), t)
        expected, expected_grad = _ref_cross_entropy(x, target, smoothing)
        np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(g.numpy(), expected_grad, rtol=1e-9, atol=1e-12)


@given(x=stressed_logits(min_cols=2, fully_masked=False), logits_of_target=stressed_logits(
    min_cols=2, fully_masked=False))
def test_cross_entropy_with_soft_targets_is_exact_with_zero_probabilities(x, logits_of_target):
    rows = min(x.shape[0], logits_of_target.shape[0])
    cols = min(x.shape[1], logits_of_target.shape[1])
    x, q = x[:rows, :cols], ref_softmax(logits_of_target[:rows, :cols])
    # where the target probability is 0 the student may be -inf too: 0 log 0 = 0
    x = np.where((q == 0) & (np.arange(cols) % 2 == 0), -np.inf, x)
    t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    loss = F.cross_entropy(t, mt.tensor(q, dtype=mt.float64), reduction="none")
    (g,) = mt.grad(loss.sum(), t)
    log_p = ref_log_softmax(x)
    kept = q > 0
    expected = -np.where(kept, q * np.where(kept, log_p, 0.0), 0.0).sum(axis=-1)
    _finite_or_equal(loss.numpy(), expected, rtol=1e-10, atol=1e-9)
    if np.isfinite(expected).all():
        np.testing.assert_allclose(g.numpy(), ref_softmax(x) * q.sum(-1, keepdims=True) - q,
                                   rtol=1e-9, atol=1e-12)


# ---- attention with -inf, -1e9 and -1e4 masks, fully masked queries ------------------------------
def _ref_attention(q, k, v, allowed, bias_value, scale):
    """softmax(q k^T scale + bias) v and the weights, in float64 NumPy; the bias is
    ``bias_value`` where a key is not allowed."""
    scores = q @ np.swapaxes(k, -1, -2) * scale + np.where(allowed, 0.0, bias_value)
    p = ref_softmax(scores)
    out = p @ v
    return out, p


@BACKENDS
@pytest.mark.eq(11, 12)
@pytest.mark.sec4
@pytest.mark.parametrize("how", ["mask", "bias", "key_mask"])
@given(data=st.data(), masking=st.sampled_from(MASKING_VALUES), scale=st.sampled_from([1.0, 1e2]))
def test_attention_is_exact_with_masks_and_fully_masked_queries(backend, how, data, masking,
                                                                 scale):
    with mt.backend(backend):
        tq = data.draw(st.integers(1, 4), label="tq")
        tk = data.draw(st.integers(1, 4), label="tk")
        d = data.draw(st.integers(1, 3), label="d")
        q = data.draw(S.arrays((1, 2, tq, d)), label="q") * scale
        k = data.draw(S.arrays((1, 2, tk, d)), label="k") * scale
        v = data.draw(S.arrays((1, 2, tk, d)), label="v")
        if how == "key_mask":
            keys = np.array(data.draw(st.lists(st.booleans(), min_size=tk, max_size=tk)))
            allowed = np.broadcast_to(keys, (1, 2, tq, tk))
            kwargs = {"key_mask": mt.tensor(keys[None])}
            masking = -math.inf  # a key mask removes the key: as -inf
        else:
            allowed = data.draw(S.bool_masks((1, 1, tq, tk)), label="allowed")
            if tq > 1 and data.draw(st.booleans(), label="fully masked query"):
                allowed = allowed.copy()
                allowed[..., 0, :] = False
            allowed = np.broadcast_to(allowed, (1, 2, tq, tk))
            if how == "mask" or not np.isfinite(masking):
                kwargs = ({"mask": mt.tensor(allowed)} if how == "mask" else
                          {"bias": mt.tensor(np.where(allowed, 0.0, -np.inf))})
                masking = -math.inf
            else:
                kwargs = {"bias": mt.tensor(np.where(allowed, 0.0, masking))}
        scale_factor = 1.0 / math.sqrt(d)
        tensors = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in (q, k, v)]
        out = F.scaled_dot_product_attention(*tensors, **kwargs)
        u = _cotangent(out.shape, data.draw(S.seeds(), label="seed"))
        grads = mt.grad((out * mt.tensor(u, dtype=mt.float64)).sum(), tensors)

        want, p = _ref_attention(q, k, v, allowed, masking, scale_factor)
        # vjp of softmax(s) v: dv = p^T u, ds = p * (u v^T - rowsum(p * u v^T))
        dp = u @ np.swapaxes(v, -1, -2)
        ds = p * (dp - (p * dp).sum(-1, keepdims=True))
        dq = ds @ k * scale_factor
        dk = np.swapaxes(ds, -1, -2) @ q * scale_factor
        dv = np.swapaxes(p, -1, -2) @ u
        tol = {"rtol": 1e-8, "atol": 1e-9 * scale}
        np.testing.assert_allclose(out.numpy(), want, **tol)
        for name, g, expected in zip("qkv", grads, (dq, dk, dv)):
            np.testing.assert_allclose(g.numpy(), expected, err_msg=f"d{name}", **tol)


# ---- float32 at +-1e4: finite, within float32's precision ----------------------------------------
@BACKENDS
def test_float32_softmax_family_at_plus_minus_1e4(backend):
    with mt.backend(backend):
        x = np.array([[1e4, -1e4, 0.0, 1e4 - 1.0], [-1e4, -1e4, -1e4, -1e9],
                      [-np.inf, -np.inf, -np.inf, -np.inf]])
        t = mt.tensor(x, requires_grad=True)
        outputs = [t.softmax(-1), t.log_softmax(-1).masked_fill(~t.isfinite(), 0.0),
                   t.logsumexp(-1).masked_fill(t.logsumexp(-1) == -math.inf, 0.0),
                   F.cross_entropy(t[:2], np.array([0, 2]), reduction="none")]
        grads = mt.grad(sum(o.sum() for o in outputs), t)
        assert np.isfinite(grads[0].numpy()).all()
        np.testing.assert_allclose(outputs[0].numpy(), ref_softmax(x), atol=1e-6)
        np.testing.assert_allclose(outputs[3].numpy(), [-ref_log_softmax(x[:1])[0, 0],
                                                       math.log(3.0)], atol=1e-4)


# ---- losses with a log of a probability at exact zeros -------------------------------------------
@pytest.mark.eq(47)
@pytest.mark.sec6
def test_attention_transfer_with_a_zero_teacher_weight_is_the_kl_divergence():
    # a causal or padded teacher, no mask: sum_k t log(t / s) with 0 log 0 = 0
    teacher = np.array([[1.0, 0.0], [0.5, 0.5]])
    student = np.array([[0.9, 0.1], [0.4, 0.6]])
    expected = (math.log(1 / 0.9) + 0.5 * math.log(0.5 / 0.4) + 0.5 * math.log(0.5 / 0.6)) / 2
    t = mt.tensor(teacher[None, None], dtype=mt.float64, requires_grad=True)
    s = mt.tensor(student[None, None], dtype=mt.float64, requires_grad=True)
    loss = attention_transfer_loss(t, s)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert loss.item() == pytest.approx(0.0629, abs=5e-5)
    g_teacher, g_student = mt.grad(loss, [t, s])
    # d/ds = -t / s / (T A): 0 where the teacher's weight is 0
    np.testing.assert_allclose(g_student.numpy()[0, 0], -teacher / student / 2, rtol=1e-12)
    assert np.isfinite(g_teacher.numpy()).all()


@pytest.mark.eq(47)
@pytest.mark.sec6
@given(data=st.data())
def test_attention_transfer_is_finite_with_zero_weights_and_any_mask(data):
    time = data.draw(st.integers(1, 4))
    logits = data.draw(stressed_logits(min_rows=time, max_rows=time, min_cols=time,
                                       max_cols=time, fully_masked=False))
    # a causal teacher: weight exactly 0 above the diagonal (and wherever the logits underflow)
    teacher = ref_softmax(np.where(np.tri(time, dtype=bool), logits, -np.inf))
    student = ref_softmax(data.draw(S.arrays((time, time))))
    mask = data.draw(st.none() | S.bool_masks((1, time), all_false_row=None))
    t = mt.tensor(teacher[None, None], dtype=mt.float64, requires_grad=True)
    s = mt.tensor(student[None, None], dtype=mt.float64, requires_grad=True)
    loss = attention_transfer_loss(t, s, mask=None if mask is None else mt.tensor(mask))
    keep = np.ones((1, time), dtype=bool) if mask is None else mask
    kl = np.zeros(time)
    for row in range(time):
        for key in range(time):
            if keep[0, key] and teacher[row, key] > 0:
                kl[row] += teacher[row, key] * math.log(teacher[row, key] / student[row, key])
    count = keep.sum()
    expected = (kl * keep[0]).sum() / count if count else 0.0
    assert loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for g in mt.grad(loss, [t, s]):
        assert np.isfinite(g.numpy()).all()


def test_kl_div_is_zero_where_the_target_is_zero_even_at_minus_inf_input():
    target = np.array([[0.0, 0.25, 0.75]])
    log_q = np.array([[-np.inf, math.log(0.5), math.log(0.5)]])
    expected = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    for log_target in (False, True):
        inp = mt.tensor(log_q, dtype=mt.float64, requires_grad=True)
        tgt = mt.tensor(np.log(target) if log_target else target, dtype=mt.float64,
                        requires_grad=True)
        with np.errstate(divide="ignore"):
            loss = F.kl_div(inp, tgt, reduction="sum", log_target=log_target)
        assert loss.item() == pytest.approx(expected, rel=1e-12)
        g_input, g_target = mt.grad(loss, [inp, tgt])
        np.testing.assert_allclose(g_input.numpy(), -target, rtol=1e-12)
        assert np.isfinite(g_target.numpy()).all()


@pytest.mark.eq(37)
@pytest.mark.sec6
@pytest.mark.parametrize("mask", [None, np.array([True, False])])
def test_soft_target_loss_with_a_masked_vocabulary_entry_is_finite(mask):
    # the teacher's probability of entry 0 is 0, and the student's logit there is -inf
    teacher = np.array([[-np.inf, 1.0, 2.0], [-np.inf, 0.0, 0.0]])
    student = np.array([[-np.inf, 2.0, 1.0], [-np.inf, 1.0, -1.0]])
    temperature = 2.0
    q = ref_softmax(teacher / temperature)
    log_p = ref_log_softmax(student / temperature)
    per_row = -(q[:, 1:] * log_p[:, 1:]).sum(-1)
    keep = np.ones(2, dtype=bool) if mask is None else mask
    s = mt.tensor(student, dtype=mt.float64, requires_grad=True)
    loss = soft_target_loss(s, mt.tensor(teacher, dtype=mt.float64), temperature=temperature,
                            mask=mask)
    assert loss.item() == pytest.approx(per_row[keep].mean(), rel=1e-12)
    (g,) = mt.grad(loss, s)
    # (p_s - p_t) / T on the counted rows
    expected = (ref_softmax(student / temperature) - q) / temperature * keep[:, None] / keep.sum()
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-10, atol=1e-15)


@pytest.mark.eq(44)
@pytest.mark.sec6
def test_tinybert_prediction_loss_with_zero_teacher_probabilities_is_finite():
    teacher = np.array([[-np.inf, 3.0, 0.0]])
    student = np.array([[-np.inf, 0.0, 1.0]])
    q, log_p = ref_softmax(teacher), ref_log_softmax(student)
    s = mt.tensor(student, dtype=mt.float64, requires_grad=True)
    loss = prediction_loss(s, mt.tensor(teacher, dtype=mt.float64))
    assert loss.item() == pytest.approx(-(q[0, 1:] * log_p[0, 1:]).sum(), rel=1e-12)
    (g,) = mt.grad(loss, s)
    np.testing.assert_allclose(g.numpy(), ref_softmax(student) - q, rtol=1e-10, atol=1e-15)


@pytest.mark.eq(41)
@pytest.mark.sec6
@pytest.mark.parametrize("masking", MASKING_VALUES)
def test_tinybert_attention_loss_leaves_masked_scores_out(masking):
    # scores recorded after masking: padded keys hold the masking value in both models
    keys = np.array([[True, True, False]])
    student = np.array([[1.0, 2.0, masking], [0.5, -1.0, masking], [0.0, 0.0, masking]])
    teacher = np.array([[1.5, 2.0, masking], [0.5, 0.0, masking], [9.0, 9.0, masking]])
    s = mt.tensor(student[None, None], dtype=mt.float64, requires_grad=True)
    loss = attention_loss(s, mt.tensor(teacher[None, None], dtype=mt.float64),
                          key_mask=mt.tensor(keys))
    diff = (student - teacher)[:2, :2]
    assert loss.item() == pytest.approx((diff ** 2).mean(), rel=1e-12)
    (g,) = mt.grad(loss, s)
    expected = np.zeros((3, 3))
    expected[:2, :2] = 2 * diff / 4
    np.testing.assert_array_equal(g.numpy()[0, 0], expected)


@pytest.mark.eq(41)
@pytest.mark.sec6
def test_tinybert_attention_loss_without_a_mask_takes_scores_masked_alike_as_equal():
    # a causal student and teacher, no key mask: -inf above the diagonal in both
    upper = np.triu(np.ones((3, 3), dtype=bool), 1)
    student = np.where(upper, -np.inf, np.arange(9.0).reshape(3, 3))
    teacher = np.where(upper, -np.inf, np.ones((3, 3)))
    s = mt.tensor(student[None, None], dtype=mt.float64, requires_grad=True)
    loss = attention_loss(s, mt.tensor(teacher[None, None], dtype=mt.float64))
    diff = np.where(upper, 0.0, student - teacher)
    assert loss.item() == pytest.approx((diff ** 2).mean(), rel=1e-12)
    (g,) = mt.grad(loss, s)
    np.testing.assert_allclose(g.numpy()[0, 0], 2 * diff / 9, rtol=1e-14)


# ---- the fully masked row, as docs/engine.md defines it ------------------------------------------
@BACKENDS
def test_a_fully_masked_row_gives_the_documented_values_and_zero_gradients(backend):
    with mt.backend(backend):
        x = mt.tensor([[-math.inf] * 3, [0.0, -math.inf, 1.0]], dtype=mt.float64,
                      requires_grad=True)
        u = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        # (output, its first row, the gradient of sum(u * output) on the first row), with the
        # row's softmax taken as 0
        outputs = {
            "softmax": (x.softmax(-1), [0.0] * 3, [0.0] * 3),
            "log_softmax": (x.log_softmax(-1), [-math.inf] * 3, u[0]),
            "logsumexp": (x.logsumexp(-1, keepdims=True), [-math.inf], [0.0] * 3),
            "logcumsumexp": (x.logcumsumexp(1), [-math.inf] * 3, [0.0] * 3),
            "cross_entropy": (F.cross_entropy(x, np.array([1, 0]), reduction="none")[:, None],
                              [math.inf], [0.0, -1.0, 0.0]),
        }
        for name, (out, first_row, first_grad) in outputs.items():
            np.testing.assert_array_equal(out.numpy()[0], first_row, err_msg=name)
            cotangent = mt.tensor(u[:, :out.shape[1]], dtype=mt.float64)
            (g,) = mt.grad(out, x, grad_outputs=cotangent)
            np.testing.assert_array_equal(g.numpy()[0], first_grad, err_msg=name)
            assert np.isfinite(g.numpy()).all(), name
        q = mt.tensor(np.ones((1, 1, 2, 2)), dtype=mt.float64, requires_grad=True)
        keys = mt.tensor(np.array([[[[False, False], [True, False]]]]))
        out = F.scaled_dot_product_attention(q, q, q, mask=keys)
        np.testing.assert_array_equal(out.numpy()[0, 0, 0], [0.0, 0.0])
        (g,) = mt.grad(out[0, 0, 0].sum(), q)
        np.testing.assert_array_equal(g.numpy(), np.zeros((1, 1, 2, 2)))


# ---- recorded gradients (create_graph=True) take the composite forms: same values --------------
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp", "logcumsumexp",
                                  "cross_entropy", "cross_entropy_smoothed"])
@given(x=stressed_logits(min_cols=2), seed=S.seeds())
def test_recorded_gradients_equal_the_kernels_at_large_logits_and_masks(name, x, seed):
    ops = {
        "softmax": lambda t: t.softmax(-1),
        "log_softmax": lambda t: t.log_softmax(-1),
        "logsumexp": lambda t: t.logsumexp(-1),
        "logcumsumexp": lambda t: t.logcumsumexp(1),
        "cross_entropy": lambda t: F.cross_entropy(t, np.zeros(t.shape[0], np.int64),
                                                   reduction="none"),
        "cross_entropy_smoothed": lambda t: F.cross_entropy(
            t, np.zeros(t.shape[0], np.int64), reduction="none", label_smoothing=0.2),
    }
    t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    out = ops[name](t)
    u = mt.tensor(_cotangent(out.shape, seed), dtype=mt.float64)
    (fast,) = mt.grad(out, t, grad_outputs=u)
    (recorded,) = mt.grad(ops[name](t), t, grad_outputs=u, create_graph=True)
    np.testing.assert_allclose(recorded.numpy(), fast.numpy(), rtol=1e-9,
                               atol=_rounding_of_outputs(x, u.numpy()))
    (second,) = mt.grad((recorded * recorded).sum(), t, allow_unused=True)
    assert second is None or np.isfinite(second.numpy()).all()
