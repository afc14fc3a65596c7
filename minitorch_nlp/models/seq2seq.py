"""The RNN encoder-decoder and its attention: section III of the survey, eq 1-10.

* Encoder-decoder (Cho et al., 2014; Sutskever et al., 2014). An encoder RNN reads the source
  into states h_j (eq 3) and a summary E (eq 4); a decoder RNN, started from E and fed E at every
  step, reads the target shifted right by one (<bos> y_1 ... y_{T-1}) and predicts y_1 ... y_T
  (eq 5-6). Training maximises log P(y | x) = sum_t log P(y_t | y_<t, x) (eq 2) with teacher
  forcing; ``translate`` searches for argmax_y P(y | x) (eq 1) greedily or with a beam.
* Bahdanau et al. (2015): additive attention over a bidirectional encoder, scored with the
  decoder's *previous* state, e_ij = v^T tanh(W s_{i-1} + U h_j) (eq 7-8), weights alpha_ij =
  softmax_j e_ij (eq 9) and context c_i = sum_j alpha_ij h_j (eq 10) fed into the recurrence.
* Luong et al. (2015): attention scored with the *current* state (dot, general or concat score),
  the attentional state h~_t = tanh(W_c [c_t; h_t]) that predicts the word and is fed back as
  input at the next step (input feeding), and local-p attention, a Gaussian window around a
  predicted source position.

Every decoder has the same interface: ``init_state(encoded)`` builds a state dict whose tensors
have the batch on axis 0 (so that beam search can reorder it), ``forward(tgt_in, state)`` runs a
whole teacher-forced target and ``step(tokens, state)`` one position, both returning
``(logits, attention_weights or None, state)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import checks, cookbook, decoding
from .. import functional as F
from ..autograd import Tensor, concatenate, no_grad, stack, zeros
from ..nn import (GRU, LSTM, RNN, Dropout, Embedding, GRUCell, Linear, LSTMCell, Module,
                  ModuleList, RNNCell)

__all__ = ["AttentionDecoder", "BahdanauAttention", "BahdanauDecoder", "EncoderOutput",
           "LuongAttention", "LuongDecoder", "RNNDecoder", "RNNEncoder", "Seq2Seq",
           "alignment_weights", "context_vector"]

LAYERS = {"rnn": RNN, "gru": GRU, "lstm": LSTM}
CELLS = {"rnn": RNNCell, "gru": GRUCell, "lstm": LSTMCell}


def _cell_kind(cell, op):
    if cell not in LAYERS:
        raise ValueError(f"{op}: cell must be one of {sorted(LAYERS)}, got {cell!r}")
    return cell


def _token_ids(tokens, op):
    """Token ids as an int64 NumPy array ``(batch, time)``."""
    ids = np.asarray(tokens)
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise ValueError(f"{op}: token ids must be an integer array of shape (batch, time), got "
                         f"{ids.dtype} {ids.shape}")
    return ids.astype(np.int64, copy=False)


def _backend_mask(mask, like):
    return like.backend.asarray(mask)


# ---- the encoder-decoder (eq 3-6) ----------------------------------------------------------------
@dataclass
class EncoderOutput:
    """What the encoder hands the decoder: ``memory`` (batch, S, output_size), the states h_j
    (0 at padding); ``summary`` (num_layers, batch, summary_size), E of eq 4 for each layer;
    ``mask`` (batch, S) bool NumPy array, True at real source tokens; ``lengths`` (batch,)."""

    memory: Tensor
    summary: Tensor
    mask: np.ndarray
    lengths: np.ndarray


@cookbook.equation(3, 4)
class RNNEncoder(Module):
    """The encoder of Cho et al. (2014, section 2) and Sutskever et al. (2014)::

        H_{t+1} = sigma(U X_{t+1} + W H_t + b)      (eq 3)  one RNN / GRU / LSTM step per token
        E = tanh(V H_S + b)                         (eq 4)  the summary of the whole source

    ``X_t`` are the source token embeddings and ``H_S`` each sequence's state after its last
    real token. The survey writes eq 4 at every step, E_{t+1} = sigma(V H_{t+1} + b); Cho et al.
    apply it to the final state only (c = tanh(V h_N)), and so does this encoder. With several
    layers each layer's final state gets its own E (the same V), which initialises the
    corresponding decoder layer, as in Sutskever et al.; with ``bidirectional=True`` the forward
    state after the last token and the backward state after the first are concatenated before V
    (Bahdanau et al. start their decoder from the backward one).

    ``forward(src, lengths=None)``: ``src`` (batch, S) token ids, right-padded; ``lengths``
    (batch,) real lengths (None: every row is full). Returns an :class:`EncoderOutput`.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, *, num_layers: int = 1,
                 cell: str = "gru", bidirectional: bool = False, summary_size: int | None = None,
                 dropout: float = 0.0, pad_id: int = 0) -> None:
        super().__init__()
        self.cell = _cell_kind(cell, "RNNEncoder")
        self.num_layers = num_layers
        self.num_directions = 2 if bidirectional else 1
        self.hidden_size = hidden_size
        self.output_size = self.num_directions * hidden_size
        self.summary_size = summary_size or hidden_size
        self.embed = Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.dropout = Dropout(dropout)
        self.rnn = LAYERS[cell](embed_dim, hidden_size, num_layers, batch_first=True,
                                dropout=dropout, bidirectional=bidirectional)
        self.summarize = Linear(self.output_size, self.summary_size)  # V and b of eq 4

    def forward(self, src: Tensor | np.ndarray, lengths: Tensor | np.ndarray | None = None):
        ids = _token_ids(src, "RNNEncoder")
        batch, time = ids.shape
        memory, final = self.rnn(self.dropout(self.embed(ids)), lengths=lengths)  # eq 3
        h_n = final[0] if self.cell == "lstm" else final  # (layers * directions, batch, hidden)
        last = h_n.reshape(self.num_layers, self.num_directions, batch, self.hidden_size)
        last = last.permute(0, 2, 1, 3).reshape(self.num_layers, batch, self.output_size)
        summary = self.summarize(last).tanh()  # eq 4
        lengths = np.full(batch, time, dtype=np.int64) if lengths is None else \
            np.asarray(lengths, dtype=np.int64)
        mask = np.arange(time)[None, :] < lengths[:, None]
        return EncoderOutput(memory, summary, mask, lengths)


class _Decoder(Module):
    """What every decoder shares: the target embedding, the initial state built from the
    encoder's summary E, and ``step`` (one position) in terms of ``forward``."""

    def __init__(self, vocab_size, embed_dim, hidden_size, num_layers, cell, dropout, pad_id):
        super().__init__()
        self.cell = _cell_kind(cell, type(self).__name__)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.embed = Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.dropout = Dropout(dropout)

    def init_state(self, encoded):
        """``{"h": (batch, layers, hidden)}`` from the summary E (eq 4), plus ``"c"`` (zeros)
        for an LSTM."""
        expected = (self.num_layers, encoded.memory.shape[0], self.hidden_size)
        if encoded.summary.shape != expected:
            raise ValueError(f"{type(self).__name__}: the encoder's summary E has shape "
                             f"{encoded.summary.shape}, the decoder needs (num_layers, batch, "
                             f"hidden_size) = {expected}")
        h = encoded.summary.permute(1, 0, 2)
        state = {"h": h}
        if self.cell == "lstm":
            state["c"] = zeros(*h.shape, dtype=h.dtype, backend=h.backend)
        return state

    def step(self, tokens, state):
        """One target position: ``tokens`` (batch,) ids ->
        ``(logits (batch, V), weights, state)``."""
        logits, weights, state = self(np.asarray(tokens).reshape(-1, 1), state)
        return logits[:, 0], None if weights is None else weights[:, 0], state


@cookbook.equation(5, 6)
class RNNDecoder(_Decoder):
    """The decoder of Cho et al. (2014, section 2.2): the summary E is fed at every step::

        H'_{t+1} = sigma(U' [Emb(y_t); E] + W' H'_t + b)     (eq 5)   H'_0 = E
        O_{t+1} = softmax(V' H'_{t+1} + b)                  (eq 6)   P(y_{t+1} | y_<=t, x)

    The survey's eq 5 feeds only E; Cho et al. feed E and the previous target word, which is
    what makes the decoder a conditional language model (eq 2). ``forward`` returns the logits
    (eq 6 before its softmax, which the loss and the search apply).
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, *, num_layers: int = 1,
                 cell: str = "gru", dropout: float = 0.0, pad_id: int = 0) -> None:
        super().__init__(vocab_size, embed_dim, hidden_size, num_layers, cell, dropout, pad_id)
        self.rnn = LAYERS[cell](embed_dim + hidden_size, hidden_size, num_layers,
                                batch_first=True, dropout=dropout)
        self.out = Linear(hidden_size, vocab_size)  # V' and b of eq 6

    def init_state(self, encoded):
        state = super().init_state(encoded)
        state["context"] = encoded.summary[-1]  # E of the top layer, fed at every step
        return state

    def hidden_states(self, tgt_in, state):
        """Eq 5 over the whole (teacher-forced) input: ``(H' (batch, T, hidden), state)``."""
        ids = _token_ids(tgt_in, "RNNDecoder")
        context = state["context"]
        if context.shape[0] != ids.shape[0]:
            raise ValueError(f"RNNDecoder: tgt_in of shape {ids.shape} and an encoded batch of "
                             f"{context.shape[0]} differ in batch size")
        context = context.unsqueeze(1).broadcast_to(ids.shape + (context.shape[-1],))
        inputs = concatenate([self.dropout(self.embed(ids)), context], axis=-1)
        h0 = state["h"].permute(1, 0, 2)
        if self.cell == "lstm":
            outputs, (h_n, c_n) = self.rnn(inputs, (h0, state["c"].permute(1, 0, 2)))
            return outputs, {**state, "h": h_n.permute(1, 0, 2), "c": c_n.permute(1, 0, 2)}
        outputs, h_n = self.rnn(inputs, h0)
        return outputs, {**state, "h": h_n.permute(1, 0, 2)}

    def forward(self, tgt_in: Tensor | np.ndarray, state):
        outputs, state = self.hidden_states(tgt_in, state)  # eq 5
        return self.out(self.dropout(outputs)), None, state  # eq 6 (logits)


# ---- attention (eq 7-10) -------------------------------------------------------------------------
@cookbook.equation(9)
def alignment_weights(scores, mask=None):
    """alpha_j = exp(e_j) / sum_k exp(e_k) (eq 9), the softmax of the alignment scores
    ``scores`` (batch, S) over the real source positions: ``mask`` (batch, S) bool, True at real
    tokens (padding gets weight 0)."""
    if mask is not None:
        if tuple(np.shape(mask)) != scores.shape:
            raise ValueError(f"alignment_weights: mask of shape {np.shape(mask)} does not match "
                             f"the scores' (batch, source_len) = {scores.shape}")
        scores = scores.masked_fill(~_backend_mask(mask, scores), -math.inf)
    return scores.softmax(axis=-1)


@cookbook.equation(10)
def context_vector(weights, memory):
    """c = sum_j alpha_j h_j (eq 10): ``weights`` (batch, S), ``memory`` (batch, S, D) ->
    (batch, D)."""
    return (weights.unsqueeze(1) @ memory).squeeze(1)


def _check_attention_inputs(op, query, memory, query_size, key_size):
    if query.ndim != 2 or query.shape[1] != query_size:
        raise ValueError(f"{op}: the query (decoder state) must have shape (batch, {query_size}), "
                         f"got {query.shape}")
    if memory.ndim != 3 or memory.shape[0] != query.shape[0] or memory.shape[2] != key_size:
        raise ValueError(f"{op}: memory (encoder states) must have shape (batch={query.shape[0]}, "
                         f"source_len, {key_size}), got {memory.shape}")


@cookbook.equation(7, 8)
class BahdanauAttention(Module):
    """Additive attention (Bahdanau et al., 2015, section 3.1 and appendix A.1.2)::

        e_ij = a(s_{i-1}, h_j) = v^T tanh(W s_{i-1} + U h_j)     (eq 7-8)
        alpha_ij = exp(e_ij) / sum_k exp(e_ik)                   (eq 9)
        c_i = sum_j alpha_ij h_j                                 (eq 10)

    ``s_{i-1}`` is the decoder's state *before* it emits y_i and ``h_j = [fwd h_j; bwd h_j]``
    the bidirectional encoder's state at source position j. The survey's eq 7,
    e_tj = tanh(h_{i-1}, h_j), is shorthand for this alignment model a(s_{i-1}, h_j), which its
    eq 8 spells out with W_comb = v, W_dec = W and W_enc = U. ``U h_j`` does not depend on i and
    is computed once per source sentence (``project_keys``), as the paper suggests.
    """

    def __init__(self, query_size: int, key_size: int, attention_size: int | None = None) -> None:
        super().__init__()
        self.query_size, self.key_size = query_size, key_size
        attention_size = attention_size or query_size
        self.query_proj = Linear(query_size, attention_size, bias=False)  # W
        self.key_proj = Linear(key_size, attention_size, bias=False)  # U
        self.v = Linear(attention_size, 1, bias=False)  # v

    def project_keys(self, memory):
        """U h_j for every source position: (batch, S, attention_size)."""
        return self.key_proj(memory)

    def score(self, query, keys):
        """e_ij = v^T tanh(W s_{i-1} + U h_j) (eq 7-8), with ``keys`` = U h_j: (batch, S)."""
        return self.v((self.query_proj(query).unsqueeze(1) + keys).tanh()).squeeze(-1)

    def forward(self, query: Tensor, memory, mask: Tensor | np.ndarray | None = None,
                keys: Tensor | None = None):
        """``query`` s_{i-1} (batch, query_size), ``memory`` h_j (batch, S, key_size), ``mask``
        (batch, S) True at real tokens -> ``(context (batch, key_size), weights (batch, S))``."""
        _check_attention_inputs("BahdanauAttention", query, memory, self.query_size,
                                self.key_size)
        keys = self.project_keys(memory) if keys is None else keys
        weights = alignment_weights(self.score(query, keys), mask)  # eq 7-9
        return context_vector(weights, memory), weights  # eq 10


SCORES = ("dot", "general", "concat")


@cookbook.equation(7)
class LuongAttention(Module):
    """Global and local-p attention of Luong, Pham & Manning (2015, sections 3.1-3.2), scored
    with the decoder's *current* state h_t against each source state h_s::

        score(h_t, h_s) = h_t^T h_s                       "dot"
                        = h_t^T W_a h_s                   "general"
                        = v_a^T tanh(W_a [h_t; h_s])      "concat"
        a_t(s) = softmax_s score(h_t, h_s)                (eq 9)
        c_t = sum_s a_t(s) h_s                            (eq 10)

    These are the survey's alignment scores e_tj (eq 7) with Luong's choices of the alignment
    model. ``concat`` computes W_a [h_t; h_s] as W_q h_t + W_k h_s (the two column blocks of W_a),
    so that W_k h_s is computed once per source sentence, like every score's key side
    (``project_keys``).

    ``window=D`` gives local-p attention: a predicted source position
    p_t = (S - 1) * sigmoid(v_p^T tanh(W_p h_t)) for a source of S real tokens, the scores
    softmaxed over the positions s with |s - p_t| <= D only, and the weights multiplied by a
    Gaussian centred on p_t, a_t(s) = align(h_t, h_s) exp(-(s - p_t)^2 / (2 sigma^2)) with
    sigma = D / 2 (not renormalised, as in the paper). The paper counts positions from 1 and
    takes p_t in [0, S]; positions here count from 0, and p_t spans them, [0, S - 1].
    """

    def __init__(self, query_size: int, key_size: int, score: str = "general",
                 window: int | None = None, attention_size: int | None = None) -> None:
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"LuongAttention: score must be one of {SCORES}, got {score!r}")
        if score == "dot" and query_size != key_size:
            raise ValueError(f"LuongAttention: the dot score needs query and key sizes to match, "
                             f"got hidden size {query_size} and encoder state size {key_size}; "
                             "use score='general' or 'concat'")
        if window is not None:
            checks.positive_int(window, "window D", "LuongAttention")
        self.query_size, self.key_size = query_size, key_size
        self.score_name = score
        self.window = window
        if score == "general":
            self.key_proj = Linear(key_size, query_size, bias=False)  # W_a
        elif score == "concat":
            attention_size = attention_size or query_size
            self.query_proj = Linear(query_size, attention_size, bias=False)  # W_a's h_t block
            self.key_proj = Linear(key_size, attention_size, bias=False)  # W_a's h_s block
            self.v = Linear(attention_size, 1, bias=False)  # v_a
        if window is not None:
            self.position_proj = Linear(query_size, query_size, bias=False)  # W_p
            self.position_v = Linear(query_size, 1, bias=False)  # v_p

    def project_keys(self, memory):
        """The part of the score that depends on the source only: h_s, W_a h_s or W_k h_s."""
        return memory if self.score_name == "dot" else self.key_proj(memory)

    def score(self, query, keys):
        """score(h_t, h_s) for every source position: (batch, S)."""
        if self.score_name == "concat":
            return self.v((self.query_proj(query).unsqueeze(1) + keys).tanh()).squeeze(-1)
        return (keys @ query.unsqueeze(-1)).squeeze(-1)

    def predicted_position(self, query, lengths):
        """p_t = (S - 1) * sigmoid(v_p^T tanh(W_p h_t)) (local-p), one per row: (batch,)."""
        gate = self.position_v(self.position_proj(query).tanh()).squeeze(-1).sigmoid()
        return gate * query.backend.asarray((lengths - 1).astype(query.dtype))

    def forward(self, query: Tensor, memory, mask: Tensor | np.ndarray | None = None,
                keys: Tensor | None = None):
        """``query`` h_t (batch, query_size), ``memory`` h_s (batch, S, key_size), ``mask``
        (batch, S) True at real tokens -> ``(context (batch, key_size), weights (batch, S))``."""
        _check_attention_inputs("LuongAttention", query, memory, self.query_size, self.key_size)
        keys = self.project_keys(memory) if keys is None else keys
        scores = self.score(query, keys)  # eq 7
        if self.window is None:
            weights = alignment_weights(scores, mask)  # eq 9
            return context_vector(weights, memory), weights  # eq 10
        batch, time = scores.shape
        mask = np.ones((batch, time), dtype=bool) if mask is None else np.asarray(mask)
        center = self.predicted_position(query, mask.sum(axis=1))
        positions = query.backend.asarray(np.arange(time, dtype=query.dtype))
        offset = positions - center.unsqueeze(1)  # s - p_t
        in_window = np.abs(offset.numpy()) <= self.window
        sigma = self.window / 2.0
        weights = alignment_weights(scores, mask & in_window) * (
            -(offset * offset) / (2.0 * sigma * sigma)).exp()
        return context_vector(weights, memory), weights


class AttentionDecoder(_Decoder):
    """What Bahdanau's and Luong's decoders share: a stack of recurrent cells, one attention
    over the encoder states, the state dict (the layers' states plus the encoder's ``memory``,
    its projected ``keys`` and the source ``mask``), and the loop over target positions.
    Subclasses define ``step``, one target position in their paper's order."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, attention, *,
                 input_size: int, num_layers: int, cell: str, dropout: float, pad_id: int) -> None:
        super().__init__(vocab_size, embed_dim, hidden_size, num_layers, cell, dropout, pad_id)
        self.memory_size = attention.key_size
        self.attention = attention
        self.cells = ModuleList([CELLS[cell](input_size if layer == 0 else hidden_size,
                                             hidden_size) for layer in range(num_layers)])

    def init_state(self, encoded):
        state = super().init_state(encoded)
        state.update(memory=encoded.memory, keys=self.attention.project_keys(encoded.memory),
                     mask=encoded.mask)
        return state

    def recur(self, x, state):
        """One step of the stacked cells on input ``x`` (batch, input_size): the new state."""
        hs, cs = [], []
        for layer, cell in enumerate(self.cells):
            if self.cell == "lstm":
                h, c = cell(x, (state["h"][:, layer], state["c"][:, layer]))
                cs.append(c)
            else:
                h = cell(x, state["h"][:, layer])
            hs.append(h)
            x = self.dropout(h)
        new = {**state, "h": stack(hs, axis=1)}
        if cs:
            new["c"] = stack(cs, axis=1)
        return new

    def step(self, tokens, state):
        raise TypeError(f"{type(self).__name__} does not define step()")

    def forward(self, tgt_in: Tensor | np.ndarray, state):
        """Teacher forcing over ``tgt_in`` (batch, T): ``(logits (batch, T, V), weights
        (batch, T, S), state)``."""
        ids = _token_ids(tgt_in, type(self).__name__)
        if ids.shape[0] != state["memory"].shape[0]:
            raise ValueError(f"{type(self).__name__}: tgt_in of shape {ids.shape} and an encoded "
                             f"batch of {state['memory'].shape[0]} differ in batch size")
        logits, weights = [], []
        for t in range(ids.shape[1]):
            step_logits, step_weights, state = self.step(ids[:, t], state)
            logits.append(step_logits)
            weights.append(step_weights)
        return stack(logits, axis=1), stack(weights, axis=1), state


class BahdanauDecoder(AttentionDecoder):
    """The decoder of Bahdanau et al. (2015, appendix A.2.2) around :class:`BahdanauAttention`.
    At target position i::

        c_i = sum_j alpha_ij h_j,  alpha from e_ij = v^T tanh(W s_{i-1} + U h_j)    (eq 7-10)
        s_i = f(s_{i-1}, [Emb(y_{i-1}); c_i])              the recurrence (eq 5, context as input)
        t_i = maxout_2(U_o s_{i-1} + V_o Emb(y_{i-1}) + C_o c_i)    the deep output
        P(y_i | y_<i, x) = softmax(W_o t_i)                (eq 6)

    The attention reads the previous state s_{i-1}, so the context is known before the
    recurrence runs, and the output layer reads s_{i-1} too (both as in the paper). The maxout
    keeps the larger of each pair of the 2 * ``output_size`` units. ``f`` is a GRU by default,
    as in the paper.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, memory_size: int, *,
                 attention_size: int | None = None, output_size: int | None = None,
                 num_layers: int = 1, cell: str = "gru", dropout: float = 0.0,
                 pad_id: int = 0) -> None:
        attention = BahdanauAttention(hidden_size, memory_size, attention_size)
        super().__init__(vocab_size, embed_dim, hidden_size, attention,
                         input_size=embed_dim + memory_size, num_layers=num_layers, cell=cell,
                         dropout=dropout, pad_id=pad_id)
        self.output_size = output_size or hidden_size
        self.deep_output = Linear(hidden_size + embed_dim + memory_size,
                                  2 * self.output_size)  # [U_o V_o C_o]
        self.out = Linear(self.output_size, vocab_size)  # W_o

    def step(self, tokens, state):
        s_prev = state["h"][:, -1]
        context, weights = self.attention(s_prev, state["memory"], state["mask"],
                                          keys=state["keys"])  # eq 7-10
        y = self.dropout(self.embed(np.asarray(tokens)))
        state = self.recur(concatenate([y, context], axis=-1), state)
        t = self.deep_output(concatenate([s_prev, y, context], axis=-1))
        t = t.reshape(t.shape[0], self.output_size, 2).max(axis=-1)  # maxout
        return self.out(self.dropout(t)), weights, state


class LuongDecoder(AttentionDecoder):
    """The decoder of Luong et al. (2015, sections 3 and 3.3) around :class:`LuongAttention`.
    At target position t::

        h_t = f(h_{t-1}, [Emb(y_{t-1}); h~_{t-1}])          input feeding (h~_0 = 0)
        a_t(s) = align(h_t, h_s),  c_t = sum_s a_t(s) h_s   (eq 7, 9, 10) on the *current* state
        h~_t = tanh(W_c [c_t; h_t])                         the attentional hidden state
        P(y_t | y_<t, x) = softmax(W_s h~_t)                (eq 6)

    Input feeding passes the previous attentional state to the recurrence, so that the model
    knows what it attended to before; ``input_feeding=False`` gives the plain global model.
    ``f`` is an LSTM by default, as in the paper. ``score`` and ``window`` choose the attention.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, memory_size: int, *,
                 score: str = "general", window: int | None = None, input_feeding: bool = True,
                 num_layers: int = 1, cell: str = "lstm", dropout: float = 0.0,
                 pad_id: int = 0) -> None:
        attention = LuongAttention(hidden_size, memory_size, score, window)
        super().__init__(vocab_size, embed_dim, hidden_size, attention,
                         input_size=embed_dim + (hidden_size if input_feeding else 0),
                         num_layers=num_layers, cell=cell, dropout=dropout, pad_id=pad_id)
        self.input_feeding = input_feeding
        self.combine = Linear(memory_size + hidden_size, hidden_size, bias=False)  # W_c
        self.out = Linear(hidden_size, vocab_size)  # W_s

    def init_state(self, encoded):
        state = super().init_state(encoded)
        if self.input_feeding:
            h = state["h"]
            state["feed"] = zeros(h.shape[0], self.hidden_size, dtype=h.dtype, backend=h.backend)
        return state

    def step(self, tokens, state):
        y = self.dropout(self.embed(np.asarray(tokens)))
        state = self.recur(concatenate([y, state["feed"]], axis=-1) if self.input_feeding else y,
                           state)
        h_t = state["h"][:, -1]
        context, weights = self.attention(h_t, state["memory"], state["mask"],
                                          keys=state["keys"])  # eq 7, 9, 10
        attentional = self.combine(concatenate([context, h_t], axis=-1)).tanh()
        if self.input_feeding:
            state = {**state, "feed": attentional}
        return self.out(self.dropout(attentional)), weights, state


# ---- the whole model (eq 1-2) --------------------------------------------------------------------
class Seq2Seq(Module):
    """An encoder and a decoder trained jointly to maximise the conditional log-likelihood
    log P(y | x) = sum_t log P(y_t | y_<t, x) (eq 2) by teacher forcing: the decoder reads the
    target shifted right, ``tgt_in`` = <bos> y_1 ... y_{T-1}, and is scored on ``tgt_out`` =
    y_1 ... y_T <eos>. ``translate`` approximates eq 1, argmax_y P(y | x), by greedy or beam
    search over the decoder's one-step function.

    ``decoder`` is an :class:`RNNDecoder`, a :class:`BahdanauDecoder` or a
    :class:`LuongDecoder`; its hidden size must equal the encoder's ``summary_size`` (E
    initialises it) and, with attention, its memory size the encoder's ``output_size``.
    """

    def __init__(self, encoder, decoder, pad_id: int = 0) -> None:
        super().__init__()
        if encoder.summary_size != decoder.hidden_size:
            raise ValueError(f"Seq2Seq: the encoder's summary_size {encoder.summary_size} must "
                             f"equal the decoder's hidden_size {decoder.hidden_size} (E "
                             "initialises the decoder)")
        if encoder.num_layers != decoder.num_layers:
            raise ValueError(f"Seq2Seq: the encoder has {encoder.num_layers} layers, the decoder "
                             f"{decoder.num_layers}; each decoder layer starts from the E of its "
                             "encoder layer")
        memory_size = getattr(decoder, "memory_size", None)
        if memory_size is not None and memory_size != encoder.output_size:
            raise ValueError(f"Seq2Seq: the attention reads encoder states of size {memory_size}, "
                             f"the encoder gives {encoder.output_size} (hidden_size x "
                             "directions)")
        self.encoder = encoder
        self.decoder = decoder
        self.pad_id = pad_id

    def forward(self, src: Tensor | np.ndarray, tgt_in: Tensor | np.ndarray,
                src_lengths: Tensor | np.ndarray | None = None, need_weights: bool = False):
        """Teacher-forced logits (batch, T, V); with ``need_weights`` also the attention weights
        (batch, T, S) (None without attention)."""
        encoded = self.encoder(src, src_lengths)
        logits, weights, _ = self.decoder(tgt_in, self.decoder.init_state(encoded))
        return (logits, weights) if need_weights else logits

    def loss(self, src, tgt_in, tgt_out, src_lengths=None, label_smoothing=0.0):
        """Mean cross-entropy per target token (padding ignored): -log P(y | x) / |y|."""
        return F.cross_entropy(self(src, tgt_in, src_lengths), tgt_out, ignore_index=self.pad_id,
                               label_smoothing=label_smoothing)

    def log_prob(self, src, tgt_in, tgt_out, src_lengths=None):
        """log P(y | x) = sum_t log P(y_t | y_<t, x) (eq 2) of each pair: (batch,)."""
        return decoding.sequence_log_prob(self(src, tgt_in, src_lengths), tgt_out, self.pad_id)

    def start(self, src, src_lengths=None):
        """Encode ``src`` and return ``(step_fn, state)`` for :mod:`minitorch_nlp.decoding`."""
        state = self.decoder.init_state(self.encoder(src, src_lengths))

        def step_fn(tokens, state):
            logits, _, state = self.decoder.step(tokens, state)
            return logits.log_softmax(axis=-1), state

        return step_fn, state

    def translate(self, src, src_lengths=None, *, bos_id, eos_id, max_len, beam_size=1,
                  length_penalty=1.0):
        """Decode each source sentence: greedy search when ``beam_size == 1``, else beam search
        with Wu et al.'s length normalisation (eq 1). Returns int64 ids (batch, L), <eos>
        included and padding after it. Call ``eval()`` first to switch dropout off."""
        with no_grad():
            step_fn, state = self.start(src, src_lengths)
            batch = np.shape(src)[0]
            if beam_size == 1:
                return decoding.greedy_search(step_fn, state, batch, bos_id, eos_id, max_len,
                                              pad_id=self.pad_id)
            ids, _ = decoding.beam_search(step_fn, state, batch, bos_id, eos_id, max_len,
                                          beam_size, length_penalty, pad_id=self.pad_id)
            return ids
