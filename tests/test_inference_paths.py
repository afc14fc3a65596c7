"""The inference paths: what a forward does when nothing will differentiate it (``no_grad``, or
no input that needs a gradient).

* The numba backend's ``attention_inference`` (no state kept, q/k/v read as strided views, the
  scale applied in the softmax kernel, the output laid out so that merging the heads is a
  reshape) against the NumPy backend's ``attention``, over blocks, threads, masks and biases.
* Through the layers: a forward under ``no_grad`` takes the inference kernels and equals the
  recorded forward, and a recorded forward still keeps its state and differentiates.
"""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import nn
from minitorch_nlp.backends import numba_backend
from minitorch_nlp.testing import strategies as S
from tests.backend_checks import assert_heads_merge_without_a_copy, heads_split_by_a_permute
from tests.kernel_checks import (NUMBA, REF, assert_same, attention_inputs, blocks_in_threads,
                                 on_threads, parallel)


@given(attention_inputs(), st.sampled_from([1 << 20, 7, 3]), st.booleans(), st.booleans(),
       parallel, st.data())
def test_attention_inference_matches_numpy(inputs, block, strided, threaded, parallel, data):
    """A small ``block`` splits the scores into blocks of batch entries and of query rows;
    ``threaded`` spreads them over two Python threads."""
    q, k, v, _, key_mask, scale, causal = inputs
    bias = data.draw(st.none() | S.score_biases(q.shape[:3] + k.shape[2:3], q.dtype))
    if strided:
        q, k, v = (heads_split_by_a_permute(x) for x in (q, k, v))
    expected = REF.attention(q, k, v, scale, causal, key_mask, bias)[0]
    threads = blocks_in_threads() if threaded else on_threads(parallel)
    with mock.patch.object(numba_backend, "_ATTENTION_BLOCK", block), threads:
        actual = NUMBA.attention_inference(q, k, v, scale, causal, key_mask, bias)
    assert_same(actual, expected)
    assert_heads_merge_without_a_copy(actual)


def test_attention_inference_falls_back_to_numpy_for_what_the_kernels_do_not_take():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    bias = np.zeros((3, 3))                     # another dtype than q's
    kv = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)   # one key/value head for two
    for args in ((q, q, q, 0.5, False, None, bias), (q, kv, kv, 0.5, True, None, None)):
        with mock.patch.object(numba_backend.kernels, "attention_probs") as kernel:
            actual = NUMBA.attention_inference(*args)
        kernel.assert_not_called()
        assert_same(actual, REF.attention(*args)[0])


@pytest.mark.parametrize("causal", [False, True])
def test_attention_inference_skips_the_keys_after_each_entrys_last_real_one(causal):
    """Right padding of 5, 2 and all 8 keys: the blocks of one entry take the scores of 3, 6 and
    1 keys (a row with no allowed key is 0 whatever it sees), and the output is the full
    attention's, padding rows included."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((3, 2, 8, 4)).astype(np.float32) for _ in range(3))
    key_mask = np.arange(8) < np.array([[3], [6], [0]])
    expected = REF.attention(q, k, v, 0.5, causal, key_mask, None)[0]
    with mock.patch.object(numba_backend, "_ATTENTION_BLOCK", 2 * 8 * 8), \
            mock.patch.object(numba_backend, "_run", wraps=numba_backend._run) as kernels:
        actual = NUMBA.attention_inference(q, k, v, 0.5, causal, key_mask, None)
    assert_same(actual, expected)
    scores = [call.args[2] for call in kernels.call_args_list
              if call.args[0] is numba_backend.kernels.attention_probs]
    assert sorted(s.shape[-1] for s in scores) == [1, 3, 6]


def attention_layer(seed):
    with mt.backend("numba"):
        layer = nn.MultiHeadAttention(12, 3)
    rng = np.random.default_rng(seed)
    x = mt.tensor(rng.standard_normal((2, 5, 12), dtype=np.float32), backend="numba")
    key_mask = np.array([[True] * 5, [True, True, True, False, False]])
    return layer, x, key_mask


@pytest.mark.parametrize("causal", [False, True])
def test_a_forward_under_no_grad_runs_the_inference_kernel_and_equals_the_recorded_one(causal):
    layer, x, key_mask = attention_layer(1)
    with mock.patch.object(NUMBA, "attention", wraps=NUMBA.attention) as recording, \
            mock.patch.object(NUMBA, "attention_inference",
                              wraps=NUMBA.attention_inference) as inference:
        with mt.no_grad():
            fast = layer(x, key_mask=key_mask, causal=causal)
        assert (recording.call_count, inference.call_count) == (0, 1)
        recorded = layer(x, key_mask=key_mask, causal=causal)
        assert (recording.call_count, inference.call_count) == (1, 1)
    assert not fast.requires_grad and recorded.requires_grad
    assert_same(fast.numpy(), recorded.numpy())


def test_a_recorded_forward_still_differentiates_as_the_numpy_backend():
    layer, x, key_mask = attention_layer(2)
    with mt.no_grad():
        layer(x, key_mask=key_mask)              # an inference forward first keeps nothing
    grads = {}
    for name in ("numba", "numpy"):
        layer.to(name)
        inputs = x.to(name).detach().requires_grad_()
        (layer(inputs, key_mask=key_mask) ** 2).sum().backward()
        grads[name] = (inputs.grad.numpy(), layer.q_proj.weight.grad.numpy())
        layer.zero_grad()
    for actual, expected in zip(*grads.values()):
        assert_same(actual, expected)
