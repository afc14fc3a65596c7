"""Specs of GPT-1's equations: the language-modelling objective (eq 18), the input embedding
h_0 (eq 20) and the tied output distribution (eq 21).

Eq 20-21 are computed inside ``GPTModel``; their specs take the embedding matrices as
arguments, and the library's side is a one-block ``GPTModel`` run with them
(``nn.replaced_tensors``)."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st

from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.models.gpt import GPTConfig, GPTModel

from .. import strategies as S

from ..reference import gpt as reference
from ..spec import Spec
from .seq2seq import logits_and_ids


def _causal_lm_reference(logits, labels):
    """The mean of -log P over the counted predictions: eq 18 (negated, averaged) per sequence."""
    total, count = 0.0, 0
    for b in range(logits.shape[0]):
        counted = labels[b] != -100
        total = total + reference.eq18_lm_objective(
            reference.softmax_rows(logits[b]), np.where(counted, labels[b], 0), counted)
        count += int(counted[1:].sum())
    return -total / count if count else 0.0 * anp.sum(logits)


def _gpt(vocab_size, n_positions, n_embd):
    return GPTModel(GPTConfig(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd,
                              n_layer=1, n_head=1, resid_pdrop=0.0, embd_pdrop=0.0,
                              attn_pdrop=0.0))


def input_embedding(W_e, W_p, *, ids):
    """h_0 = U W_e + W_p (eq 20): the token embeddings of ``ids`` (batch, T) plus the position
    embeddings of positions 0 .. T-1: (batch, T, n_embd).

    The library's ``GPTModel`` computes it (its ``hidden_states[0]``) with these W_e, W_p."""
    model = _gpt(W_e.shape[0], W_p.shape[0], W_e.shape[1])
    with nn.replaced_tensors(model, {"wte.weight": W_e, "wpe.table": W_p}):
        return model(ids, output_hidden_states=True).hidden_states[0]


def tied_output_distribution(h, W_e):
    """P(u) = softmax(h_n W_e^T) (eq 21) for the final states ``h`` (batch, T, n_embd): the
    output layer is the token embedding matrix W_e (vocab, n_embd); (batch, T, vocab).

    The library's ``GPTModel.lm_logits`` computes the logits with this W_e."""
    model = _gpt(W_e.shape[0], 1, W_e.shape[1])
    with nn.replaced_tensors(model, {"wte.weight": W_e}):
        return F.softmax(model.lm_logits(h), axis=-1)


@st.composite
def _embedding_cases(draw):
    batch, time, vocab, dim = (draw(st.integers(1, 4)) for _ in range(4))
    positions = time + draw(st.integers(0, 2))
    ids = draw(S.arrays((batch, time), 0, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    return {"W_e": draw(S.arrays((vocab, dim))), "W_p": draw(S.arrays((positions, dim))),
            "ids": ids}


@st.composite
def _output_cases(draw):
    batch, time, vocab, dim = (draw(st.integers(1, 4)) for _ in range(4))
    return {"h": draw(S.arrays((batch, time, dim))), "W_e": draw(S.arrays((vocab, dim)))}


SPECS = (
    Spec(18, "causal_lm_loss",
         (("logits", "float64 (batch, T, V): position t predicts token t + 1"),
          ("labels", "int64 (batch, T), the token ids; -100 marks positions not predicted")),
         "float64 (): -L_1 / (number of predictions), labels shifted inside (position t is "
         "scored on labels[:, t + 1])",
         ("logits",),
         lambda: logits_and_ids("labels", -1).map(
             lambda case: {**case, "labels": np.where(case["labels"] < 0, -100,
                                                      case["labels"])}),
         _causal_lm_reference,
         "minitorch_nlp.models.gpt:causal_lm_loss"),
    Spec(20, "input_embedding",
         (("W_e", "float64 (vocab, n_embd), the token embedding matrix"),
          ("W_p", "float64 (n_positions, n_embd), the position embedding matrix"),
          ("ids", "int64 (batch, T), the context tokens U, T <= n_positions")),
         "float64 (batch, T, n_embd): h_0 = U W_e + W_p (positions 0 .. T-1)",
         ("W_e", "W_p"),
         _embedding_cases,
         lambda W_e, W_p, ids: anp.stack([reference.eq20_input_embedding(row, W_e, W_p)
                                          for row in ids]),
         "minitorch_nlp.testing.equation_specs.gpt:input_embedding",
         "The library's side is GPTModel's embedding (its hidden_states[0]) with these weights."),
    Spec(21, "tied_output_distribution",
         (("h", "float64 (batch, T, n_embd), the last block's states h_n"),
          ("W_e", "float64 (vocab, n_embd), the token embedding matrix")),
         "float64 (batch, T, vocab): P(u) = softmax(h_n W_e^T) over the vocabulary",
         ("h", "W_e"),
         _output_cases,
         lambda h, W_e: anp.stack([reference.eq21_output_distribution(row, W_e) for row in h]),
         "minitorch_nlp.testing.equation_specs.gpt:tied_output_distribution",
         "The library's side is GPTModel.lm_logits (the tied output layer) and a softmax."),
)
