"""Specs of section III's equations: the sequence log-probability (eq 2), the RNN
encoder-decoder (eq 3-6), Luong's and Bahdanau's alignment scores (eq 7-8), and the attention
weights and context (eq 9-10).

Eq 3-8 are computed by modules with weights (``nn.RNN``, ``RNNEncoder``, ``RNNDecoder``,
``LuongAttention``, ``BahdanauAttention``); their specs take the weights as arguments, and the
library's side is the module run with those weights (``nn.functional_call``,
``nn.replaced_tensors``)."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
from minitorch_nlp import nn
from minitorch_nlp import functional as F
from minitorch_nlp.models.seq2seq import (BahdanauAttention, LuongAttention, RNNDecoder,
                                          RNNEncoder)

from .. import strategies as S
from ..reference import seq2seq as reference
from ..spec import Spec


def rnn_hidden_states(x, h0, U, W, b, *, lengths):
    """H_{t+1} = tanh(U X_{t+1} + W H_t + b) (eq 3) along each sequence of ``x``
    (batch, T, input), from ``h0`` (batch, hidden): the states H_1 .. H_T, (batch, T, hidden);
    with ``lengths`` (batch,) a sequence stops at its length and its later states are 0.

    The library's ``nn.RNN`` (tanh cell, batch first) computes it with these weights."""
    rnn = nn.RNN(U.shape[1], U.shape[0], batch_first=True)
    weights = {"weight_ih_l0": U, "weight_hh_l0": W, "bias_ih_l0": b,
               "bias_hh_l0": mt.zeros(U.shape[0], dtype=b.dtype)}
    states, _ = nn.functional_call(rnn, weights, (x, h0.unsqueeze(0)), {"lengths": lengths})
    return states


def encoder_summary(embedding, U, W, b, V, c, *, ids, lengths):
    """E = tanh(V H_S + c) (eq 4): the summary of each source sentence ``ids`` (batch, S), token
    ids >= 1 (0 is padding), after the tanh RNN of eq 3 (U, W, b) from H_0 = 0 over the
    embedded tokens (rows of ``embedding`` (vocab, input)), H_S the state at each sentence's last
    real token (``lengths`` (batch,); None: every token is real): (batch, summary).

    The library's ``RNNEncoder(cell="rnn")`` computes it with these weights."""
    encoder = RNNEncoder(embedding.shape[0], embedding.shape[1], U.shape[0], cell="rnn",
                         summary_size=V.shape[0])
    weights = {"embed.weight": embedding, "rnn.weight_ih_l0": U, "rnn.weight_hh_l0": W,
               "rnn.bias_ih_l0": b, "rnn.bias_hh_l0": mt.zeros(U.shape[0], dtype=b.dtype),
               "summarize.weight": V, "summarize.bias": c}
    return nn.functional_call(encoder, weights, (ids, lengths)).summary[0]


def _decoder(embedding, U_y, U_e, W, b, vocab_size=None):
    decoder = RNNDecoder(vocab_size or embedding.shape[0], embedding.shape[1], W.shape[0],
                         cell="rnn")
    weights = {"embed.weight": embedding,
               "rnn.weight_ih_l0": mt.concatenate([U_y, U_e], axis=1),
               "rnn.weight_hh_l0": W, "rnn.bias_ih_l0": b,
               "rnn.bias_hh_l0": mt.zeros(W.shape[0], dtype=b.dtype)}
    return decoder, weights


def decoder_hidden_states(E, embedding, U_y, U_e, W, b, *, ids):
    """H'_{t+1} = tanh(U_y y_t + U_e E + W H'_t + b) (eq 5, Cho et al.'s decoder, fed the
    previous word's embedding y_t and the summary E at every step) from H'_0 = E, for the
    teacher-forced inputs ``ids`` (batch, T), ids >= 1: (batch, T, hidden).

    The library's ``RNNDecoder(cell="rnn")`` computes it with these weights (its input matrix
    is [U_y U_e])."""
    decoder, weights = _decoder(embedding, U_y, U_e, W, b)
    with nn.replaced_tensors(decoder, weights):
        states, _ = decoder.hidden_states(ids, {"h": E.unsqueeze(1), "context": E})
    return states


def output_distribution(H, V, c):
    """O_{t+1} = softmax(V H'_{t+1} + c) (eq 6) for the decoder states ``H`` (batch, T, hidden):
    (batch, T, vocab).

    The library's ``RNNDecoder`` output layer computes the logits with these V, c."""
    decoder = RNNDecoder(V.shape[0], 1, V.shape[1], cell="rnn")
    logits = nn.functional_call(decoder.out, {"weight": V, "bias": c}, H)
    return F.softmax(logits, axis=-1)


def luong_general_scores(h_t, hs, W_a):
    """Luong et al.'s "general" alignment scores e_tj = h_t^T W_a h_j (eq 7) of each query
    ``h_t`` (batch, query) against its source states ``hs`` (batch, S, key): (batch, S).

    The library's ``LuongAttention(score="general")`` computes it with this W_a."""
    attention = LuongAttention(W_a.shape[0], W_a.shape[1], score="general")
    with nn.replaced_tensors(attention, {"key_proj.weight": W_a}):
        return attention.score(h_t, attention.project_keys(hs))


def additive_scores(s_prev, hs, W, U, v):
    """Bahdanau et al.'s e_ij = v^T tanh(W s_{i-1} + U h_j) (eq 8) of each decoder state
    ``s_prev`` (batch, query) against its source states ``hs`` (batch, S, key): (batch, S).

    The library's ``BahdanauAttention`` computes it with these W, U, v."""
    attention = BahdanauAttention(W.shape[1], U.shape[1], W.shape[0])
    with nn.replaced_tensors(attention, {"query_proj.weight": W, "key_proj.weight": U,
                                         "v.weight": v.unsqueeze(0)}):
        return attention.score(s_prev, attention.project_keys(hs))


@st.composite
def _rnn_cases(draw):
    batch, inputs, hidden = (draw(st.integers(1, 3)) for _ in range(3))
    time = draw(st.integers(1, 3) | st.just(12))     # a long sequence now and then
    return {"x": draw(S.arrays((batch, time, inputs))), "h0": draw(S.arrays((batch, hidden))),
            "U": draw(S.arrays((hidden, inputs))), "W": draw(S.arrays((hidden, hidden))),
            "b": draw(S.arrays((hidden,))),
            "lengths": draw(st.none() | hnp.arrays(np.int64, (batch,),
                                                   elements=st.integers(0, time)))}


def _rnn_reference(x, h0, U, W, b, lengths):
    rows = []
    for i in range(x.shape[0]):
        length = x.shape[1] if lengths is None else int(lengths[i])
        padding = np.zeros((x.shape[1] - length, U.shape[0]))
        rows.append(padding if length == 0 else anp.concatenate(
            [reference.eq03_rnn_hidden_states(x[i, :length], h0[i], U, W, b), padding]))
    return anp.stack(rows)


def _ids(draw, shape, vocab):
    return draw(S.arrays(shape, 1, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))


@st.composite
def _encoder_cases(draw):
    batch, source, embed, hidden, summary = (draw(st.integers(1, 3)) for _ in range(5))
    vocab = draw(st.integers(2, 5))
    ids = _ids(draw, (batch, source), vocab)
    lengths = draw(st.none() | hnp.arrays(np.int64, (batch,), elements=st.integers(1, source)))
    if lengths is not None:                         # padding (0) after each sentence's end
        ids = np.where(np.arange(source) < lengths[:, None], ids, 0)
    return {"embedding": draw(S.arrays((vocab, embed))), "U": draw(S.arrays((hidden, embed))),
            "W": draw(S.arrays((hidden, hidden))), "b": draw(S.arrays((hidden,))),
            "V": draw(S.arrays((summary, hidden))), "c": draw(S.arrays((summary,))),
            "ids": ids, "lengths": lengths}


@st.composite
def _decoder_cases(draw):
    batch, embed, hidden = (draw(st.integers(1, 3)) for _ in range(3))
    time = draw(st.integers(1, 3) | st.just(12))     # a long sequence now and then
    vocab = draw(st.integers(2, 5))
    return {"E": draw(S.arrays((batch, hidden))), "embedding": draw(S.arrays((vocab, embed))),
            "U_y": draw(S.arrays((hidden, embed))), "U_e": draw(S.arrays((hidden, hidden))),
            "W": draw(S.arrays((hidden, hidden))), "b": draw(S.arrays((hidden,))),
            "ids": _ids(draw, (batch, time), vocab)}


@st.composite
def _output_cases(draw):
    batch, time, hidden, vocab = (draw(st.integers(1, 3)) for _ in range(4))
    return {"H": draw(S.arrays((batch, time, hidden))), "V": draw(S.arrays((vocab, hidden))),
            "c": draw(S.stress_arrays((vocab,)))}   # biases of ±1e4: logits that overflow exp


def _encoder_reference(embedding, U, W, b, V, c, ids, lengths):
    rows = []
    for i, row in enumerate(ids):
        row = row if lengths is None else row[:lengths[i]]
        states = reference.eq03_rnn_hidden_states(reference.embed(embedding, row),
                                                  np.zeros(U.shape[0]), U, W, b)
        rows.append(reference.eq04_encoder_summary(states[-1], V, c))
    return anp.stack(rows)


@st.composite
def _score_cases(draw, additive):
    batch, source, query, key, size = (draw(st.integers(1, 3)) for _ in range(5))
    case = {"query": draw(S.arrays((batch, query))), "hs": draw(S.arrays((batch, source, key)))}
    if additive:
        return {"s_prev": case["query"], "hs": case["hs"], "W": draw(S.arrays((size, query))),
                "U": draw(S.arrays((size, key))), "v": draw(S.arrays((size,)))}
    return {"h_t": case["query"], "hs": case["hs"], "W_a": draw(S.arrays((query, key)))}


@st.composite
def logits_and_ids(draw, ids_name, low, target_shift=0):
    """{"logits": (batch, T, V), ids_name: int64 (batch, T) in [low, V)}: logits of ±1e4
    sometimes, and masking values (-1e4, -1e9, -inf) on tokens other than the targets (the id
    at position t + ``target_shift`` is position t's target)."""
    batch, time, vocab = (draw(st.integers(1, 4)) for _ in range(3))
    ids = draw(hnp.arrays(np.int64, (batch, time), elements=st.integers(low, vocab - 1)))
    logits, masked = draw(S.masked_logits((batch, time, vocab)))
    unmasked = draw(S.stress_arrays((batch, time, vocab)))
    shifted = np.concatenate([ids[:, target_shift:], np.full((batch, target_shift), -1)], axis=1)
    targets = np.arange(vocab) == shifted[..., None]
    return {"logits": np.where(masked & targets, unmasked, logits), ids_name: ids}


@st.composite
def _scores_and_mask(draw):
    """Scores of ±1e4 sometimes; a mask or None, sometimes a sentence with no real token."""
    batch, source = draw(st.integers(1, 3)), draw(st.integers(1, 4) | st.just(16))
    mask = draw(st.none() | S.bool_masks((batch, source)))
    return {"scores": draw(S.stress_arrays((batch, source))), "mask": mask}


@st.composite
def _weights_and_memory(draw):
    batch, source, dim = (draw(st.integers(1, 4)) for _ in range(3))
    return {"weights": draw(S.arrays((batch, source), 0.0, 1.0)),
            "memory": draw(S.arrays((batch, source, dim)))}


SPECS = (
    Spec(3, "rnn_hidden_states",
         (("x", "float64 (batch, T, input), the inputs X_1 .. X_T"),
          ("h0", "float64 (batch, hidden), the initial state H_0"),
          ("U", "float64 (hidden, input)"), ("W", "float64 (hidden, hidden)"),
          ("b", "float64 (hidden,)"),
          ("lengths", "None (every step counts) or int64 (batch,), each sequence's length (0 "
                      "too)")),
         "float64 (batch, T, hidden): H_1 .. H_T, H_{t+1} = tanh(U X_{t+1} + W H_t + b); 0 after "
         "a sequence's length",
         ("x", "h0", "U", "W", "b"),
         _rnn_cases,
         _rnn_reference,
         "minitorch_nlp.testing.equation_specs.seq2seq:rnn_hidden_states",
         "The library's side is nn.RNN run with these weights (nn.functional_call)."),
    Spec(2, "sequence_log_prob",
         (("logits", "float64 (batch, T, V), teacher-forced scores of the next token"),
          ("targets", "int64 (batch, T), the target tokens; positions holding pad_id count "
                      "for nothing"),
          ("pad_id", "int, the padding id (0 by default)")),
         "float64 (batch,): log P(y | x) = sum_t log softmax(logits[b, t])[y_t]",
         ("logits",),
         lambda: st.tuples(logits_and_ids("targets", 0), st.sampled_from((0, 1))).map(
             lambda pair: {**pair[0], "pad_id": pair[1]}),
         reference.eq02_sequence_log_prob,
         "minitorch_nlp.decoding:sequence_log_prob"),
    Spec(4, "encoder_summary",
         (("embedding", "float64 (vocab, input), the token embeddings"),
          ("U", "float64 (hidden, input)"), ("W", "float64 (hidden, hidden)"),
          ("b", "float64 (hidden,)"), ("V", "float64 (summary, hidden)"),
          ("c", "float64 (summary,)"),
          ("ids", "int64 (batch, S), the source tokens, >= 1 before each sentence's end, 0 "
                  "(padding) after it"),
          ("lengths", "None (no padding) or int64 (batch,), each sentence's length")),
         "float64 (batch, summary): E = tanh(V H_S + c), H_S the last state of eq 3's RNN "
         "(from H_0 = 0)",
         ("embedding", "U", "W", "b", "V", "c"),
         _encoder_cases,
         _encoder_reference,
         "minitorch_nlp.testing.equation_specs.seq2seq:encoder_summary",
         "The survey's E = tanh(V H + b) is Cho et al.'s summary c = tanh(V h_N). The library's "
         "side is RNNEncoder(cell='rnn') with these weights."),
    Spec(5, "decoder_hidden_states",
         (("E", "float64 (batch, hidden), the encoder's summary (also H'_0)"),
          ("embedding", "float64 (vocab, embed), the target embeddings"),
          ("U_y", "float64 (hidden, embed)"), ("U_e", "float64 (hidden, hidden)"),
          ("W", "float64 (hidden, hidden)"), ("b", "float64 (hidden,)"),
          ("ids", "int64 (batch, T), the decoder's inputs y_t, all >= 1")),
         "float64 (batch, T, hidden): H'_{t+1} = tanh(U_y y_t + U_e E + W H'_t + b), H'_0 = E",
         ("E", "embedding", "U_y", "U_e", "W", "b"),
         _decoder_cases,
         lambda E, embedding, U_y, U_e, W, b, ids: anp.stack([
             reference.eq05_decoder_hidden_states(reference.embed(embedding, row), E[i], E[i],
                                                  U_y, U_e, W, b)
             for i, row in enumerate(ids)]),
         "minitorch_nlp.testing.equation_specs.seq2seq:decoder_hidden_states",
         "The survey's eq 5 feeds only E; Cho et al. (2014, section 2.2) also feed the previous "
         "word, which makes the decoder a conditional language model. The library's side is "
         "RNNDecoder(cell='rnn') with these weights."),
    Spec(6, "output_distribution",
         (("H", "float64 (batch, T, hidden), the decoder states H'"),
          ("V", "float64 (vocab, hidden)"), ("c", "float64 (vocab,)")),
         "float64 (batch, T, vocab): O = softmax(V H' + c) at every position",
         ("H", "V", "c"),
         _output_cases,
         lambda H, V, c: anp.stack([reference.eq06_output_distribution(h, V, c) for h in H]),
         "minitorch_nlp.testing.equation_specs.seq2seq:output_distribution",
         "The library's side is RNNDecoder's output layer with these V, c, and a softmax."),
    Spec(7, "luong_general_scores",
         (("h_t", "float64 (batch, query), the decoder's current state"),
          ("hs", "float64 (batch, S, key), the source states h_j"),
          ("W_a", "float64 (query, key)")),
         "float64 (batch, S): e_tj = h_t^T W_a h_j (Luong et al.'s general score)",
         ("h_t", "hs", "W_a"),
         lambda: _score_cases(False),
         lambda h_t, hs, W_a: anp.stack([
             reference.eq07_alignment_scores(h_t[i], hs[i], "general", W_a)
             for i in range(h_t.shape[0])]),
         "minitorch_nlp.testing.equation_specs.seq2seq:luong_general_scores",
         "The survey's eq 7 names the score function a; Luong et al. (2015, eq 8) give three. "
         "This checks the 'general' one; the library's side is LuongAttention with this W_a."),
    Spec(8, "additive_scores",
         (("s_prev", "float64 (batch, query), the previous decoder state s_{i-1}"),
          ("hs", "float64 (batch, S, key), the source states h_j"),
          ("W", "float64 (size, query)"), ("U", "float64 (size, key)"),
          ("v", "float64 (size,)")),
         "float64 (batch, S): e_ij = v^T tanh(W s_{i-1} + U h_j)",
         ("s_prev", "hs", "W", "U", "v"),
         lambda: _score_cases(True),
         lambda s_prev, hs, W, U, v: anp.stack([
             reference.eq08_additive_scores(s_prev[i], hs[i], W, U, v)
             for i in range(s_prev.shape[0])]),
         "minitorch_nlp.testing.equation_specs.seq2seq:additive_scores",
         "The survey writes W_comb tanh(W_dec H_dec + W_enc H_enc); Bahdanau et al. (2015, "
         "appendix A.1.2) name them v_a, W_a, U_a. The library's side is BahdanauAttention."),
    Spec(9, "alignment_weights",
         (("scores", "float64 (batch, S), the alignment scores e_j"),
          ("mask", "None (every token is real) or bool (batch, S), True at real source tokens")),
         "float64 (batch, S): alpha_j = exp(e_j) / sum_k exp(e_k) over the real tokens, 0 on "
         "padding (a row of zeros for a sentence with no real token)",
         ("scores",),
         _scores_and_mask,
         lambda scores, mask: anp.stack([
             reference.eq09_attention_weights(s, None if mask is None else mask[i])
             for i, s in enumerate(scores)]),
         "minitorch_nlp.models.seq2seq:alignment_weights"),
    Spec(10, "context_vector",
         (("weights", "float64 (batch, S), the attention weights alpha_j"),
          ("memory", "float64 (batch, S, D), the encoder states h_j")),
         "float64 (batch, D): c = sum_j alpha_j h_j",
         ("weights", "memory"),
         _weights_and_memory,
         lambda weights, memory: anp.stack([reference.eq10_context_vector(w, m)
                                            for w, m in zip(weights, memory)]),
         "minitorch_nlp.models.seq2seq:context_vector"),
)
