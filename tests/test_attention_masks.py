"""``minitorch_nlp.attention``: the mask builders against loop-by-loop references written from
each paper's set definitions, their properties (special cases that collapse to simpler masks,
subsets, sizes, symmetry), agreement with the patterns the attention kernels already use, input
errors, and the pictures."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import attention as A
from minitorch_nlp.backends.numpy_backend import NumpyBackend
from minitorch_nlp.nn import attention_weights

PNG = b"\x89PNG\r\n\x1a\n"
times = st.integers(1, 24)


def from_sets(time, sees, k_time=None):
    """The (time, k_time) bool matrix with row i True exactly at the keys ``sees(i, j)``."""
    k_time = time if k_time is None else k_time
    return np.array([[bool(sees(i, j)) for j in range(k_time)] for i in range(time)])


def random_qkv(seed, time, batch=2, heads=2, dim=3):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, heads, time, dim)) for _ in range(3)]


def masked_softmax_attention(q, k, v, allowed):
    """softmax over the allowed keys, written with an explicit loop over queries."""
    out = np.zeros_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                keys = np.flatnonzero(allowed[i])
                scores = k[b, h, keys] @ q[b, h, i] / math.sqrt(q.shape[-1])
                weights = np.exp(scores - scores.max())
                out[b, h, i] = weights / weights.sum() @ v[b, h, keys]
    return out


# ---- causal and padding --------------------------------------------------------------------------
@pytest.mark.sec4
@given(q_time=times, extra=st.integers(0, 6))
def test_causal_mask_sees_the_past_of_queries_aligned_with_the_last_keys(q_time, extra):
    k_time = q_time + extra
    mask = A.causal_mask(q_time, k_time)
    assert mask.dtype == bool and mask.shape == (q_time, k_time)
    np.testing.assert_array_equal(mask, from_sets(q_time, lambda i, j: j <= i + extra, k_time))
    assert mask[np.arange(q_time), np.arange(q_time) + extra].all()  # every query sees itself
    np.testing.assert_array_equal(A.causal_mask(q_time), A.causal_mask(q_time, q_time))


@pytest.mark.sec4
@given(q_time=st.integers(1, 5), extra=st.integers(0, 3), seed=st.integers(0, 99))
def test_causal_mask_is_the_pattern_of_causal_attention_weights(q_time, extra, seed):
    q, k, _ = random_qkv(seed, q_time + extra)
    weights = attention_weights(mt.tensor(q[:, :, extra:]), mt.tensor(k), causal=True).numpy()
    expected = np.broadcast_to(A.causal_mask(q_time, q_time + extra), weights.shape)
    np.testing.assert_array_equal(weights > 0, expected)


@pytest.mark.sec4
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=4), extra=st.integers(0, 3))
def test_padding_mask_from_lengths_and_from_a_key_mask(lengths, extra):
    time = max(max(lengths), 1) + extra
    mask = A.padding_mask(lengths, time)
    assert mask.shape == (len(lengths), 1, 1, time)
    for b, length in enumerate(lengths):
        assert mask[b, 0, 0].tolist() == [True] * length + [False] * (time - length)
    np.testing.assert_array_equal(A.padding_mask(mask[:, 0, 0]), mask)
    if max(lengths) > 0:
        assert A.padding_mask(lengths).shape[-1] == max(lengths)


@pytest.mark.sec4
def test_padding_mask_is_the_pattern_of_attention_weights_with_a_key_mask():
    key_mask = np.array([[True, True, False, False], [True, True, True, True]])
    q, k, _ = random_qkv(0, 4)
    weights = attention_weights(mt.tensor(q), mt.tensor(k), key_mask=key_mask).numpy()
    np.testing.assert_array_equal(weights > 0, np.broadcast_to(A.padding_mask(key_mask),
                                                               weights.shape))


# ---- prefix LM and XLNet's permutations ----------------------------------------------------------
@pytest.mark.sec4
@given(time=times, data=st.data())
def test_prefix_lm_mask_is_bidirectional_over_the_prefix_and_causal_after(time, data):
    prefixes = data.draw(st.lists(st.integers(0, time), min_size=1, max_size=3))
    mask = A.prefix_lm_mask(prefixes, time)
    assert mask.shape == (len(prefixes), 1, time, time)
    for b, prefix in enumerate(prefixes):
        expected = from_sets(time, lambda i, j: j < prefix or j <= i)
        np.testing.assert_array_equal(mask[b, 0], expected)
        np.testing.assert_array_equal(A.prefix_lm_mask(prefix, time), expected)
    np.testing.assert_array_equal(A.prefix_lm_mask(0, time), A.causal_mask(time))
    assert A.prefix_lm_mask(time, time).all()


def orders(max_time=10, max_batch=3):
    return st.integers(1, max_time).flatmap(lambda time: st.lists(
        st.permutations(range(time)), min_size=1, max_size=max_batch))


@pytest.mark.sec4
@given(order_rows=orders())
def test_permutation_masks_follow_the_factorisation_order(order_rows):
    content, query = A.permutation_mask(order_rows)
    time = len(order_rows[0])
    assert content.shape == query.shape == (len(order_rows), 1, time, time)
    for b, order in enumerate(order_rows):
        for t, position in enumerate(order):
            # x_{z_t} is predicted from x_{z_<t} (query stream); its content sees z_<=t
            assert set(np.flatnonzero(query[b, 0, position])) == set(order[:t])
            assert set(np.flatnonzero(content[b, 0, position])) == set(order[:t + 1])
        single = A.permutation_mask(order)
        np.testing.assert_array_equal(single.content, content[b, 0])
        np.testing.assert_array_equal(single.query, query[b, 0])


@pytest.mark.sec4
@given(order_rows=orders())
def test_permutation_masks_are_an_order_the_query_stream_its_strict_part(order_rows):
    content, query = (m[:, 0] for m in A.permutation_mask(order_rows))
    eye = np.eye(content.shape[-1], dtype=bool)
    np.testing.assert_array_equal(query, content & ~eye)             # minus the diagonal
    assert content[:, eye].all()                                      # reflexive
    assert not (query & query.transpose(0, 2, 1)).any()               # antisymmetric: a DAG
    closure = (query.astype(int) @ query.astype(int)) > 0
    assert not (closure & ~query).any()                               # transitive
    assert (content | content.transpose(0, 2, 1)).all()               # total: one order
    np.testing.assert_array_equal(A.permutation_mask(range(content.shape[-1])).content,
                                  A.causal_mask(content.shape[-1]))


# ---- Longformer: sliding window, dilation, global tokens -----------------------------------------
@pytest.mark.sec8
@given(time=times, window=st.integers(1, 5), dilation=st.integers(1, 3), causal=st.booleans())
def test_sliding_window_mask_is_the_band_of_the_attention_kernels(time, window, dilation, causal):
    expected = np.zeros((time, time), dtype=bool)
    for offset in NumpyBackend.band_offsets(window, dilation, causal):
        for i in range(time):
            if 0 <= i + offset < time:
                expected[i, i + offset] = True
    np.testing.assert_array_equal(A.sliding_window_mask(time, window, dilation, causal), expected)


@pytest.mark.sec8
@given(time=st.integers(1, 8), window=st.integers(1, 3), dilation=st.integers(1, 2),
       causal=st.booleans(), seed=st.integers(0, 99))
def test_banded_attention_equals_attention_restricted_to_the_sliding_window_mask(
        time, window, dilation, causal, seed):
    q, k, v = random_qkv(seed, time)
    mask = A.sliding_window_mask(time, window, dilation, causal)
    banded = F.banded_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v), window=window,
                                dilation=dilation, causal=causal).numpy()
    np.testing.assert_allclose(banded, masked_softmax_attention(q, k, v, mask), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.sec8
@given(time=times, extra=st.integers(0, 5), dilation=st.integers(1, 3))
def test_sliding_window_wider_than_the_sequence_is_full_or_causal(time, extra, dilation):
    assert A.sliding_window_mask(time, time + extra, 1).all()
    np.testing.assert_array_equal(A.sliding_window_mask(time, time + extra, 1, causal=True),
                                  A.causal_mask(time))
    np.testing.assert_array_equal(A.sliding_window_mask(time, 0, dilation),
                                  np.eye(time, dtype=bool))


@pytest.mark.sec8
@given(time=times, data=st.data(), window=st.integers(0, 3), dilation=st.integers(1, 2))
def test_global_tokens_attend_everywhere_and_are_attended_by_all(time, data, window, dilation):
    positions = data.draw(st.lists(st.integers(0, time - 1), max_size=3))
    mask = A.global_mask(time, positions, window, dilation)
    local = A.sliding_window_mask(time, window, dilation)
    expected = from_sets(time, lambda i, j: i in positions or j in positions or local[i, j])
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(mask, mask.T)
    assert mask[positions].all() and mask[:, positions].all()
    np.testing.assert_array_equal(A.global_mask(time, [], window, dilation), local)


# ---- BigBird -------------------------------------------------------------------------------------
def bigbird_blocks(blocks, window, global_blocks):
    """The window and global parts of BigBird's block pattern, from the set definitions."""
    global_set = {g % blocks for g in global_blocks}
    return from_sets(blocks, lambda a, b: abs(a - b) <= window // 2 or a in global_set
                     or b in global_set)


@pytest.mark.sec8
@given(blocks=st.integers(1, 8), block=st.integers(1, 4), window=st.sampled_from([1, 3, 5]),
       data=st.data())
def test_block_sparse_without_random_blocks_is_its_symmetric_window_and_global_part(
        blocks, block, window, data):
    global_blocks = data.draw(st.lists(st.integers(-blocks, blocks - 1), max_size=2))
    mask = A.block_sparse_mask(blocks * block, block, num_window_blocks=window,
                               global_blocks=global_blocks)
    expected = bigbird_blocks(blocks, window, global_blocks)
    np.testing.assert_array_equal(mask, np.kron(expected, np.ones((block, block))).astype(bool))
    np.testing.assert_array_equal(mask, mask.T)


@pytest.mark.sec8
@given(blocks=st.integers(1, 9), block=st.integers(1, 3), window=st.sampled_from([1, 3]),
       random_blocks=st.integers(0, 4), seed=st.integers(0, 99), first_and_last=st.booleans())
def test_block_sparse_random_blocks_add_r_new_key_blocks_per_query_block(
        blocks, block, window, random_blocks, seed, first_and_last):
    global_blocks = (0, -1) if first_and_last else (0,)
    mask = A.block_sparse_mask(blocks * block, block, num_window_blocks=window,
                               global_blocks=global_blocks, num_random_blocks=random_blocks,
                               generator=mt.Generator(seed))
    per_block = mask.reshape(blocks, block, blocks, block)
    assert (per_block == per_block[:, :1, :, :1]).all()      # decided per pair of blocks
    drawn = per_block[:, 0, :, 0]
    base = bigbird_blocks(blocks, window, global_blocks)
    assert (drawn >= base).all()
    for row in range(blocks):
        expected_extra = 0 if base[row].all() else min(random_blocks, int((~base[row]).sum()))
        assert int((drawn[row] & ~base[row]).sum()) == expected_extra
    again = A.block_sparse_mask(blocks * block, block, num_window_blocks=window,
                                global_blocks=global_blocks, num_random_blocks=random_blocks,
                                generator=mt.Generator(seed))
    np.testing.assert_array_equal(again, mask)


@pytest.mark.sec8
def test_block_sparse_random_blocks_come_from_the_default_generator():
    def draw():
        return A.block_sparse_mask(64, 4, num_random_blocks=2)

    mt.manual_seed(3)
    first = draw()
    mt.manual_seed(3)
    np.testing.assert_array_equal(draw(), first)
    assert not all(np.array_equal(draw(), first) for _ in range(5))


# ---- Sparse Transformer --------------------------------------------------------------------------
@pytest.mark.sec9
@given(time=times, stride=st.integers(1, 6))
def test_strided_mask_is_the_union_of_child_et_al_s_two_heads(time, stride):
    local = from_sets(time, lambda i, j: max(0, i - stride) <= j <= i)
    every_stride = from_sets(time, lambda i, j: j <= i and (i - j) % stride == 0)
    heads = A.strided_mask(time, stride, factorized=True)
    assert heads.shape == (2, time, time)
    np.testing.assert_array_equal(heads[0], local)
    np.testing.assert_array_equal(heads[1], every_stride)
    np.testing.assert_array_equal(A.strided_mask(time, stride), local | every_stride)


@pytest.mark.sec9
@given(time=times, data=st.data())
def test_fixed_mask_is_the_union_of_child_et_al_s_two_heads(time, data):
    stride = data.draw(st.integers(1, 6))
    c = data.draw(st.integers(1, stride))
    block = from_sets(time, lambda i, j: j <= i and j // stride == i // stride)
    summary = from_sets(time, lambda i, j: j <= i and j % stride in range(stride - c, stride))
    heads = A.fixed_mask(time, stride, c, factorized=True)
    np.testing.assert_array_equal(heads[0], block)
    np.testing.assert_array_equal(heads[1], summary)
    np.testing.assert_array_equal(A.fixed_mask(time, stride, c), block | summary)


@pytest.mark.sec9
@given(time=st.integers(4, 400), c=st.integers(1, 2))
def test_sparse_transformer_masks_are_causal_and_keep_order_sqrt_n_keys(time, c):
    stride = math.isqrt(time)
    c = min(c, stride)
    causal = A.causal_mask(time)
    for mask, bound in ((A.strided_mask(time, stride), stride + 1 + math.ceil(time / stride)),
                        (A.fixed_mask(time, stride, c), stride + c * math.ceil(time / stride))):
        assert not (mask & ~causal).any()
        assert mask.diagonal().all()
        assert mask.sum(axis=1).max() <= bound <= 4 * math.sqrt(time) + 1


# ---- Reformer ------------------------------------------------------------------------------------
@pytest.mark.sec9
@pytest.mark.eq(98)
@given(data=st.data(), causal=st.booleans())
def test_bucket_mask_joins_positions_sharing_a_bucket_in_any_round(data, causal):
    batch, rounds, time = (data.draw(st.integers(1, n)) for n in (3, 3, 10))
    buckets = np.array(data.draw(st.lists(st.lists(st.lists(st.integers(0, 3), min_size=time,
                                                                      max_size=time),
                                                             min_size=rounds, max_size=rounds),
                                                    min_size=batch, max_size=batch)))
    mask = A.bucket_mask(buckets, causal=causal)
    assert mask.shape == (batch, 1, time, time)
    for b in range(batch):
        expected = from_sets(time, lambda i, j: (j <= i or not causal)
                             and any(buckets[b, r, i] == buckets[b, r, j] for r in range(rounds)))
        np.testing.assert_array_equal(mask[b, 0], expected)
    single = [A.bucket_mask(buckets[:, r], causal=causal) for r in range(rounds)]
    np.testing.assert_array_equal(mask, np.logical_or.reduce(single))
    assert mask[0, 0].diagonal().all()
    if not causal:
        np.testing.assert_array_equal(single[0], single[0].transpose(0, 1, 3, 2))
    one_bucket = A.bucket_mask(np.zeros((batch, time), dtype=int), causal=causal)
    assert (one_bucket == (A.causal_mask(time) if causal else True)).all()


# ---- combine and to_bias -------------------------------------------------------------------------
@pytest.mark.sec4
def test_combine_intersects_with_broadcasting():
    causal, padding = A.causal_mask(4), A.padding_mask([2, 4])
    mask = A.combine(causal, padding)
    assert mask.shape == (2, 1, 4, 4)
    np.testing.assert_array_equal(mask[0, 0], causal & [True, True, False, False])
    np.testing.assert_array_equal(mask[1, 0], causal)
    np.testing.assert_array_equal(A.combine(causal), causal)


@pytest.mark.sec9
@pytest.mark.eq(97)
@given(time=st.integers(1, 6), window=st.integers(0, 3), seed=st.integers(0, 99))
def test_to_bias_added_to_scores_gives_the_masked_softmax(time, window, seed):
    mask = A.sliding_window_mask(time, window, causal=True)
    bias = A.to_bias(mask, "float64")
    assert bias.dtype == np.float64 and set(np.unique(bias)) <= {0.0, -np.inf}
    scores = np.random.default_rng(seed).standard_normal((time, time)) + bias
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    for i in range(time):
        expected = np.exp(scores[i, mask[i]] - scores[i, mask[i]].max())
        np.testing.assert_allclose(weights[i, mask[i]], expected / expected.sum())
        assert (weights[i, ~mask[i]] == 0).all()
    assert A.to_bias(mask).dtype == np.float32


# ---- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, error, message", [
    (lambda: A.causal_mask(0), ValueError, r"causal_mask: q_time must be a positive int, got 0"),
    (lambda: A.causal_mask(2.0), ValueError,
     r"causal_mask: q_time must be a positive int, got 2\.0"),
    (lambda: A.causal_mask(True), ValueError,
     r"causal_mask: q_time must be a positive int, got True"),
    (lambda: A.causal_mask(4, 3), ValueError, r"causal_mask: k_time 3 < q_time 4"),
    (lambda: A.padding_mask([2, 5], 4), ValueError,
     r"padding_mask: lengths must lie in \[0, 4\] \(time is 4\), got 5"),
    (lambda: A.padding_mask([-1, 2]), ValueError, r"padding_mask: lengths must lie in \[0, 2\]"),
    (lambda: A.padding_mask([[1, 2]]), ValueError,
     r"padding_mask: lengths must be a 1-D array of ints, got int64 of shape \(1, 2\)"),
    (lambda: A.padding_mask([]), ValueError, r"padding_mask: lengths is empty"),
    (lambda: A.padding_mask(np.ones(3, dtype=bool)), ValueError,
     r"padding_mask: a key mask must be \(batch, k_time\), got shape \(3,\)"),
    (lambda: A.padding_mask(np.ones((2, 3), dtype=bool), 4), ValueError,
     r"padding_mask: time 4 differs from the key mask's k_time 3"),
    (lambda: A.prefix_lm_mask(5, 4), ValueError,
     r"prefix_lm_mask: prefix_lengths must lie in \[0, 4\] \(time is 4\), got 5"),
    (lambda: A.prefix_lm_mask([1.5], 4), ValueError,
     r"prefix_lm_mask: prefix_lengths must be a 0-D or 1-D array of ints, got float64"),
    (lambda: A.permutation_mask([0, 2, 2]), ValueError,
     r"permutation_mask: each order must be a permutation of range\(3\) \(every position once\), "
     r"got \[0, 2, 2\]"),
    (lambda: A.permutation_mask([[0, 1], [1, 0], [0, 0]]), ValueError,
     r"permutation of range\(2\) .*got \[0, 0\]"),
    (lambda: A.permutation_mask([]), ValueError, r"permutation_mask: order is empty"),
    (lambda: A.sliding_window_mask(4, -1), ValueError,
     r"sliding_window_mask: window must be an int >= 0, got -1"),
    (lambda: A.sliding_window_mask(4, 1, dilation=0), ValueError,
     r"sliding_window_mask: dilation must be a positive int, got 0"),
    (lambda: A.global_mask(4, [4]), ValueError,
     r"global_mask: global_positions must lie in \[0, 3\] \(time is 4\), got 4"),
    (lambda: A.block_sparse_mask(10, 4), ValueError,
     r"block_sparse_mask: time 10 is not a multiple of block 4"),
    (lambda: A.block_sparse_mask(16, 4, num_window_blocks=2), ValueError,
     r"block_sparse_mask: num_window_blocks must be odd .*got 2"),
    (lambda: A.block_sparse_mask(16, 4, global_blocks=(4,)), ValueError,
     r"block_sparse_mask: global_blocks must lie in \[-4, 3\] \(there are 4 blocks\), got 4"),
    (lambda: A.block_sparse_mask(16, 4, num_random_blocks=-1), ValueError,
     r"block_sparse_mask: num_random_blocks must be an int >= 0, got -1"),
    (lambda: A.strided_mask(4, 0), ValueError,
     r"strided_mask: stride must be a positive int, got 0"),
    (lambda: A.fixed_mask(8, 3, 4), ValueError, r"fixed_mask: c must be at most stride 3 .*got 4"),
    (lambda: A.fixed_mask(8, 3, 0), ValueError, r"fixed_mask: c must be a positive int, got 0"),
    (lambda: A.bucket_mask([1, 2, 3]), ValueError,
     r"bucket_mask: buckets must be a 2-D or 3-D array of ints, got int64 of shape \(3,\)"),
    (lambda: A.bucket_mask(np.zeros((2, 0), dtype=int)), ValueError,
     r"bucket_mask: buckets has no positions"),
    (lambda: A.combine(), ValueError, r"combine: give at least one mask"),
    (lambda: A.combine(A.causal_mask(3), np.ones(3)), TypeError,
     r"combine: mask 1 must be a bool array \(True = may attend\), got float64"),
    (lambda: A.combine(A.causal_mask(3), A.causal_mask(4)), ValueError,
     r"combine: mask shapes \[\(3, 3\), \(4, 4\)\] do not broadcast together"),
    (lambda: A.to_bias(np.ones(3)), TypeError, r"to_bias: the mask must be a bool array"),
    (lambda: A.to_bias(A.causal_mask(3), "int64"), TypeError,
     r"to_bias: the bias needs a floating dtype, got int64"),
])
def test_builders_name_themselves_and_the_bad_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- pictures ------------------------------------------------------------------------------------
def test_draw_mask_labels_axes_and_tokens_and_saves_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    tokens = ["the", "cat", "sat", "down"]
    ax = A.draw_mask(A.causal_mask(4)[None, None], title="causal", query_labels=tokens,
                     key_labels=tokens, path=tmp_path / "causal.png")
    assert (tmp_path / "causal.png").read_bytes()[:8] == PNG
    assert ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position"
    assert ax.get_title() == "causal"
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    assert [t.get_text() for t in ax.get_yticklabels()] == tokens
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["allowed (10)", "blocked (6)"]
    np.testing.assert_array_equal(ax.images[0].get_array(), A.causal_mask(4))


def test_draw_masks_draws_a_grid_with_one_panel_per_mask(tmp_path):
    pytest.importorskip("matplotlib")
    masks = {"causal": A.causal_mask(8), "strided": A.strided_mask(8, 3),
             "bigbird": A.block_sparse_mask(8, 2, num_random_blocks=1),
             "buckets": A.bucket_mask([[0, 1, 0, 1, 2, 2, 0, 1]])}
    figure = A.draw_masks(masks, tmp_path / "grid.png", columns=3)
    assert (tmp_path / "grid.png").read_bytes()[:8] == PNG
    drawn = [ax for ax in figure.axes if ax.images]
    assert [ax.get_title().split("\n")[0] for ax in drawn] == list(masks)
    assert drawn[0].get_title().endswith("56% of pairs allowed")
    assert len(figure.axes) == 6 and not figure.axes[-1].axison


@pytest.mark.parametrize("call, error, message", [
    (lambda: A.draw_mask(np.ones((2, 2))), TypeError, r"draw_mask: the mask must be a bool array"),
    (lambda: A.draw_mask(A.padding_mask([1, 2])), ValueError,
     r"draw_mask: can draw a \(q_time, k_time\) mask, got shape \(2, 1, 1, 2\); pick one"),
    (lambda: A.draw_mask(A.causal_mask(3), query_labels=["a"]), ValueError,
     r"draw_mask: query_labels has 1 labels for 3 positions"),
    (lambda: A.draw_masks({}), ValueError, r"draw_masks: give at least one mask"),
    (lambda: A.draw_masks({"a": A.causal_mask(2)}, columns=0), ValueError,
     r"draw_masks: columns must be a positive int, got 0"),
])
def test_drawing_refuses_what_it_cannot_draw(call, error, message):
    pytest.importorskip("matplotlib")
    with pytest.raises(error, match=message):
        call()
