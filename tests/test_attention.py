"""Properties of ``F.scaled_dot_product_attention`` and ``F.banded_attention`` on the NumPy backend
(wide bands on the numba backend too).

The reference below is written independently of the library: loops over (batch, head), the
textbook softmax exp(s) / sum exp(s) (inputs are small, so no shift is needed) and masks applied
by multiplying with an explicit 0/1 matrix built here from the definitions (causal: key j <= query
i, counting queries as the last positions; band: j = i + o * dilation with |o| <= window), never
with -inf. HIPS autograd differentiates it; the engine's gradients come from ``mt.grad``.
"""
from __future__ import annotations

import importlib.util
import math
import re
from unittest import mock

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp.backends import numpy_tuning
from minitorch_nlp.backends.numpy_backend import NumpyBackend
from minitorch_nlp.backends.numpy_tuning import BandBlocks
from minitorch_nlp.testing import strategies as S

pytestmark = [pytest.mark.sec4, pytest.mark.eq(11, 12)]

TOL = dict(rtol=1e-9, atol=1e-11)


# ---- the reference -------------------------------------------------------------------------------
def reference_attention(q, k, v, allowed, scale):
    """sum_j w_ij v_j with w_ij = a_ij exp(s_ij) / sum_j a_ij exp(s_ij), s = scale q.k, per
    (batch, head); a query with no allowed key outputs 0. ``allowed`` is (B, Tq, Tk) of 0/1."""
    batch, heads = q.shape[:2]
    out = []
    for b in range(batch):
        per_head = []
        for h in range(heads):
            e = anp.exp(anp.dot(q[b, h], k[b, h].T) * scale) * allowed[b]
            total = anp.sum(e, axis=1, keepdims=True)
            weights = e / anp.where(total > 0, total, 1.0)
            per_head.append(anp.dot(weights, v[b, h]))
        out.append(anp.stack(per_head))
    return anp.stack(out)


def full_mask(batch, tq, tk, causal, key_mask):
    """0/1 (B, Tq, Tk): query i (the last Tq of Tk positions when causal) may see key j."""
    allowed = np.ones((batch, tq, tk))
    for i in range(tq):
        for j in range(tk):
            if causal and j > i + (tk - tq):
                allowed[:, i, j] = 0
    if key_mask is not None:
        allowed *= key_mask[:, None, :]
    return allowed


def band_mask(batch, n, window, dilation, causal, key_mask):
    """0/1 (B, n, n): query i sees key i + o * dilation for -window <= o <= window (o <= 0 when
    causal) that lies inside the sequence."""
    allowed = np.zeros((batch, n, n))
    for i in range(n):
        for o in range(-window, (0 if causal else window) + 1):
            j = i + o * dilation
            if 0 <= j < n:
                allowed[:, i, j] = 1
    if key_mask is not None:
        allowed *= key_mask[:, None, :]
    return allowed


def default_scale(q):
    return 1.0 / math.sqrt(q.shape[-1])


# ---- inputs --------------------------------------------------------------------------------------
@st.composite
def qkv(draw, self_attention=False, masked=None):
    """(q, k, v, key_mask or None) float64, small: batch, heads <= 2, times <= 5, head_dim <= 4."""
    batch, heads, d = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 4))
    tk = draw(st.integers(1, 5))
    tq = tk if self_attention else draw(st.integers(1, 5))
    q = draw(S.arrays((batch, heads, tq, d), -2.0, 2.0))
    k = draw(S.arrays((batch, heads, tk, d), -2.0, 2.0))
    v = draw(S.arrays((batch, heads, tk, d), -2.0, 2.0))
    use_mask = draw(st.booleans()) if masked is None else masked
    key_mask = None
    if use_mask:
        key_mask = np.array(draw(st.lists(st.booleans(), min_size=batch * tk,
                                          max_size=batch * tk))).reshape(batch, tk)
    return q, k, v, key_mask


def leaves(*arrays):
    return [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in arrays]


def engine_value_and_grads(fn, arrays, cotangent):
    """fn's output and the gradients of sum(output * cotangent) for every array (mt.grad)."""
    tensors = leaves(*arrays)
    out = fn(*tensors)
    grads = mt.grad((out * mt.tensor(cotangent)).sum(), tensors)
    return out.numpy(), [g.numpy() for g in grads]


def reference_value_and_grads(allowed, scale, arrays, cotangent):
    def loss(q, k, v):
        return anp.sum(reference_attention(q, k, v, allowed, scale) * cotangent)

    value = reference_attention(*arrays, allowed, scale)
    return value, [autograd.grad(loss, i)(*arrays) for i in range(3)]


def assert_matches_reference(fn, arrays, allowed, scale, seed):
    cotangent = np.random.default_rng(seed).standard_normal(arrays[0].shape[:3]
                                                            + arrays[2].shape[3:])
    out, grads = engine_value_and_grads(fn, arrays, cotangent)
    want, want_grads = reference_value_and_grads(allowed, scale, arrays, cotangent)
    np.testing.assert_allclose(out, want, **TOL)
    for name, g, w in zip("qkv", grads, want_grads):
        np.testing.assert_allclose(g, w, **TOL, err_msg=f"gradient of {name}")


# ---- equality with the reference -----------------------------------------------------------------
@given(inputs=qkv(), causal=st.booleans(), scale=st.one_of(st.none(), st.floats(0.1, 2.0)),
       seed=S.seeds())
def test_attention_equals_the_reference(inputs, causal, scale, seed):
    q, k, v, key_mask = inputs
    allowed = full_mask(q.shape[0], q.shape[2], k.shape[2], causal, key_mask)

    def attention(q_, k_, v_):
        return F.scaled_dot_product_attention(q_, k_, v_, causal=causal, key_mask=key_mask,
                                              scale=scale)

    assert_matches_reference(attention, (q, k, v), allowed,
                             default_scale(q) if scale is None else scale, seed)


@given(inputs=qkv(self_attention=True), window=st.integers(1, 4), dilation=st.integers(1, 3),
       causal=st.booleans(), seed=S.seeds())
def test_banded_attention_follows_the_dilated_band(inputs, window, dilation, causal, seed):
    q, k, v, key_mask = inputs
    allowed = band_mask(q.shape[0], q.shape[2], window, dilation, causal, key_mask)

    def banded(q_, k_, v_):
        return F.banded_attention(q_, k_, v_, window=window, dilation=dilation, causal=causal,
                                  key_mask=key_mask)

    assert_matches_reference(banded, (q, k, v), allowed, default_scale(q), seed)


BACKENDS = ["numpy"] + (["numba"] if importlib.util.find_spec("numba") else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, window, dilation, causal", [
    (150, 40, 1, False), (150, 70, 1, True), (131, 24, 3, False), (97, 33, 2, True),
    (40, 100, 1, False)])
@pytest.mark.parametrize("chunk_scores", [1 << 18, 1])
def test_a_wide_band_runs_in_blocks_and_follows_the_band(backend, n, window, dilation, causal,
                                                         chunk_scores):
    """Bands wider than a block of queries (several blocks, the residue classes of a dilation
    that does not divide n, padding at both ends, masked keys) against the dense reference, the
    blocks in one chunk or one block per chunk (the key gradients of neighbouring chunks'
    windows overlap); on the numba backend these bands take the blocked products, not the row
    kernels."""
    rng = np.random.default_rng(n + window)
    q, k, v = (rng.standard_normal((2, 2, n, 5)) for _ in range(3))
    key_mask = rng.random((2, n)) > 0.2
    key_mask[1, :60] = False                  # some queries of batch 1 see no key at all
    allowed = band_mask(2, n, window, dilation, causal, key_mask)

    def banded(q_, k_, v_):
        return F.banded_attention(q_, k_, v_, window=window, dilation=dilation, causal=causal,
                                  key_mask=key_mask)

    with mt.backend(backend), mock.patch.object(numpy_tuning, "GROUP_BLOCK", chunk_scores):
        assert_matches_reference(banded, (q, k, v), allowed, default_scale(q), 0)


def test_blocked_band_memory_is_linear_in_n():
    """The kept probabilities hold n * (block + band width) scores per (batch, head), not n^2."""
    q = np.zeros((1, 1, 4096, 4))
    _, probs = NumpyBackend().banded_attention(q, q, q, 1.0, 100, 1, True, None)
    blocks = BandBlocks(4096, 100, 1, True)
    assert probs.size == blocks.count * blocks.block * (blocks.block + 100) < 4096 * 250


# ---- properties that hold by construction --------------------------------------------------------
@given(inputs=qkv(self_attention=True), t=st.integers(0, 4), seed=S.seeds())
def test_causal_output_ignores_later_positions(inputs, t, seed):
    q, k, v, key_mask = inputs
    n = q.shape[2]
    t = min(t, n - 1)
    rng = np.random.default_rng(seed)
    later = [a.copy() for a in (q, k, v)]
    for a in later:
        a[:, :, t + 1:] = rng.standard_normal(a[:, :, t + 1:].shape)
    kwargs = dict(causal=True, key_mask=key_mask)
    before = F.scaled_dot_product_attention(*(mt.tensor(a) for a in (q, k, v)), **kwargs)
    after = F.scaled_dot_product_attention(*(mt.tensor(a) for a in later), **kwargs)
    np.testing.assert_allclose(after.numpy()[:, :, :t + 1], before.numpy()[:, :, :t + 1], **TOL)


@given(inputs=qkv(masked=True), causal=st.booleans(), seed=S.seeds())
def test_masked_keys_change_nothing(inputs, causal, seed):
    q, k, v, key_mask = inputs
    rng = np.random.default_rng(seed)
    k2, v2 = k.copy(), v.copy()
    hidden = ~key_mask[:, None, :, None] & np.ones(k.shape, dtype=bool)
    k2[hidden] = rng.standard_normal(int(hidden.sum())) * 5
    v2[hidden] = rng.standard_normal(int(hidden.sum())) * 5
    kwargs = dict(causal=causal, key_mask=key_mask)
    tensors = leaves(q, k, v)
    out = F.scaled_dot_product_attention(*tensors, **kwargs)
    changed = F.scaled_dot_product_attention(*(mt.tensor(a) for a in (q, k2, v2)), **kwargs)
    np.testing.assert_allclose(changed.numpy(), out.numpy(), **TOL)
    _, dk, dv = mt.grad(out.sum(), tensors)
    assert not dk.numpy()[hidden].any() and not dv.numpy()[hidden].any()


@pytest.mark.parametrize("function", ["attention", "banded"])
def test_a_query_that_sees_no_key_gives_zero_output_and_gradient(function):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 4, 3)) for _ in range(3))
    key_mask = np.array([[False] * 4, [True, False, True, False]])
    tensors = leaves(q, k, v)
    if function == "attention":
        out = F.scaled_dot_product_attention(*tensors, key_mask=key_mask)
    else:  # query i sees keys i - 2, i, i + 2: queries 1 and 3 of batch 1 see only masked keys
        out = F.banded_attention(*tensors, window=1, dilation=2, key_mask=key_mask)
    grads = mt.grad((out * mt.tensor(rng.standard_normal(out.shape))).sum(), tensors)
    for array in [out.numpy()] + [g.numpy() for g in grads]:
        assert np.isfinite(array).all()
        assert not array[0].any()  # batch 0 has no real key at all
    blind = [1, 3] if function == "banded" else []
    assert not out.numpy()[1, :, blind].any() and not grads[0].numpy()[1, :, blind].any()
    assert out.numpy()[1, :, [i for i in range(4) if i not in blind]].all()


def test_causal_queries_before_the_first_key_give_zeros():
    """With more queries than keys, causal queries are the last positions: the first ones see no
    key at all and must give 0, not NaN."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 1, 5, 2))
    k, v = (rng.standard_normal((1, 1, 3, 2)) for _ in range(2))
    tensors = leaves(q, k, v)
    out = F.scaled_dot_product_attention(*tensors, causal=True)
    (dq,) = mt.grad(out.sum(), tensors[:1])
    assert np.isfinite(out.numpy()).all() and np.isfinite(dq.numpy()).all()
    assert not out.numpy()[0, 0, :2].any() and not dq.numpy()[0, 0, :2].any()
    assert out.numpy()[0, 0, 2:].all()


@given(inputs=qkv(self_attention=True), extra=st.integers(0, 3), causal=st.booleans(),
       seed=S.seeds())
def test_banded_attention_with_a_wide_window_is_full_attention(inputs, extra, causal, seed):
    q, k, v, key_mask = inputs
    window = q.shape[2] + extra
    cotangent = np.random.default_rng(seed).standard_normal(q.shape)
    kwargs = dict(causal=causal, key_mask=key_mask)
    banded, banded_grads = engine_value_and_grads(
        lambda *t: F.banded_attention(*t, window=window, **kwargs), (q, k, v), cotangent)
    full, full_grads = engine_value_and_grads(
        lambda *t: F.scaled_dot_product_attention(*t, **kwargs), (q, k, v), cotangent)
    np.testing.assert_allclose(banded, full, **TOL)
    for g, w in zip(banded_grads, full_grads):
        np.testing.assert_allclose(g, w, **TOL)


# ---- second order --------------------------------------------------------------------------------
def second_order(fn, allowed, scale, arrays, seed):
    """d/d(q, k, v) of <d loss / dq, r> with loss = sum(out * c): the engine (create_graph=True)
    against autograd differentiating its own gradient of the reference."""
    rng = np.random.default_rng(seed)
    cotangent = rng.standard_normal(arrays[0].shape[:3] + arrays[2].shape[3:])
    direction = rng.standard_normal(arrays[0].shape)
    tensors = leaves(*arrays)
    (dq,) = mt.grad((fn(*tensors) * mt.tensor(cotangent)).sum(), tensors[:1], create_graph=True)
    got = mt.grad((dq * mt.tensor(direction)).sum(), tensors, allow_unused=True)

    def loss(q, k, v):
        return anp.sum(reference_attention(q, k, v, allowed, scale) * cotangent)

    def directional(q, k, v):
        return anp.sum(autograd.grad(loss, 0)(q, k, v) * direction)

    for i, g in enumerate(got):
        want = autograd.grad(directional, i)(*arrays)
        np.testing.assert_allclose(np.zeros_like(want) if g is None else g.numpy(), want,
                                   rtol=1e-8, atol=1e-10, err_msg=f"input {i}")


@given(inputs=qkv(), causal=st.booleans(), seed=S.seeds())
def test_attention_second_order(inputs, causal, seed):
    q, k, v, key_mask = inputs
    allowed = full_mask(q.shape[0], q.shape[2], k.shape[2], causal, key_mask)
    second_order(lambda *t: F.scaled_dot_product_attention(*t, causal=causal, key_mask=key_mask),
                 allowed, default_scale(q), (q, k, v), seed)


@given(inputs=qkv(self_attention=True), window=st.integers(1, 3), dilation=st.integers(1, 2),
       causal=st.booleans(), seed=S.seeds())
def test_banded_attention_second_order(inputs, window, dilation, causal, seed):
    q, k, v, key_mask = inputs
    allowed = band_mask(q.shape[0], q.shape[2], window, dilation, causal, key_mask)
    second_order(lambda *t: F.banded_attention(*t, window=window, dilation=dilation,
                                               causal=causal, key_mask=key_mask),
                 allowed, default_scale(q), (q, k, v), seed)


# ---- errors --------------------------------------------------------------------------------------
def _ones(*shape):
    return mt.ones(*shape)


def _call(function, q, k, v, **kwargs):
    if function == "banded_attention":
        kwargs.setdefault("window", 2)
        return F.banded_attention(q, k, v, **kwargs)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)


FUNCTIONS = ["scaled_dot_product_attention", "banded_attention"]


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_inputs_must_be_4d(function, name):
    shapes = {"q": (1, 2, 3, 4), "k": (1, 2, 3, 4), "v": (1, 2, 3, 4)}
    shapes[name] = (2, 3, 4)
    tensors = {n: _ones(*s) for n, s in shapes.items()}
    with pytest.raises(ValueError, match=rf"^{function}: {name} must have shape \(batch, heads, "
                                         r"time, head_dim\), got \(2, 3, 4\)$"):
        _call(function, tensors["q"], tensors["k"], tensors["v"])


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("shapes", [
    ((2, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)),  # batch of q differs
    ((1, 2, 3, 4), (1, 3, 3, 4), (1, 3, 3, 4)),  # heads differ
    ((1, 2, 3, 4), (1, 2, 3, 5), (1, 2, 3, 4)),  # head_dim of q and k differ
    ((1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 2, 4)),  # time of k and v differ
])
def test_shapes_must_fit(function, shapes):
    q, k, v = (_ones(*s) for s in shapes)
    with pytest.raises(ValueError, match=rf"^{function}: shapes q .* do not fit: q and k need "
                                         r"the same batch and head_dim, k and v the same batch, "
                                         r"heads and time, and k's number of heads must divide "
                                         r"q's$"):
        _call(function, q, k, v)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("mask", [np.ones((1, 3), dtype=np.int64), np.ones((1, 4), dtype=bool),
                                  np.ones((3,), dtype=bool)])
def test_key_mask_must_be_bool_of_batch_by_time(function, mask):
    q = _ones(1, 2, 3, 4)
    with pytest.raises(ValueError, match=rf"^{function}: key_mask must be a bool array of shape "
                                         r"\(batch, key_time\) = \(1, 3\) with True for real "
                                         r"tokens; got"):
        _call(function, q, q, q, key_mask=mask)


def test_banded_attention_is_self_attention():
    q, kv = _ones(1, 2, 3, 4), _ones(1, 2, 5, 4)
    with pytest.raises(ValueError, match=r"^banded_attention: is self-attention; q has 3 "
                                         r"positions, k 5$"):
        F.banded_attention(q, kv, kv, window=2)


@pytest.mark.parametrize("argument", ["window", "dilation"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, None])
def test_banded_window_and_dilation_must_be_positive_ints(argument, value):
    q = _ones(1, 1, 3, 2)
    kwargs = {"window": 2, "dilation": 1, argument: value}
    message = f"banded_attention: {argument} must be a positive int, got {value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        F.banded_attention(q, q, q, **kwargs)
