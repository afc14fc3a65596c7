"""The fused grouped-attention kernel under every sparse pattern (``attention/grouped.py``,
``GroupedAttention``; numba kernels in ``backends/numba_sparse_kernels.py``).

``grouped_attention`` on the numpy and numba backends against a position-by-position reference
in HIPS autograd (values, log-sum-exps and float64 gradients); the numba kernels against the
NumPy backend's (float32 and float64, the parallel and the single-thread path, repeated
positions, all-hidden queries, indices shared over the batch or the heads); second derivatives
(which run the composite) equal the composite's own; LSH's chunk masks and pair counts from the
numba kernel equal the NumPy backend's; groups taken one per block give what one block of all
of them gives, and so do the blocks shared among threads; the row additions sum repeated
positions; the sparse cores (BigBird's block-sparse,
the Sparse Transformer's strided and fixed patterns, LSH) give the same values and gradients on
both backends; the errors.
"""
from __future__ import annotations

from unittest import mock

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.attention import BlockSparseAttention, LSHAttention, SparseTransformerAttention
from minitorch_nlp.attention.grouped import GroupedAttention, grouped_attention
from minitorch_nlp.attention.lsh import SELF_PENALTY
from minitorch_nlp.backends import get_backend, numpy_tuning
from tests.kernel_checks import on_threads

pytestmark = [pytest.mark.sec8, pytest.mark.sec9,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]

NUMPY, NUMBA = get_backend("numpy"), get_backend("numba")
TOL64 = dict(rtol=1e-9, atol=1e-11)


@st.composite
def grouped_problems(draw, dtype=np.float64):
    """q, k, v and a grouping: index arrays shared over the batch or the heads or not, repeated
    positions, an ``allowed`` that hides every key of some queries, a key mask and a bias
    sometimes."""
    batch, heads, time = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 7))
    d, d_v = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    groups, per_query, per_key = (draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                                  draw(st.integers(1, 4)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))

    def lead():
        return draw(st.sampled_from([1, batch])), draw(st.sampled_from([1, heads]))

    query_index = rng.integers(0, time, lead() + (groups, per_query))
    key_index = rng.integers(0, time, lead() + (groups, per_key))
    allowed = rng.random((batch, heads, groups, per_query, per_key)) < draw(
        st.sampled_from([0.0, 0.5, 1.0]))
    key_mask = draw(st.sampled_from([None, rng.random((batch, time)) < 0.7]))
    bias = draw(st.sampled_from([None, rng.standard_normal((1, heads, groups, 1, per_key))]))
    q = rng.standard_normal((batch, heads, time, d)).astype(dtype)
    k = rng.standard_normal((batch, heads, time, d)).astype(dtype)
    v = rng.standard_normal((batch, heads, time, d_v)).astype(dtype)
    return dict(q=q, k=k, v=v, query_index=query_index, key_index=key_index, allowed=allowed,
                key_mask=key_mask, bias=bias, scale=draw(st.sampled_from([0.5, 1.0])))


def reference(q, k, v, query_index, key_index, allowed, key_mask, bias, scale):
    """Query slot (b, h, g, i) attends, one pair at a time, the key slots j its ``allowed`` entry
    and the key mask let it see: (output, log-sum-exp) lists in slot order."""
    batch, heads = q.shape[:2]
    groups, per_query, per_key = allowed.shape[2:]
    query_index = np.broadcast_to(query_index, (batch, heads, groups, per_query))
    key_index = np.broadcast_to(key_index, (batch, heads, groups, per_key))
    bias = np.broadcast_to(0.0 if bias is None else bias, allowed.shape)
    outs, lses = [], []
    for b, h, g, i in np.ndindex(batch, heads, groups, per_query):
        t = query_index[b, h, g, i]
        seen = [j for j in range(per_key) if allowed[b, h, g, i, j]
                and (key_mask is None or key_mask[b, key_index[b, h, g, j]])]
        if not seen:
            outs.append(anp.zeros(v.shape[-1]))
            lses.append(-np.inf)
            continue
        scores = [anp.dot(q[b, h, t], k[b, h, key_index[b, h, g, j]]) * scale + bias[b, h, g, i, j]
                  for j in seen]
        total = sum(anp.exp(s) for s in scores)     # scores are O(1): no shift needed
        outs.append(sum(anp.exp(s) / total * v[b, h, key_index[b, h, g, j]]
                        for s, j in zip(scores, seen)))
        lses.append(anp.log(total))
    return outs, lses


def _cotangents(problem, seed):
    rng = np.random.default_rng(seed)
    shape = problem["allowed"].shape[:4]
    return rng.standard_normal(shape + (problem["v"].shape[-1],)), rng.standard_normal(shape)


def _library(backend_name, problem, cotangents):
    """grouped_attention's out, lse and the gradients of <out, c_out> + <finite lse, c_lse>."""
    static = {name: problem[name] for name in ("query_index", "key_index", "allowed",
                                               "key_mask", "bias", "scale")}
    with mt.backend(backend_name):
        tensors = [mt.tensor(problem[name], requires_grad=True) for name in "qkv"]
        out, lse = grouped_attention(*tensors, static.pop("query_index"),
                                     static.pop("key_index"), static.pop("allowed"), **static)
        finite = lse.masked_fill(~np.isfinite(lse.numpy()), 0.0)
        loss = (out * mt.tensor(cotangents[0])).sum() + (finite * mt.tensor(cotangents[1])).sum()
        grads = mt.grad(loss, tensors)
    return out.numpy(), lse.numpy(), [g.numpy() for g in grads]


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["numpy", "numba"])
@given(problem=grouped_problems(), seed=st.integers(0, 99))
def test_grouped_attention_matches_reference(backend_name, problem, seed):
    c_out, c_lse = _cotangents(problem, seed)
    out, lse, grads = _library(backend_name, problem, (c_out, c_lse))
    static = {name: problem[name] for name in ("query_index", "key_index", "allowed",
                                               "key_mask", "bias", "scale")}
    outs, lses = reference(problem["q"], problem["k"], problem["v"], **static)
    np.testing.assert_allclose(out.reshape(-1, out.shape[-1]), np.array(outs), **TOL64)
    np.testing.assert_allclose(lse.reshape(-1), np.array(lses), **TOL64)

    def loss(q, k, v):
        outs, lses = reference(q, k, v, **static)
        return sum(anp.dot(o, c) for o, c in zip(outs, c_out.reshape(len(outs), -1))) + sum(
            z * c for z, c, hidden in zip(lses, c_lse.reshape(-1), np.isneginf(lse.reshape(-1)))
            if not hidden)

    expected = autograd.grad(loss, (0, 1, 2))(problem["q"], problem["k"], problem["v"])
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, **TOL64)


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]),
       parallel=st.booleans(), seed=st.integers(0, 99))
@pytest.mark.slow
def test_numba_kernels_match_the_numpy_backend(data, dtype, parallel, seed):
    problem = data.draw(grouped_problems(dtype))
    arrays = [problem[name] for name in ("q", "k", "v", "query_index", "key_index", "allowed",
                                         "key_mask", "bias", "scale")]
    expected, state = NUMPY.grouped_attention(*arrays)
    with on_threads(parallel):
        got, numba_state = NUMBA.grouped_attention(*arrays)
    assert got.dtype == dtype
    tol = TOL64 if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, expected, **tol)       # -inf log-sum-exps in the same places
    grad = np.random.default_rng(seed).standard_normal(got.shape).astype(dtype)
    backward = (problem["q"], problem["k"], problem["v"])
    indices = (problem["query_index"], problem["key_index"], problem["scale"])
    want = NUMPY.grouped_attention_backward(grad, *backward, state, *indices)
    with on_threads(parallel):
        grads = NUMBA.grouped_attention_backward(grad, *backward, numba_state, *indices)
    for g, w in zip(grads, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, **tol)


@pytest.mark.parametrize("backend_name", ["numpy", "numba"])
@given(problem=grouped_problems(), seed=st.integers(0, 99))
def test_second_derivatives_equal_the_composites(backend_name, problem, seed):
    static = {name: problem[name] for name in ("query_index", "key_index", "allowed",
                                               "key_mask", "bias", "scale")}
    results = []
    for fn in (GroupedAttention.apply, GroupedAttention.composite):
        with mt.backend(backend_name):
            tensors = [mt.tensor(problem[name], requires_grad=True) for name in "qkv"]
            both = fn(*tensors, **static)
            finite = both.masked_fill(~np.isfinite(both.numpy()), 0.0)
            cotangent = np.random.default_rng(seed).standard_normal(both.shape)
            grads = mt.grad((finite * mt.tensor(cotangent)).sum(), tensors, create_graph=True)
            directions = np.random.default_rng(seed + 1)
            total = sum((g * mt.tensor(directions.standard_normal(g.shape))).sum() for g in grads)
            results.append([g.numpy() for g in mt.grad(total, tensors, allow_unused=True)])
    for fused, composite in zip(*results):
        np.testing.assert_allclose(fused, composite, **TOL64)


CORES = {   # name: (the core, the causal settings it takes)
    "block_sparse": (lambda: BlockSparseAttention(2, 3, (0,), 1, seed=3), (False, True)),
    "strided_merged": (lambda: SparseTransformerAttention(3, "strided", combine="merged"),
                       (True,)),
    "fixed_heads": (lambda: SparseTransformerAttention(3, "fixed", combine="heads"), (True,)),
    "lsh": (lambda: LSHAttention(4, 3, num_rounds=2, seed=5), (False, True)),
}


@pytest.mark.parametrize("name,causal", [(name, causal) for name, (_, settings) in CORES.items()
                                         for causal in settings])
def test_sparse_cores_agree_between_numpy_and_numba(name, causal):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 12, 4)) for _ in range(3))
    key_mask = np.ones((2, 12), dtype=bool)
    key_mask[1, 9:] = False
    cotangent = rng.standard_normal((2, 2, 12, 4))
    results = []
    for backend_name in ("numpy", "numba"):
        with mt.backend(backend_name):
            tensors = [mt.tensor(a, requires_grad=True) for a in (q, k, v)]
            core = CORES[name][0]()
            core.eval()
            out, _ = core(*(tensors if name != "lsh" else (tensors[0], tensors[0], tensors[2])),
                          causal=causal, key_mask=key_mask)
            grads = mt.grad((out * mt.tensor(cotangent)).sum(), tensors, allow_unused=True)
            results.append([out.numpy()] + [None if g is None else g.numpy() for g in grads])
    for got, want in zip(*results):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, **TOL64)


@given(data=st.data(), causal=st.booleans(), parallel=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_lsh_round_masks_match_the_numpy_backend(data, causal, parallel, dtype):
    """The numba kernel against the NumPy backend on the buckets and chunks LSH really draws;
    the bias in the dtype asked for (the scores')."""
    chunk_length, chunks = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    time, rounds = chunk_length * chunks, data.draw(st.integers(1, 3))
    lsh = LSHAttention(data.draw(st.sampled_from([1, 2, 4])), chunk_length, rounds,
                       seed=data.draw(st.integers(0, 99)))
    x = np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal((2, 2, time, 3))
    buckets = lsh.hash(x, lsh.rotations(3))
    order, chunk = lsh.chunks(buckets)
    r = data.draw(st.integers(0, rounds - 1))
    queries = order[:, :, r].reshape(2, 2, chunks, chunk_length)
    key_index = np.concatenate([np.roll(queries, 1, axis=2), queries], axis=-1)
    has_previous = np.ones((chunks, 2 * chunk_length), dtype=bool)
    has_previous[0, :chunk_length] = False
    args = (buckets, chunk, queries, key_index, has_previous, r, causal, SELF_PENALTY, dtype)
    expected = NUMPY.lsh_round_masks(*args)
    with on_threads(parallel):
        got = NUMBA.lsh_round_masks(*args)
    assert got[1].dtype == expected[1].dtype == dtype
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-15 if dtype == np.float64 else 1e-6,
                               atol=0)


def test_bad_indices_are_refused_with_the_shapes():
    q = mt.tensor(np.zeros((2, 3, 5, 4)))
    allowed = np.ones((1, 1, 1, 1, 1), dtype=bool)
    fine = np.zeros((1, 1, 2, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="key_index holds positions from 0 to 5; the sequence "
                                         "has positions 0 to 4"):
        grouped_attention(q, q, q, fine, np.array([[[[0, 5]]]]), allowed, scale=1.0)
    with pytest.raises(ValueError, match="query_index holds positions from -1"):
        grouped_attention(q, q, q, -np.ones((1, 1, 2, 2), dtype=int), fine, allowed, scale=1.0)
    with pytest.raises(ValueError, match=r"query_index has shape \(2, 2\); it must be "
                                         r"\(1 or 2, 1 or 3, groups, slots\)"):
        grouped_attention(q, q, q, np.zeros((2, 2), dtype=int), fine, allowed, scale=1.0)
    with pytest.raises(ValueError, match=r"key_index has shape \(1, 2, 2, 2\)"):
        grouped_attention(q, q, q, fine, np.zeros((1, 2, 2, 2), dtype=int), allowed, scale=1.0)
    with pytest.raises(ValueError, match="query_index has 2 groups, key_index 3"):
        grouped_attention(q, q, q, fine, np.zeros((1, 1, 3, 2), dtype=int), allowed, scale=1.0)


def test_one_key_group_is_shared_by_every_query_group():
    rng = np.random.default_rng(1)
    problem = dict(q=rng.standard_normal((1, 2, 6, 3)), k=rng.standard_normal((1, 2, 6, 3)),
                   v=rng.standard_normal((1, 2, 6, 3)),
                   query_index=np.arange(6).reshape(1, 1, 3, 2),
                   key_index=np.array([[[[0, 2, 5]]]]), allowed=np.ones((1, 1, 1, 1, 1), bool),
                   key_mask=None, bias=None, scale=0.7)
    cotangents = (rng.standard_normal((1, 2, 3, 2, 3)), rng.standard_normal((1, 2, 3, 2)))
    expected = _library("numpy", dict(problem, key_index=np.tile(problem["key_index"],
                                                                 (1, 1, 3, 1))), cotangents)
    got = _library("numba", problem, cotangents)
    for g, w in zip(got[:2] + tuple(got[2]), expected[:2] + tuple(expected[2])):
        np.testing.assert_allclose(g, w, **TOL64)


@pytest.mark.parametrize("backend_name", ["numpy", "numba"])
@given(problem=grouped_problems(), seed=st.integers(0, 99))
def test_blocks_of_one_group_give_the_one_block_result(backend_name, problem, seed):
    """The groups are taken in blocks (``numpy_tuning.GROUP_BLOCK`` scores at a time): one
    (batch, head, group) unit per block gives what one block of all of them gives, values and
    gradients."""
    cotangents = _cotangents(problem, seed)
    whole = _library(backend_name, problem, cotangents)
    with mock.patch.object(numpy_tuning, "GROUP_BLOCK", 1):
        blocks = _library(backend_name, problem, cotangents)
    for got, want in zip(blocks[:2] + tuple(blocks[2]), whole[:2] + tuple(whole[2])):
        np.testing.assert_allclose(got, want, **TOL64)


@pytest.mark.parametrize("backend_name", ["numpy", "numba"])
@given(problem=grouped_problems(), seed=st.integers(0, 99), threads=st.integers(2, 3))
def test_blocks_in_threads_give_the_calling_threads_result(backend_name, problem, seed, threads):
    """The blocks shared among Python threads (``_in_parts``: consecutive parts of the blocks,
    each part's gradients added up apart, then summed): the values are the calling thread's bit
    for bit, the gradients equal to rounding."""
    cotangents = _cotangents(problem, seed)
    backend = get_backend(backend_name)
    with mock.patch.object(numpy_tuning, "GROUP_BLOCK", 1):
        alone = _library(backend_name, problem, cotangents)
        with mock.patch.object(type(backend), "_task_threads",
                               staticmethod(lambda work, tasks: min(threads, tasks))), \
                on_threads(True):
            shared = _library(backend_name, problem, cotangents)
    for got, want in zip(shared[:2], alone[:2]):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(shared[2], alone[2]):
        np.testing.assert_allclose(got, want, **TOL64)


@pytest.mark.parametrize("backend_name", ["numpy", "numba"])
def test_an_empty_batch_gives_empty_outputs_and_gradients(backend_name):
    positions = np.arange(8).reshape(1, 1, 2, 4)
    with mt.backend(backend_name):
        q = mt.tensor(np.zeros((0, 2, 8, 4)), requires_grad=True)
        out, lse = grouped_attention(q, q, q, positions, positions,
                                     np.ones((1, 1, 1, 1, 1), bool), scale=0.5)
        out.sum().backward()
    assert out.shape == (0, 2, 2, 4, 4) and lse.shape == (0, 2, 2, 4)
    assert q.grad.shape == q.shape


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [False, True])
def test_adding_rows_sums_repeated_positions(dtype, parallel):
    """``_add_rows`` (out[rows] += src, repeats adding up) on both backends against
    ``np.add.at``: a position repeated up to 40 times, rows of a block shape (U, K, d)."""
    rng = np.random.default_rng(4)
    rows = np.concatenate([np.full(40, 3), rng.integers(0, 9, 60)]).reshape(5, 20)
    src = rng.standard_normal((5, 20, 33)).astype(dtype)
    start = rng.standard_normal((9, 33)).astype(dtype)
    expected = start.copy()
    np.add.at(expected, rows.reshape(-1), src.reshape(-1, 33))
    for backend in (NUMPY, NUMBA):
        out = start.copy()
        with on_threads(parallel):
            backend._add_rows(out, rows, src)
        np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
