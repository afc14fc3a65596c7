"""Section VIII-B: Transformer-XL's absolute-position attention score, eq 90 (Dai et al., 2019,
section 3.3), the form that eq 91 replaces.

The four-term score against ``minitorch_nlp/testing/reference/xl_absolute.py`` (values and
float64 gradients), against a standard Transformer's scores (queries and keys projected from
E + U; after the scale and softmax, the toolkit's attention weights), against eq 91's structure
(the relative core scores the last query as eq 90 does when R_{i-j} takes U_j's place and u, v
take W_q U_i's), and bad shapes.
"""
from __future__ import annotations

import math

import autograd
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.models.transformer_xl import (RelativePositionAttention,
                                                 absolute_position_scores,
                                                 relative_position_encoding)
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import xl_absolute as reference
from tests.model_checks import REFERENCE, TIGHT

pytestmark = [pytest.mark.sec8, pytest.mark.eq(90)]


@st.composite
def score_cases(draw):
    batch, time, d, d_k = (draw(st.integers(1, 3)) for _ in range(4))
    return (draw(S.arrays((batch, time, d))), draw(S.arrays((time, d))),
            draw(S.arrays((d_k, d))), draw(S.arrays((d_k, d))))


@given(score_cases(), S.seeds())
def test_eq90_four_terms_match_reference_values_and_gradients(arrays, seed):
    tensors = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in arrays]
    scores = absolute_position_scores(*tensors)
    np.testing.assert_allclose(scores.numpy(), reference.eq90_absolute_scores(*arrays),
                               **REFERENCE)
    cotangent = np.random.default_rng(seed).standard_normal(scores.shape)
    (scores * mt.tensor(cotangent)).sum().backward()
    expected = autograd.grad(
        lambda *a: np.sum(reference.eq90_absolute_scores(*a) * cotangent), (0, 1, 2, 3))(*arrays)
    for tensor, grad in zip(tensors, expected):
        np.testing.assert_allclose(tensor.grad.numpy(), grad, **REFERENCE)


@settings(max_examples=10)
@given(score_cases(), S.seeds())
def test_each_of_the_four_terms_matches_its_reference_values_and_gradients(arrays, seed):
    """``terms=True``: (a) to (d) in the paper's order, each against its own bilinear form
    ((d) holds no token: (T, T), which broadcasts over the sequences)."""
    tensors = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in arrays]
    terms = absolute_position_scores(*tensors, terms=True)
    expected = reference.eq90_absolute_terms(*arrays)
    rng = np.random.default_rng(seed)
    for index, (term, want) in enumerate(zip(terms, expected)):
        np.testing.assert_allclose(np.broadcast_to(term.numpy(), want.shape), want, **REFERENCE,
                                   err_msg=f"term {index}")
        cotangent = rng.standard_normal(want.shape)
        got = mt.grad((term * mt.tensor(cotangent)).sum(), tensors, allow_unused=True,
                      retain_graph=True)
        wanted = autograd.grad(lambda *a, index=index, cotangent=cotangent: np.sum(
            reference.eq90_absolute_terms(*a)[index] * cotangent), (0, 1, 2, 3))(*arrays)
        for g, w in zip(got, wanted):
            np.testing.assert_allclose(np.zeros(w.shape) if g is None else g.numpy(), w,
                                       **REFERENCE, err_msg=f"term {index}")


@given(score_cases())
def test_the_four_terms_are_a_standard_transformers_scores_on_e_plus_u(arrays):
    """(W_q (E_xi + U_i)) . (W_k (E_xj + U_j)); scaled and normalised, the toolkit's attention
    weights for those queries and keys."""
    E, U, W_q, W_k = (mt.tensor(a, dtype=mt.float64) for a in arrays)
    q_proj, k_proj = nn.Linear(*W_q.shape[::-1], bias=False), nn.Linear(*W_k.shape[::-1],
                                                                          bias=False)
    q = nn.functional_call(q_proj, {"weight": W_q}, E + U)
    k = nn.functional_call(k_proj, {"weight": W_k}, E + U)
    scores = absolute_position_scores(E, U, W_q, W_k)
    np.testing.assert_allclose(scores.numpy(), (q @ k.swapaxes(-1, -2)).numpy(), **TIGHT)
    terms = absolute_position_scores(E, U, W_q, W_k, terms=True)
    np.testing.assert_allclose(sum(t.numpy() for t in terms), scores.numpy(), **TIGHT)
    weights = F.attention_weights(q[:, None], k[:, None])[:, 0]
    np.testing.assert_allclose(F.softmax(scores / math.sqrt(W_q.shape[0]), axis=-1).numpy(),
                               weights.numpy(), **TIGHT)


@given(st.integers(1, 6), st.integers(1, 3), S.seeds())
def test_eq91_scores_the_last_query_as_eq90_with_r_for_u_and_learnt_u_v(time, d_k, seed):
    """For the last query i = T-1, the relative core (eq 91) with W_{k,R} = W_k, R_{i-j} in place
    of U_j (the sinusoid table of distances T-1 .. 0) and u = v = W_q U_i gives eq 90's row: the
    relative form keeps term (a) and replaces only what carries absolute positions."""
    rng = np.random.default_rng(seed)
    d = 2 * d_k
    E = mt.tensor(rng.standard_normal((2, time, d)))
    W_q, W_k = (mt.tensor(rng.standard_normal((d_k, d))) for _ in range(2))
    R = relative_position_encoding(time, d, dtype=mt.float64)     # row j: distance T-1-j
    expected = absolute_position_scores(E, R, W_q, W_k)[:, -1].numpy() / math.sqrt(d_k)

    core = RelativePositionAttention(d, 1, d_k).to(mt.float64)
    query_position = F.linear(R[-1:], W_q)                          # W_q U_{T-1}: (1, d_k)
    with nn.replaced_tensors(core, {"position_proj.weight": W_k,
                                    "content_bias": query_position,
                                    "position_bias": query_position}):
        q, k = F.linear(E, W_q)[:, None], F.linear(E, W_k)[:, None]   # (batch, 1 head, T, d_k)
        content = ((q + core.content_bias.unsqueeze(1)) @ k.swapaxes(-1, -2)) / math.sqrt(d_k)
        relative = content + core.position_scores(q, time, R)
    np.testing.assert_allclose(relative[:, 0, -1].numpy(), expected, **TIGHT)


def test_bad_shapes_are_refused():
    E, U, W = mt.zeros(2, 5, 4), mt.zeros(5, 4), mt.zeros(3, 4)
    with pytest.raises(ValueError, match=r"U must be \(T, d\) = \(5, 4\) for E of shape "
                                         r"\(2, 5, 4\), got \(6, 4\)"):
        absolute_position_scores(E, mt.zeros(6, 4), W, W)
    with pytest.raises(ValueError, match=r"W_q \(3, 4\) and W_k \(3, 5\) must both be "
                                         r"\(d_k, d\) with d = 4"):
        absolute_position_scores(E, U, W, mt.zeros(3, 5))
