"""Section VIII: BigBird's block-sparse attention (Zaheer et al., 2020): a window of blocks,
global blocks and seeded random blocks, computed as dense products per block.

``BlockSparseAttention`` against the position-by-position reference of
``minitorch_nlp/testing/reference/long_attention.py`` for the layout it drew (float64 values and
gradients); the layout against ``masks.block_sparse_mask``'s definition; then the properties: no
random and no global blocks is block-banded attention, global blocks see and are seen by all, a
seed reproduces the random blocks and the generator draws new ones; learning; the errors.
"""
from __future__ import annotations


import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp.attention import BlockSparseAttention, block_sparse_mask
from minitorch_nlp.testing import strategies as S
from tests.attention_core_checks import TOL, stack_learns, t64
from minitorch_nlp.testing.reference import long_attention as R

pytestmark = [pytest.mark.sec8,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]


@given(st.data())
def test_block_sparse_attention_matches_reference(data):
    block, blocks = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5))
    time, heads, d = block * blocks, data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    core = BlockSparseAttention(
        block, data.draw(st.sampled_from([1, 3])),
        data.draw(st.sampled_from([(), (0,), (0, -1)])) if blocks > 1 else (),
        data.draw(st.integers(0, 2)), seed=data.draw(st.integers(0, 99)))
    causal = data.draw(st.booleans())
    q, k, v = (data.draw(S.arrays((2, heads, time, d))) for _ in range(3))
    key_mask = data.draw(st.none() | S.bool_masks((2, time)))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(q.shape)
    layout, _ = core.layout(time)
    tensors = [t64(a) for a in (q, k, v)]
    out, _ = core(*tensors, causal=causal, key_mask=key_mask)
    (out * mt.tensor(cotangent)).sum().backward()
    sets = [R.bigbird_sets(time, block, layout, None if key_mask is None else key_mask[b], causal)
            for b in range(2)]

    def reference(q, k, v):
        return anp.stack([anp.stack([R.attend_sets(q[b, h], k[b, h], v[b, h], sets[b])
                                     for h in range(heads)]) for b in range(2)])

    np.testing.assert_allclose(out.numpy(), reference(q, k, v), **TOL)
    for i, t in enumerate(tensors):
        expected = autograd.grad(lambda *a: anp.sum(reference(*a) * cotangent), i)(q, k, v)
        np.testing.assert_allclose(t.grad.numpy(), expected, **TOL)


def test_the_layout_is_the_mask_builders_pattern():
    core = BlockSparseAttention(4, 3, (0, -1), 2, seed=5)
    layout, is_global = core.layout(32)
    expected = block_sparse_mask(32, 4, num_window_blocks=3, global_blocks=(0, -1),
                                 num_random_blocks=2, generator=mt.Generator(5))
    np.testing.assert_array_equal(layout.repeat(4, 0).repeat(4, 1), expected)
    assert is_global.tolist() == [True] + [False] * 6 + [True]
    # window 3 + 2 global + 2 random blocks; the window of blocks 1 and 6 holds a global one
    assert layout[~is_global].sum(axis=1).tolist() == [6, 7, 7, 7, 7, 6]


@given(st.integers(1, 4), st.integers(1, 6), st.sampled_from([1, 3, 5]), st.booleans(),
       S.seeds())
def test_no_random_and_no_global_blocks_is_block_banded_attention(block, blocks, window, causal,
                                                                  seed):
    time = block * blocks
    q, k, v = (mt.tensor(a) for a in np.random.default_rng(seed).standard_normal(
        (3, 1, 2, time, 4)))
    out, _ = BlockSparseAttention(block, window, ())(q, k, v, causal=causal)
    index = np.arange(time) // block
    banded = np.abs(index[:, None] - index[None, :]) <= window // 2
    expected = F.scaled_dot_product_attention(q, k, v, mask=banded, causal=causal)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_global_blocks_see_and_are_seen_by_all():
    q, k, v = (mt.tensor(a) for a in np.random.default_rng(0).standard_normal((3, 1, 2, 24, 4)))
    core = BlockSparseAttention(3, 1, (0, -1), 1, seed=0)
    out, weights = core(q, k, v, need_weights=True)
    weights = weights.numpy()[0]
    assert np.all(weights[:, :3] > 0) and np.all(weights[:, -3:] > 0)
    assert np.all(weights[:, :, :3] > 0) and np.all(weights[:, :, -3:] > 0)
    np.testing.assert_allclose(core(q, k, v)[0].numpy(), out.numpy(), rtol=1e-5, atol=1e-6)


def test_a_seed_reproduces_the_random_blocks_and_the_generator_draws_new_ones():
    seeded = BlockSparseAttention(2, 1, (), 2, seed=3)
    np.testing.assert_array_equal(seeded.layout(20)[0], seeded.layout(20)[0])
    drawn = BlockSparseAttention(2, 1, (), 2, generator=mt.Generator(0))
    assert not np.array_equal(drawn.layout(20)[0], drawn.layout(20)[0])


def test_an_encoder_with_the_core_learns_a_tiny_batch():
    stack_learns([BlockSparseAttention(4, 1, (0,), 1, seed=i) for i in range(2)], causal=False,
                 steps=40)


@pytest.mark.parametrize("kwargs, message", [
    (dict(block=0), "block"),
    (dict(block=2, num_window_blocks=2), "num_window_blocks must be odd"),
    (dict(block=2, num_random_blocks=-1), "num_random_blocks"),
])
def test_bad_configuration_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BlockSparseAttention(**kwargs)


def test_bad_calls_are_refused():
    q = mt.randn(1, 1, 10, 4)
    with pytest.raises(ValueError, match="not a multiple of block=4"):
        BlockSparseAttention(4)(q, q, q)
    with pytest.raises(ValueError, match="global_blocks must lie in"):
        BlockSparseAttention(5, global_blocks=(2,))(q, q, q)
