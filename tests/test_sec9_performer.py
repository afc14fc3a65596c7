"""Section IX-E: the Performer's FAVOR+ attention (Choromanski et al., 2021).

``PerformerAttention`` against the query-by-query reference of
``minitorch_nlp/testing/reference/performer.py`` with the same features (float64 values and
gradients, bidirectional and causal, over several prefix-sum chunks); then the statistics: the
positive random features estimate the softmax kernel without bias (tested against the standard
error of many independent draws, for Gaussian and orthogonal features), their variance falls as
features are added, and the attention converges to softmax attention; then the redraw
schedule, saving, learning and the errors.
"""
from __future__ import annotations


import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp.attention import PerformerAttention
from minitorch_nlp.attention.performer import gaussian_features, positive_random_features
from minitorch_nlp.testing import strategies as S
from tests.attention_core_checks import TOL, stack_learns, t64
from minitorch_nlp.testing.reference import performer as R

pytestmark = [pytest.mark.sec9,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]


@given(st.data())
def test_favor_attention_matches_reference(data):
    heads, time, d = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 8)), \
        data.draw(st.integers(1, 3))
    causal = data.draw(st.booleans())
    core = PerformerAttention(d, data.draw(st.integers(1, 6)), chunk=data.draw(st.integers(1, 4)),
                              generator=mt.Generator(data.draw(S.seeds()))).to(mt.float64)
    q, k, v = (data.draw(S.arrays((2, heads, time, d), low=-1.5, high=1.5)) for _ in range(3))
    key_mask = data.draw(st.none() | S.bool_masks((2, time), all_false_row=False).filter(
        lambda m: m[:, 0].all()))                  # every causal query sees a real key
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(q.shape)
    features = core.features.numpy()
    tensors = [t64(a) for a in (q, k, v)]
    out, _ = core(*tensors, causal=causal, key_mask=key_mask)
    (out * mt.tensor(cotangent)).sum().backward()

    def reference(q, k, v):
        return anp.stack([anp.stack([
            R.favor_attention(q[b, h], k[b, h], v[b, h], features, causal,
                              None if key_mask is None else key_mask[b])
            for h in range(heads)]) for b in range(2)])

    np.testing.assert_allclose(out.numpy(), reference(q, k, v), **TOL)
    for i, t in enumerate(tensors):
        expected = autograd.grad(lambda *a: anp.sum(reference(*a) * cotangent), i)(q, k, v)
        np.testing.assert_allclose(t.grad.numpy(), expected, **TOL)


def kernel_estimates(x, y, num_features, draws, orthogonal, seed=0):
    """phi(x) . phi(y) for ``draws`` independent sets of features."""
    generator = mt.Generator(seed)
    estimates = []
    for _ in range(draws):
        features = mt.tensor(gaussian_features(num_features, x.size, orthogonal=orthogonal,
                                               generator=generator), dtype=mt.float64)
        phi = positive_random_features(mt.tensor(np.stack([x, y])), features).numpy()
        estimates.append(phi[0] @ phi[1])
    return np.array(estimates)


@pytest.mark.parametrize("orthogonal", [False, True])
def test_the_kernel_estimate_is_unbiased(orthogonal):
    """The mean of 4000 independent estimates lies within 4 standard errors of exp(x . y). (It
    catches orthogonal blocks taken from QR without R's diagonal signs, which are not uniformly
    distributed and bias the estimate by about 15% here.)"""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 8)) * 0.3
    estimates = kernel_estimates(x, y, 8, 4000, orthogonal)
    standard_error = estimates.std(ddof=1) / np.sqrt(estimates.size)
    assert abs(estimates.mean() - np.exp(x @ y)) < 4 * standard_error


def test_the_variance_falls_as_features_grow():
    """Var of the mean of m i.i.d. features is Var(one) / m: 16 times more features, about 16
    times less variance (at least 8 times, over 300 draws each)."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, 4)) * 0.5
    few = kernel_estimates(x, y, 8, 300, orthogonal=False).var()
    many = kernel_estimates(x, y, 128, 300, orthogonal=False, seed=1).var()
    assert many < few / 8


def test_attention_converges_to_softmax_attention_as_features_grow():
    rng = np.random.default_rng(2)
    q, k, v = (mt.tensor(a, dtype=mt.float64) for a in rng.standard_normal((3, 1, 2, 24, 8)) * 0.5)
    for causal in (False, True):
        exact = F.scaled_dot_product_attention(q, k, v, causal=causal).numpy()
        errors = [np.abs(PerformerAttention(8, m, generator=mt.Generator(3)).to(mt.float64)(
            q, k, v, causal=causal)[0].numpy() - exact).mean() for m in (8, 128, 4096)]
        assert errors[0] > errors[1] > errors[2]
        assert errors[2] < 0.01


def test_need_weights_gives_the_estimated_weights_behind_the_output():
    q, k, v = (mt.tensor(a) for a in np.random.default_rng(0).standard_normal((3, 1, 2, 7, 4)))
    core = PerformerAttention(4, 16)
    for causal in (False, True):
        out, weights = core(q, k, v, causal=causal, need_weights=True)
        np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, rtol=1e-5)
        if causal:
            assert np.all(np.triu(weights.numpy()[0, 0], 1) == 0)
        np.testing.assert_allclose(out.numpy(), core(q, k, v, causal=causal)[0].numpy(),
                                   rtol=1e-4, atol=1e-5)


def test_features_are_redrawn_on_schedule_while_training_only(tmp_path):
    core = PerformerAttention(4, 8, redraw_interval=2, generator=mt.Generator(0))
    q = mt.randn(1, 1, 5, 4)
    seen = []
    for _ in range(5):
        core(q, q, q)
        seen.append(core.features.numpy().copy())
    changed = [not np.array_equal(a, b) for a, b in zip(seen, seen[1:])]
    assert changed == [False, True, False, True]    # calls 3 and 5 draw new features
    core.eval()
    before = core.features.numpy().copy()
    for _ in range(3):
        core(q, q, q)
    np.testing.assert_array_equal(core.features.numpy(), before)
    mt.save(core.state_dict(), tmp_path / "performer.npz")
    other = PerformerAttention(4, 8, generator=mt.Generator(9))
    other.load_state_dict(mt.load(tmp_path / "performer.npz"))
    np.testing.assert_array_equal(other.features.numpy(), before)


def test_orthogonal_features_are_orthogonal_within_blocks():
    features = gaussian_features(6, 4, generator=mt.Generator(0))
    directions = features / np.linalg.norm(features, axis=1, keepdims=True)
    np.testing.assert_allclose(directions[:4] @ directions[:4].T, np.eye(4), atol=1e-12)


def test_a_decoder_with_the_causal_core_learns_a_tiny_batch():
    stack_learns([PerformerAttention(8, 16, chunk=4) for _ in range(2)], causal=True, steps=60)


def test_bad_input_is_refused():
    q = mt.randn(1, 1, 5, 4)
    with pytest.raises(ValueError, match="num_features"):
        PerformerAttention(4, 0)
    with pytest.raises(ValueError, match="redraw_interval"):
        PerformerAttention(4, 8, redraw_interval=0)
    with pytest.raises(ValueError, match="head_dim=8, the queries have 4"):
        PerformerAttention(8)(q, q, q)
    with pytest.raises(ValueError, match="never forms"):
        PerformerAttention(4)(q, q, q, mask=np.ones((5, 5), dtype=bool))
