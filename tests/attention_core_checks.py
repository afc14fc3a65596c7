"""What every efficient attention core's tests share: float64 leaves, the tolerance of the
comparisons with the references, and a tiny Transformer stack built around the cores that
learns a tiny batch."""
from __future__ import annotations

import functools

import numpy as np

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from tests.model_checks import overfit

TOL = dict(rtol=1e-7, atol=1e-10)


def t64(array, requires_grad=True):
    """``array`` as a float64 tensor (a leaf that records its gradient, by default)."""
    return mt.tensor(array, dtype=mt.float64, requires_grad=requires_grad)


def stack_learns(cores, *, causal, steps, factor=3.0, d=16, vocab=11, time=16, lr=1e-2):
    """Pre-LN layers of 2 heads, one per core, with token and learned position embeddings: the
    loss of predicting the next token (``causal``) or the token itself (otherwise) on 4
    sequences falls below its first value / ``factor`` within ``steps`` AdamW steps."""
    mt.manual_seed(0)
    layers = [nn.TransformerLayer(nn.MultiHeadAttention(d, 2, core=core), nn.FeedForward(d, 32),
                                  functools.partial(nn.LayerNorm, d), norm_first=True,
                                  causal=causal) for core in cores]
    embed, stack, head = nn.Embedding(vocab, d), nn.TransformerStack(layers), nn.Linear(d, vocab)
    positions = nn.LearnedPositionalEmbedding(time, d)
    ids = np.random.default_rng(0).integers(0, vocab, (4, time + int(causal)))
    inputs, targets = (ids[:, :-1], ids[:, 1:]) if causal else (ids, ids)

    def loss():
        hidden = stack(positions(embed(mt.tensor(inputs)))).last_hidden_state
        return F.cross_entropy(head(hidden).reshape(-1, vocab), mt.tensor(targets.ravel()))

    losses = overfit(nn.ModuleList([embed, stack, head, positions]), loss, steps, lr=lr)
    assert losses[-1] < losses[0] / factor, losses
