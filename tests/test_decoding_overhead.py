"""What one cached decoding step costs the engine (issue 12: GPT-2 generation at one thread is
per-operation overhead once the products are fast): how many operations a step runs, that
operations which record nothing keep nothing, and that the one-position shortcuts of the
attention's head split and merge give the same values as the general path."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.autograd.function import Function
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from minitorch_nlp.nn.transformer import MultiHeadAttention

# per block and cached step: 2 layer norms, the q/k/v projections and their head splits (one
# reshape each), the cache's two concatenations, the fused attention, the head merge (one
# reshape), the output projection, the feed-forward's two products and fused bias + GELU, and
# the two residual additions
OPERATIONS_PER_BLOCK = 18


def _operations_of_cached_step(monkeypatch, n_layer):
    """Operations (``Function.apply`` calls) of one cached step of greedy generation: those of
    generating 3 tokens minus those of generating 2."""
    mt.manual_seed(0)
    model = GPT2LMHeadModel(GPTConfig.tiny(n_layer=n_layer))
    prompt = np.array([[1, 2, 3, 4]])
    apply = Function.apply.__func__
    counts = {}

    def generate(new_tokens):
        def counting(cls, *inputs, **static):
            counts[new_tokens] = counts.get(new_tokens, 0) + 1
            return apply(cls, *inputs, **static)

        with monkeypatch.context() as patch, mt.no_grad():
            patch.setattr(Function, "apply", classmethod(counting))
            model.generate(prompt, max_new_tokens=new_tokens)

    generate(2)
    generate(3)
    return counts[3] - counts[2]


def test_a_cached_step_runs_a_fixed_number_of_operations_per_block(monkeypatch):
    two, three = (_operations_of_cached_step(monkeypatch, n) for n in (2, 3))
    assert three - two == OPERATIONS_PER_BLOCK
    # the rest: token and position embeddings and their sum, the final norm, the LM head
    # and the last position's logits
    assert two - 2 * OPERATIONS_PER_BLOCK == 6


@pytest.mark.parametrize("time", [1, 3])
def test_head_split_and_merge_match_reshape_and_transpose(time):
    attention = MultiHeadAttention(12, 3)
    x = np.random.default_rng(0).standard_normal((2, time, 12))
    split = attention.split_heads(mt.tensor(x))
    np.testing.assert_array_equal(split.numpy(), x.reshape(2, time, 3, 4).transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(attention.merge_heads(split).numpy(), x)


def test_head_split_of_one_position_passes_gradients_back():
    attention = MultiHeadAttention(8, 2)
    x = mt.tensor(np.arange(16.0).reshape(2, 1, 8), requires_grad=True)
    weights = mt.tensor(np.arange(16.0).reshape(2, 2, 1, 4))
    (attention.split_heads(x) * weights).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(16.0).reshape(2, 1, 8))


class _Saving(Function):
    contexts = []

    @staticmethod
    def forward(ctx, x):
        ctx.save_inputs(0)
        _Saving.contexts.append(ctx)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2


def test_an_operation_that_records_nothing_keeps_nothing():
    _Saving.contexts.clear()
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.no_grad():
        _Saving.apply(x)
    _Saving.apply(mt.tensor([1.0, 2.0]))             # no input needs a gradient
    assert all(ctx._saved == () for ctx in _Saving.contexts)
    assert x.data.flags.writeable
    y = _Saving.apply(x)                              # recorded: keeps its input, read-only
    assert _Saving.contexts[-1]._saved == (x,) and not x.data.flags.writeable
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
