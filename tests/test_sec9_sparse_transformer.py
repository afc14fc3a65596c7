"""Section IX-A: the Sparse Transformer's factorised attention (Child et al., 2019), eq 92-95.

The core ``SparseTransformerAttention`` (grouped dense products, never n x n) against the
set-by-set references of ``minitorch_nlp/testing/reference/sparse_transformer.py`` (float64
values and gradients); then what holds by construction: the merged pattern with l >= n is full
causal attention, the dense fall-back (masks, weights, a cache) agrees with the grouped path,
the memory stays far below n^2, every efficient core (this one, LSH, Linformer, Performer,
BigBird) gives the same on the numba backend, and a stack with the core learns; then the errors.
"""
from __future__ import annotations

import functools
import tracemalloc

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import attention as A
from minitorch_nlp import nn
from minitorch_nlp.attention import SparseTransformerAttention, alternating_sparse_cores
from minitorch_nlp.testing import EquationMismatch, check_equation
from minitorch_nlp.testing import strategies as S
from tests.attention_core_checks import TOL, stack_learns, t64
from minitorch_nlp.testing.reference import sparse_transformer as R

pytestmark = [pytest.mark.sec9,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]


def factors(pattern, time, stride, summary):
    if pattern == "strided":
        return R.strided_sets(time, stride)
    return R.fixed_sets(time, stride, summary)


@st.composite
def cases(draw, heads=None):
    time, stride = draw(st.integers(1, 11)), draw(st.integers(1, 5))
    pattern = draw(st.sampled_from(["strided", "fixed"]))
    heads = draw(st.integers(1, 3)) if heads is None else heads
    shape = (2, heads, time, draw(st.integers(1, 3)))
    q, k, v = (draw(S.arrays(shape)) for _ in range(3))
    key_mask = draw(st.none() | S.bool_masks((2, time)))
    return dict(q=q, k=k, v=v, key_mask=key_mask, pattern=pattern, stride=stride,
                summary=draw(st.integers(1, stride)), seed=draw(S.seeds()))


def check_against(core, case, one_head):
    """The core's output and q/k/v gradients equal ``one_head(q, k, v, head, key_mask_row)``'s
    and autograd's gradients of it, batch by batch and head by head."""
    q, k, v, key_mask = case["q"], case["k"], case["v"], case["key_mask"]
    cotangent = np.random.default_rng(case["seed"]).standard_normal(q.shape)
    tensors = [t64(a) for a in (q, k, v)]
    out, _ = core(*tensors, causal=True, key_mask=key_mask)
    (out * mt.tensor(cotangent)).sum().backward()

    def reference(q, k, v):
        return anp.stack([
            anp.stack([one_head(q[b, h], k[b, h], v[b, h], h,
                                None if key_mask is None else key_mask[b])
                                  for h in range(q.shape[1])])
            for b in range(q.shape[0])])

    np.testing.assert_allclose(out.numpy(), reference(q, k, v), **TOL)
    for i, t in enumerate(tensors):
        expected = autograd.grad(lambda *a: anp.sum(reference(*a) * cotangent), i)(
            q, k, v)
        np.testing.assert_allclose(t.grad.numpy(), expected, **TOL)


# ---- eq 92-95 against the references -------------------------------------------------------------
@pytest.mark.eq(92)
@pytest.mark.eq(94)
@given(cases())
def test_eq94_merged_pattern_matches_reference(case):
    core = SparseTransformerAttention(case["stride"], case["pattern"], summary=case["summary"])
    sets = factors(case["pattern"], case["q"].shape[2], case["stride"], case["summary"])
    check_against(core, case, lambda q, k, v, h, row: R.eq94_merged(q, k, v, sets, row))


@pytest.mark.eq(92)
@pytest.mark.eq(95)
@given(cases(heads=3))
def test_eq95_heads_take_alternate_factors(case):
    core = SparseTransformerAttention(case["stride"], case["pattern"], summary=case["summary"],
                                      combine="heads")
    sets = factors(case["pattern"], case["q"].shape[2], case["stride"], case["summary"])
    check_against(core, case, lambda q, k, v, h, row: R.eq92_attend(q, k, v, sets[h % 2], row))


@pytest.mark.eq(92)
@pytest.mark.eq(93)
@given(cases(), st.integers(0, 3))
def test_eq93_block_r_attends_factor_r_mod_2(case, block):
    core = alternating_sparse_cores(4, case["stride"], case["pattern"],
                                    summary=case["summary"])[block]
    sets = factors(case["pattern"], case["q"].shape[2], case["stride"], case["summary"])
    check_against(core, case,
                  lambda q, k, v, h, row: R.eq93_alternating(q, k, v, sets, block, row))


@pytest.mark.eq(95)
def test_eq95_head_outputs_concatenate_through_the_output_projection():
    """MultiHeadAttention with the core: W_p applied to the heads' concatenated attend(X, A^h)
    (eq 92's W_p . attend(X, S), eq 95's heads), the projections taken from the layer."""
    mt.manual_seed(0)
    attention = nn.MultiHeadAttention(8, 2, core=SparseTransformerAttention(3, combine="heads"))
    attention.to(mt.float64)
    x = np.random.default_rng(1).standard_normal((1, 10, 8))
    out = attention(mt.tensor(x, dtype=mt.float64), causal=True).numpy()

    def project(linear):
        return x[0] @ linear.weight.numpy().T + linear.bias.numpy()

    q, k, v = (project(p) for p in (attention.q_proj, attention.k_proj, attention.v_proj))
    sets = R.strided_sets(10, 3)
    heads = [R.eq92_attend(q[:, 4 * h:4 * h + 4], k[:, 4 * h:4 * h + 4], v[:, 4 * h:4 * h + 4],
                           sets[h]) for h in range(2)]
    expected = np.concatenate(heads, axis=1) @ attention.out_proj.weight.numpy().T
    np.testing.assert_allclose(out[0], expected + attention.out_proj.bias.numpy(), **TOL)


# ---- the check specs (eq 92-95) reject wrong candidates ------------------------------------------
def attend_the_first_factor_only(q, k, v, *, pattern, stride, summary, key_mask):
    return SparseTransformerAttention(stride, pattern, summary=summary, combine=1)(
        q, k, v, causal=True, key_mask=key_mask)[0]


def attend_the_other_factor(q, k, v, *, pattern, stride, summary, factor, key_mask):
    return SparseTransformerAttention(stride, pattern, summary=summary, combine=3 - factor)(
        q, k, v, causal=True, key_mask=key_mask)[0]


@pytest.mark.eq(92)
@pytest.mark.eq(94)
def test_the_specs_refuse_a_wrong_index_set():
    """The merged pattern's spec (eq 94) refuses A^(1) alone, eq 92's refuses the other factor:
    the specs' cases reach queries whose two factors differ."""
    with pytest.raises(EquationMismatch, match="eq 94: .*:attend_the_first_factor_only differs"):
        check_equation(94, attend_the_first_factor_only, max_examples=25)
    with pytest.raises(EquationMismatch, match="eq 92: .*:attend_the_other_factor differs"):
        check_equation(92, attend_the_other_factor, max_examples=25)


# ---- properties ----------------------------------------------------------------------------------
@pytest.mark.eq(94)
@given(st.integers(1, 12), st.integers(0, 3), S.seeds())
def test_merged_strided_pattern_with_stride_at_least_n_is_full_causal_attention(time, extra,
                                                                                 seed):
    q, k, v = np.random.default_rng(seed).standard_normal((3, 1, 2, time, 4))
    core = SparseTransformerAttention(time + extra)
    out, _ = core(*(mt.tensor(a) for a in (q, k, v)), causal=True)
    full = F.scaled_dot_product_attention(*(mt.tensor(a) for a in (q, k, v)), causal=True)
    np.testing.assert_allclose(out.numpy(), full.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.eq(92, 93, 94, 95)
@pytest.mark.parametrize("combine", ["merged", "heads", 1, 2])
@pytest.mark.parametrize("pattern", ["strided", "fixed"])
def test_dense_fallback_agrees_with_the_grouped_path(pattern, combine):
    """need_weights (and a mask) take the full core with the pattern as a mask: same output, and
    the weights vanish outside the pattern; a key/value cache (decoding) gives the last rows."""
    rng = np.random.default_rng(0)
    q, k, v = (mt.tensor(a, dtype=mt.float64) for a in rng.standard_normal((3, 2, 2, 9, 4)))
    core = SparseTransformerAttention(3, pattern, summary=2, combine=combine)
    grouped, _ = core(q, k, v, causal=True)
    dense, weights = core(q, k, v, causal=True, need_weights=True)
    np.testing.assert_allclose(dense.numpy(), grouped.numpy(), **TOL)
    outside = ~np.broadcast_to(core.pattern_mask(9, 2), weights.shape)
    assert np.all(weights.numpy()[outside] == 0)
    last, _ = core(q[:, :, -2:], k, v, causal=True)
    np.testing.assert_allclose(last.numpy(), grouped.numpy()[:, :, -2:], **TOL)
    masked, _ = core(q, k, v, causal=True, mask=np.ones((9, 9), dtype=bool))
    np.testing.assert_allclose(masked.numpy(), grouped.numpy(), **TOL)


def peak_bytes(attend, q, k, v):
    """The peak memory traced while ``attend(q, k, v)`` runs forward and backward."""
    tracemalloc.start()
    attend(q, k, v).sum().backward()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_memory_is_a_small_fraction_of_full_attention():
    """At n = 4096 (stride 64) forward and backward of the grouped core peak at less than a
    tenth of the fused full causal attention's, which keeps n x n scores (about 14x today)."""
    q, k, v = (mt.tensor(a, requires_grad=True) for a in
               np.random.default_rng(0).standard_normal((3, 1, 1, 4096, 8)))
    core = SparseTransformerAttention(64)
    sparse = peak_bytes(lambda *a: core(*a, causal=True)[0], q, k, v)
    full = peak_bytes(functools.partial(F.scaled_dot_product_attention, causal=True), q, k, v)
    assert sparse < full / 10


@pytest.mark.parametrize("make_core, causal", [
    (lambda: SparseTransformerAttention(3, "fixed", summary=2), True),
    (lambda: A.LSHAttention(2, 4, 2, seed=0), True),
    (lambda: A.LinformerAttention(12, 5), False),
    (lambda: A.PerformerAttention(4, 8, generator=mt.Generator(0)), True),
    (lambda: A.BlockSparseAttention(3, 1, (0,), 1, seed=0), False),
], ids=["sparse_transformer", "lsh", "linformer", "performer", "bigbird"])
def test_every_core_gives_the_same_on_the_numba_backend(make_core, causal):
    pytest.importorskip("numba")
    arrays = np.random.default_rng(0).standard_normal((3, 1, 2, 12, 4))
    core = make_core()
    expected, _ = core(*(mt.tensor(a) for a in arrays), causal=causal)
    with mt.backend("numba"):
        out, _ = core.to("numba")(*(mt.tensor(a) for a in arrays), causal=causal)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_a_decoder_stack_with_the_alternating_cores_learns_a_tiny_batch():
    stack_learns(alternating_sparse_cores(2, 4), causal=True, steps=60)


@pytest.mark.eq(92)
def test_dropout_keeps_the_expected_output_by_rescaling_the_kept_weights():
    """Training-mode dropout on the attention weights, rescaled by 1/(1-p): averaged over many
    independent masks (a batch of copies of one input), the output is the evaluation-mode one;
    without the rescale it would be (1-p) times it."""
    rng = np.random.default_rng(0)
    q, k, v = (np.broadcast_to(a, (4000, 1, 8, 4)) for a in rng.standard_normal((3, 1, 1, 8, 4)))
    core = SparseTransformerAttention(3, dropout=0.5)
    tensors = [mt.tensor(np.ascontiguousarray(a), dtype=mt.float64) for a in (q, k, v)]
    evaluated = core.eval()(*tensors, causal=True)[0].numpy()[0]
    trained = core.train()(*tensors, causal=True)[0].numpy()
    spread = trained.std(axis=0) / np.sqrt(len(trained))
    assert np.all(np.abs(trained.mean(axis=0) - evaluated) <= 5 * spread + 1e-9)


@pytest.mark.eq(92)
def test_dropout_acts_while_training_only():
    q, k, v = (mt.tensor(a) for a in np.random.default_rng(0).standard_normal((3, 1, 2, 8, 4)))
    core = SparseTransformerAttention(3, dropout=0.5)
    core.eval()
    first, second = core(q, k, v, causal=True)[0], core(q, k, v, causal=True)[0]
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    core.train()
    assert not np.allclose(core(q, k, v, causal=True)[0].numpy(), first.numpy())


# ---- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(stride=0), "stride"),
    (dict(stride=3, pattern="dilated"), "pattern must be one of"),
    (dict(stride=3, combine="union"), "combine must be one of"),
    (dict(stride=3, pattern="fixed", summary=4), "summary c=4 must be at most stride=3"),
])
def test_bad_configuration_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SparseTransformerAttention(**kwargs)


def test_bad_calls_are_refused():
    q = mt.randn(1, 1, 6, 4)
    with pytest.raises(ValueError, match="causal=True"):
        SparseTransformerAttention(2)(q, q, q)
    with pytest.raises(ValueError, match="at least 2 heads"):
        SparseTransformerAttention(2, combine="heads")(q, q, q, causal=True)
    with pytest.raises(ValueError, match="key_mask must be a bool array"):
        SparseTransformerAttention(2)(q, q, q, causal=True, key_mask=np.ones((1, 5), bool))
