"""Section IX-B: the Reformer (Kitaev et al., 2020), eq 96-105: LSH attention, reversible
layers, the chunked feed-forward network.

``LSHAttention`` (per round: hash, sort, chunk, attend the chunk and the previous one, then the
rounds combined by their log-sum-exps with duplicate pairs counted once, eq 101-103) against the
reference of ``minitorch_nlp/testing/reference/lsh.py``, which builds each query's set P_i
position by position and takes one softmax over it (eq 100), values and float64 gradients; the
properties of the issue: one bucket with one chunk is full shared-QK attention with its
self-mask, more rounds never lose a pair, a seed fixes the rotations; the reversible block's
inverse (eq 105) rebuilds its inputs and the recomputing stack's gradients equal the recorded
ones (dropout included), with activation memory flat in depth; then learning and the errors.
"""
from __future__ import annotations

import tracemalloc

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from minitorch_nlp.attention import LSHAttention, bucket_mask
from minitorch_nlp.testing import EquationMismatch, check_equation, specs
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import lsh as R
from tests.attention_core_checks import TOL, t64
from tests.model_checks import overfit

pytestmark = [pytest.mark.sec9,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]


# ---- LSH attention, eq 96-103 --------------------------------------------------------------------
@pytest.mark.eq(96)
@pytest.mark.eq(97)
@pytest.mark.eq(98)
@pytest.mark.eq(99)
@pytest.mark.eq(100)
@pytest.mark.eq(101)
@pytest.mark.eq(102)
@pytest.mark.eq(103)
@given(st.data())
def test_lsh_attention_matches_reference(data):
    chunk, chunks = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    time, d, heads = chunk * chunks, data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
    buckets = data.draw(st.sampled_from([1, 2, 4]))
    core = LSHAttention(buckets, chunk, data.draw(st.integers(1, 3)),
                        seed=data.draw(st.integers(0, 99)))
    causal = data.draw(st.booleans())
    q = data.draw(S.nonzero_arrays((2, heads, time, d)))
    v = data.draw(S.arrays((2, heads, time, d)))
    key_mask = data.draw(st.none() | S.bool_masks((2, time)))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(q.shape)
    rotations = core.rotations(d)
    tq, tv = t64(q), t64(v)
    out, _ = core(tq, tq, tv, causal=causal, key_mask=key_mask)
    (out * mt.tensor(cotangent)).sum().backward()
    sets = [[R.lsh_sets(q[b, h], rotations, chunk, causal,
                        None if key_mask is None else key_mask[b], buckets)
             for h in range(heads)] for b in range(2)]

    def reference(q, v):
        return anp.stack([anp.stack([R.eq100_lsh_attention(q[b, h], v[b, h], sets[b][h])
                                     for h in range(heads)]) for b in range(2)])

    np.testing.assert_allclose(out.numpy(), reference(q, v), **TOL)
    for i, t in enumerate((tq, tv)):
        expected = autograd.grad(lambda *a: anp.sum(reference(*a) * cotangent), i)(q, v)
        np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-6, atol=1e-9)


@pytest.mark.eq(96, 98)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.data())
def test_hash_ties_go_to_the_first_maximum_of_the_rotations_and_their_negatives(rounds, half,
                                                                                 d, data):
    """h(x) = argmax([x R; -x R]) with ties decided as argmax does (the first maximum): entries
    of +-1 and rotations of -1, 0, 1 make x R = 0 and |x R_c| = |x R_c'| common."""
    x = data.draw(hnp.arrays(np.float64, (1, 2, 5, d), elements=st.sampled_from([-1.0, 1.0])))
    rotations = data.draw(hnp.arrays(np.float64, (rounds, d, half),
                                     elements=st.sampled_from([-1.0, 0.0, 1.0])))
    buckets = LSHAttention(2 * half, 5, rounds).hash(x, rotations)
    for b, h, r in np.ndindex(1, 2, rounds):
        assert buckets[b, h, r].tolist() == R.lsh_buckets(x[b, h], rotations[r])


@pytest.mark.eq(96, 98, 99, 100)
@pytest.mark.parametrize("rounds", [1, 2])
def test_a_query_attends_itself_only_when_it_has_no_other_key_even_at_scores_of_1e4(
        rounds):
    """Shared-QK: a query's own key scores highest (q . q / |q|), so the self-mask must outweigh
    any score gap; here 7071 for itself against 5000 for its neighbour in the same bucket and
    chunk. Each query takes the other's value alone; causal, query 0 has only itself and
    query 1 takes v_0."""
    q = mt.tensor([[[[1e4, 0.0], [1e4, 1e4]]]], dtype=mt.float64)
    v = mt.tensor([[[[1.0, 2.0], [3.0, 4.0]]]], dtype=mt.float64)
    rotations = np.tile(np.array([[[1.0], [0.0]]]), (rounds, 1, 1))   # one bucket for both
    core = specs[100].library_function()
    out = core(q, v, rotations=rotations, chunk_length=2, causal=False, key_mask=None)
    np.testing.assert_allclose(out.numpy()[0, 0], [[3.0, 4.0], [1.0, 2.0]], **TOL)
    causal = core(q, v, rotations=rotations, chunk_length=2, causal=True, key_mask=None)
    np.testing.assert_allclose(causal.numpy()[0, 0], [[1.0, 2.0], [1.0, 2.0]], **TOL)


@pytest.mark.eq(96)
@given(st.integers(2, 10), st.booleans(), S.seeds())
def test_one_bucket_and_one_chunk_is_full_shared_qk_attention_with_its_self_mask(time, causal,
                                                                                 seed):
    q, v = (mt.tensor(a) for a in np.random.default_rng(seed).standard_normal((2, 2, 2, time, 4)))
    out, _ = LSHAttention(1, time)(q, q, v, causal=causal)
    keys = q / (q * q).sum(axis=-1, keepdims=True).sqrt()
    not_itself = ~np.eye(time, dtype=bool)
    not_itself[0, 0] = causal                     # causal position 0 has only itself
    expected = F.scaled_dot_product_attention(q, keys, v, mask=not_itself, causal=causal)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.eq(98)
@given(st.integers(1, 4), st.sampled_from([2, 4, 8]), st.integers(2, 4), S.seeds())
def test_more_rounds_never_lose_a_pair_that_one_round_found(chunks, buckets, rounds, seed):
    q = np.random.default_rng(seed).standard_normal((1, 2, 4 * chunks, 3))
    one = LSHAttention(buckets, 4, 1, seed=seed % 1000).pairs(q)
    more_core = LSHAttention(buckets, 4, rounds, seed=seed % 1000)
    more = more_core.pairs(q)
    itself = np.eye(q.shape[2], dtype=bool)
    assert not np.any(one & ~more & ~itself)      # a lone query's self-pair may give way
    same_bucket = bucket_mask(more_core.hash(q, more_core.rotations(3)).reshape(2, rounds, -1))
    assert not np.any(more & ~same_bucket.reshape(1, 2, *more.shape[-2:]))


@pytest.mark.eq(96, 100)
def test_need_weights_gives_the_weights_behind_the_grouped_output():
    q, v = (mt.tensor(a, dtype=mt.float64)
            for a in np.random.default_rng(0).standard_normal((2, 2, 2, 12, 4)))
    core = LSHAttention(4, 3, 2, seed=1)
    grouped, _ = core(q, q, v)
    dense, weights = core(q, q, v, need_weights=True)
    np.testing.assert_allclose(dense.numpy(), grouped.numpy(), **TOL)
    assert np.all(weights.numpy()[~core.pairs(q)] == 0)


def test_a_seed_fixes_the_rotations_and_the_generator_draws_new_ones():
    seeded = LSHAttention(4, 2, 2, seed=7)
    np.testing.assert_array_equal(seeded.rotations(4), seeded.rotations(4))
    np.testing.assert_array_equal(seeded.rotations(4)[0],
                                  LSHAttention(4, 2, 1, seed=7).rotations(4)[0])
    drawn = LSHAttention(4, 2, generator=mt.Generator(0))
    assert not np.array_equal(drawn.rotations(4), drawn.rotations(4))


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_buckets=3, chunk_length=2), "num_buckets must be even"),
    (dict(num_buckets=0, chunk_length=2), "num_buckets"),
    (dict(num_buckets=2, chunk_length=0), "chunk_length"),
    (dict(num_buckets=2, chunk_length=2, num_rounds=0), "num_rounds"),
])
def test_bad_configuration_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LSHAttention(**kwargs)


def test_bad_calls_are_refused():
    q = mt.randn(1, 1, 6, 4)
    with pytest.raises(ValueError, match="not a multiple of chunk_length=4"):
        LSHAttention(2, 4)(q, q, q)
    with pytest.raises(ValueError, match="never forms"):
        LSHAttention(2, 3)(q, q, q, bias=mt.zeros(6, 6))


# ---- reversible layers, eq 104-105, and the chunked feed-forward ---------------------------------
def reversible_block(d, dropout=0.0, core=None):
    """F: LayerNorm then self-attention (``core``, full attention by default); G: LayerNorm then
    the chunked feed-forward network, each with dropout."""
    f = AttentionSublayer(nn.LayerNorm(d), nn.MultiHeadAttention(d, 2, core=core),
                          nn.Dropout(dropout))
    g = nn.Sequential(nn.LayerNorm(d), nn.ChunkedFeedForward(nn.FeedForward(d, 2 * d), 3),
                      nn.Dropout(dropout))
    return nn.ReversibleBlock(f, g)


class AttentionSublayer(nn.Module):
    """LayerNorm then self-attention: the Reformer's F."""

    def __init__(self, norm, attention, dropout):
        super().__init__()
        self.norm, self.attention, self.dropout = norm, attention, dropout

    def forward(self, x, **kwargs):
        return self.dropout(self.attention(self.norm(x), **kwargs))


@pytest.mark.eq(104)
@pytest.mark.eq(105)
@given(S.arrays((2, 5, 6)), S.arrays((2, 5, 6)))
def test_the_inverse_rebuilds_the_inputs(x1, x2):
    mt.manual_seed(0)
    block = reversible_block(6).to(mt.float64)
    y1, y2 = block(t64(x1, False), t64(x2, False))
    np.testing.assert_allclose(y1.numpy(), x1 + block.f(t64(x2, False)).numpy(), **TOL)
    np.testing.assert_allclose(y2.numpy(), x2 + block.g(y1).numpy(), **TOL)
    back1, back2 = block.inverse(y1, y2)
    np.testing.assert_allclose(back1.numpy(), x1, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(back2.numpy(), x2, rtol=1e-9, atol=1e-9)


@pytest.mark.eq(104)
@pytest.mark.eq(105)
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_recomputed_gradients_equal_the_recorded_ones(dropout):
    """Backward by reconstruction (eq 105) gives the gradients of the ordinary graph, dropout
    masks and LSH rotations replayed from the generator's state."""
    mt.manual_seed(0)
    blocks = [reversible_block(8, dropout, LSHAttention(2, 3) if i % 2 else None)
              for i in range(3)]
    recomputing = nn.ReversibleStack(blocks).to(mt.float64)
    recorded = nn.ReversibleStack(blocks, recompute=False)
    x = np.random.default_rng(0).standard_normal((2, 6, 8))
    results = []
    for stack in (recomputing, recorded):
        a, b = t64(x), t64(x * 0.5)
        mt.manual_seed(5)
        y1, y2 = stack(a, b, causal=True)
        (y1 * 1.3 + y2 * y2).sum().backward()
        results.append([y1.numpy(), y2.numpy(), a.grad.numpy(), b.grad.numpy()]
                       + [None if p.grad is None else p.grad.numpy()   # LSH: k_proj unused
                          for p in stack.parameters()])
        stack.zero_grad()
    for ours, expected in zip(*results):
        assert (ours is None) == (expected is None)
        if ours is not None:
            np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-10)


def activation_peak(stack, x):
    tracemalloc.start()
    y1, y2 = stack(x, x)
    (y1 + y2).sum().backward()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    stack.zero_grad()
    return peak


def test_activation_memory_is_flat_in_depth():
    """From 2 to 8 blocks the recorded stack's peak grows about 3.4x, the recomputing one's
    hardly (it holds one block's activations at a time)."""
    mt.manual_seed(0)
    x = mt.randn(2, 64, 16)
    peaks = {}
    for depth in (2, 8):
        blocks = [reversible_block(16) for _ in range(depth)]
        peaks[depth] = (activation_peak(nn.ReversibleStack(blocks), x),
                        activation_peak(nn.ReversibleStack(blocks, recompute=False), x))
    assert peaks[8][0] < 1.5 * peaks[2][0]
    assert peaks[8][1] > 2.5 * peaks[2][1]


@given(st.integers(1, 9), st.integers(1, 4), S.seeds())
def test_the_chunked_feed_forward_equals_the_whole_one(time, chunk, seed):
    mt.manual_seed(seed % 1000)
    feed_forward = nn.FeedForward(4, 8).to(mt.float64)
    x = np.random.default_rng(seed).standard_normal((2, time, 4))
    whole_x, chunked_x = t64(x), t64(x)
    whole = feed_forward(whole_x)
    whole.sum().backward()
    expected = [p.grad.numpy() for p in feed_forward.parameters()]
    feed_forward.zero_grad()
    chunked = nn.ChunkedFeedForward(feed_forward, chunk)(chunked_x)
    chunked.sum().backward()
    np.testing.assert_allclose(chunked.numpy(), whole.numpy(), **TOL)
    np.testing.assert_allclose(chunked_x.grad.numpy(), whole_x.grad.numpy(), **TOL)
    for p, g in zip(feed_forward.parameters(), expected):
        np.testing.assert_allclose(p.grad.numpy(), g, **TOL)


def test_a_reversible_lsh_decoder_learns_a_tiny_batch():
    mt.manual_seed(0)
    d, vocab = 16, 11
    stack = nn.ReversibleStack([reversible_block(d, core=LSHAttention(2, 5, 2))
                                for _ in range(2)])
    embed, head = nn.Embedding(vocab, d), nn.Linear(2 * d, vocab)
    modules = nn.ModuleList([embed, stack, head])
    ids = np.random.default_rng(0).integers(0, vocab, (4, 16))
    def loss():
        x = embed(mt.tensor(ids[:, :-1]))
        y1, y2 = stack(x, x, causal=True)
        logits = head(mt.concatenate([y1, y2], axis=-1))
        return F.cross_entropy(logits.reshape(-1, vocab), mt.tensor(ids[:, 1:].ravel()))

    losses = overfit(modules, loss, 60, lr=1e-2)
    assert losses[-1] < losses[0] / 2


# ---- the check specs (eq 96-105) reject wrong candidates -----------------------------------------
def lsh_attention_without_chunks(q, v, *, rotations, chunk_length, causal, key_mask):
    return specs[100].library_function()(q, v, rotations=rotations, chunk_length=q.shape[2],
                                         causal=causal, key_mask=key_mask)


def lsh_attention_with_a_fresh_hash(q, v, *, rotations, chunk_length, causal, key_mask):
    core = LSHAttention(2 * rotations.shape[-1], chunk_length, rotations.shape[0], seed=0)
    return core(q, q, v, causal=causal, key_mask=key_mask)[0]


def streams_as_the_survey_crosses_them(x1, x2, W_F, W_G):
    """Y2 = X2 + G(X1): the survey's eq 104 read literally, not the RevNet block."""
    y1 = x1 + (x2 @ W_F.mT).tanh()
    return mt.stack([y1, x2 + (x1 @ W_G.mT).tanh()])


def inverse_in_the_wrong_order(y1, y2, W_F, W_G):
    """X1 first from Y2: eq 105 needs X2 first."""
    x1 = y1 - (y2 @ W_F.mT).tanh()
    return mt.stack([x1, y2 - (y1 @ W_G.mT).tanh()])


@pytest.mark.eq(100)
@pytest.mark.eq(104)
@pytest.mark.eq(105)
@pytest.mark.parametrize("number, candidate", [
    (100, lsh_attention_without_chunks),
    (100, lsh_attention_with_a_fresh_hash),
    (104, streams_as_the_survey_crosses_them),
    (105, inverse_in_the_wrong_order),
])
@pytest.mark.slow
def test_the_specs_refuse_wrong_candidates(number, candidate):
    """The spec's given rotations decide the buckets: ignoring the chunks or hashing with other
    rotations is caught, and so are the survey's crossed streams and an inverse in the wrong
    order."""
    with pytest.raises(EquationMismatch, match=f"eq {number}: .*:{candidate.__name__}"):
        check_equation(number, candidate, max_examples=25)


def test_streams_of_different_shapes_are_refused():
    stack = nn.ReversibleStack([reversible_block(4)])
    with pytest.raises(ValueError, match="same shape"):
        stack(mt.randn(1, 3, 4), mt.randn(1, 2, 4))
    with pytest.raises(ValueError, match="chunk_size"):
        nn.ChunkedFeedForward(nn.FeedForward(4, 8), 0)


# ---- axial position embeddings -------------------------------------------------------------------
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.data())
def test_axial_positions_concatenate_a_row_and_a_column_vector(n1, n2, d1, d2, data):
    """Position p = i1 n2 + i2 gets [rows[i1]; columns[i2]], values and float64 gradients of
    both factors against a loop over the positions."""
    embedding = nn.AxialPositionEmbedding((n1, n2), (d1, d2)).to(mt.float64)
    time = data.draw(st.integers(1, n1 * n2))
    start = data.draw(st.integers(0, n1 * n2 - time))
    x = data.draw(S.arrays((2, time, d1 + d2)))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(x.shape)
    out = embedding(t64(x, False), start=start)
    (out * mt.tensor(cotangent)).sum().backward()

    def reference(rows, columns):
        table = anp.stack([anp.concatenate([rows[p // n2], columns[p % n2]])
                           for p in range(start, start + time)])
        return x + table

    rows, columns = embedding.rows.numpy(), embedding.columns.numpy()
    np.testing.assert_allclose(out.numpy(), reference(rows, columns), **TOL)
    loss = lambda *a: anp.sum(reference(*a) * cotangent)  # noqa: E731
    np.testing.assert_allclose(embedding.rows.grad.numpy(), autograd.grad(loss, 0)(rows, columns),
                               **TOL)
    np.testing.assert_allclose(embedding.columns.grad.numpy(),
                               autograd.grad(loss, 1)(rows, columns), **TOL)


def test_axial_positions_take_far_fewer_numbers_than_a_full_table():
    axial = nn.AxialPositionEmbedding((64, 32), (24, 40))
    full = nn.LearnedPositionalEmbedding(64 * 32, 64)
    assert sum(p.size for p in axial.parameters()) == 64 * 24 + 32 * 40      # 2816
    assert sum(p.size for p in full.parameters()) == 2048 * 64               # 131072
    ids = np.array([[0, 31, 32, 2047]])
    table = axial.table.numpy()
    out = axial(mt.zeros(1, 4, 64), position_ids=ids).numpy()[0]
    np.testing.assert_array_equal(out, table[ids[0]])
    np.testing.assert_array_equal(table[32, :24], table[63, :24])   # same row i1 = 1
    np.testing.assert_array_equal(table[31, 24:], table[63, 24:])   # same column i2 = 31


def test_axial_positions_refuse_bad_input():
    with pytest.raises(ValueError, match=r"shape \(n1, n2\) and dims \(d1, d2\) need two"):
        nn.AxialPositionEmbedding((4, 4, 4), (2, 2))
    with pytest.raises(ValueError, match="dims must be a positive int, got 0"):
        nn.AxialPositionEmbedding((4, 4), (0, 2))
    embedding = nn.AxialPositionEmbedding((2, 3), (2, 2))
    with pytest.raises(ValueError, match=r"positions 0 \.\. 6 do not fit max_len=6"):
        embedding(mt.zeros(1, 7, 4))
    with pytest.raises(ValueError, match=r"d_model=4\), got \(1, 3, 5\)"):
        embedding(mt.zeros(1, 3, 5))


# ---- a Performer that redraws its features inside a reversible stack -----------------------------
def test_a_performer_redrawing_inside_a_reversible_stack_keeps_exact_gradients():
    """The stack advances the redraw schedule once, before its blocks run, and the
    recomputation in backward uses the features the forward pass used: the gradients equal the
    recorded stack's, with features drawn from the core's own generator and redrawn at every
    call."""
    from minitorch_nlp.attention import PerformerAttention

    mt.manual_seed(0)
    cores = [PerformerAttention(4, 6, redraw_interval=1, generator=mt.Generator(i))
             for i in range(2)]
    blocks = [reversible_block(8, 0.0, core) for core in cores]
    recomputing = nn.ReversibleStack(blocks).to(mt.float64)
    recorded = nn.ReversibleStack(blocks, recompute=False)
    x = np.random.default_rng(0).standard_normal((2, 6, 8))
    first = [core.features.numpy() for core in cores]
    results, calls = [], []
    for stack in (recomputing, recorded):
        for core, features, seed in zip(cores, first, range(2)):
            core.features = mt.tensor(features)
            core.generator, core.calls = mt.Generator(seed + 10), 1   # the next call redraws
        a, b = t64(x), t64(x * 0.5)
        y1, y2 = stack(a, b)
        (y1 * 1.3 + y2 * y2).sum().backward()
        results.append([y1.numpy(), y2.numpy(), a.grad.numpy(), b.grad.numpy()]
                       + [None if p.grad is None else p.grad.numpy() for p in stack.parameters()]
                       + [core.features.numpy() for core in cores])
        calls.append([core.calls for core in cores])
        stack.zero_grad()
    for ours, expected in zip(*results):
        assert (ours is None) == (expected is None)
        if ours is not None:
            np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-10)
    for features, before in zip(results[0][-2:], first):
        assert not np.allclose(features, before)                       # redrawn
    assert calls == [[2, 2], [2, 2]]                                   # one redraw per step
