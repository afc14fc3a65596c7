"""Reference maths for section III of the survey (eq 1-10): the RNN encoder-decoder, its
decoding objective, and the attention of Bahdanau et al. (2015) and Luong et al. (2015); plus
the LSTM and GRU step equations from their papers.

Written from the papers in ``autograd.numpy`` with column vectors (``W @ x``, one sequence and
one position at a time), gates kept as separate matrices, masks applied by multiplication,
embeddings looked up as one-hot products and softmax in its textbook form -- the library works
on row-major batches with stacked gates, ``-inf`` fills and gathers.
"""
from __future__ import annotations

import itertools

import autograd.numpy as anp
import numpy as np


def _sigmoid(x):
    return 1.0 / (1.0 + anp.exp(-x))


def _softmax(z):
    """exp(z_i) / sum_j exp(z_j), as exp(z_i - m) / sum_j exp(z_j - m), m the largest z_j."""
    e = anp.exp(z - anp.max(z))
    return e / anp.sum(e)


def _log_softmax(z):
    """log softmax(z)_i = z_i - m - log sum_j exp(z_j - m): finite for logits of any size."""
    m = anp.max(z)
    return z - m - anp.log(anp.sum(anp.exp(z - m)))


def embed(weight, ids, pad_id=None, pad_row=None):
    """Rows of ``weight`` picked by ``ids`` (T,), as a one-hot product: (T, dim). With
    ``pad_id``, that token's row is the constant ``pad_row`` instead (a padding row is not
    trained)."""
    ids = np.asarray(ids)
    one_hot = np.eye(weight.shape[0])[ids]
    if pad_id is None:
        return anp.dot(one_hot, weight)
    is_pad = (ids == pad_id)[:, None]
    return anp.dot(one_hot * ~is_pad, weight) + is_pad * pad_row


# ---- eq 1-2: the decoding objective --------------------------------------------------------------
def eq01_argmax_sequence(log_prob_of_next, vocab_size, eos_id, max_len, alpha=0.0,
                         forbidden=()):
    """y* = argmax_y log P(y | x) / lp(y) (eq 1, with Wu et al.'s length normalisation
    lp = ((5 + |y|) / 6)^alpha), by enumerating every sequence: those that end at their first
    <eos> and those cut at ``max_len``. ``log_prob_of_next(prefix) -> (V,)`` gives
    log P(y_t | y_<t) (eq 2). Tokens in ``forbidden`` (pad, bos) are never emitted.
    Returns (best sequence as a tuple, its normalised score)."""
    tokens = [v for v in range(vocab_size) if v not in forbidden]
    best, best_score = None, -np.inf
    for length in range(1, max_len + 1):
        for seq in itertools.product(tokens, repeat=length):
            if eos_id in seq[:-1] or (length < max_len and seq[-1] != eos_id):
                continue
            total = sum(log_prob_of_next(seq[:t])[seq[t]] for t in range(length))
            score = total / ((5.0 + length) / 6.0) ** alpha
            if score > best_score:
                best, best_score = seq, score
    return best, best_score


def greedy_sequence(log_prob_of_next, eos_id, max_len):
    """The greedy approximation of eq 1: the most likely next token, one position at a time."""
    seq = []
    while len(seq) < max_len and (not seq or seq[-1] != eos_id):
        seq.append(int(np.argmax(log_prob_of_next(tuple(seq)))))
    return tuple(seq)


def eq02_sequence_log_prob(logits, targets, pad_id=0):
    """log P(y | x) = sum_t log P(y_t | y_1 .. y_{t-1}, x) (eq 2), P from a softmax over each
    position's logits (batch, T, V); positions holding ``pad_id`` are skipped. (batch,)."""
    rows = []
    for b in range(logits.shape[0]):
        total = 0.0
        for t in range(logits.shape[1]):
            y = int(targets[b, t])
            if y != pad_id:
                total = total + _log_softmax(logits[b, t])[y]
        rows.append(total)
    return anp.stack(rows)


# ---- eq 3-6: the encoder-decoder -----------------------------------------------------------------
def eq03_rnn_hidden_states(xs, h0, U, W, b):
    """H_{t+1} = tanh(U X_{t+1} + W H_t + b) (eq 3) along one sequence ``xs`` (T, input):
    returns the states H_1 .. H_T as (T, hidden)."""
    h, states = h0, []
    for x in xs:
        h = anp.tanh(anp.dot(U, x) + anp.dot(W, h) + b)
        states.append(h)
    return anp.stack(states)


def eq04_encoder_summary(h_last, V, b):
    """E = tanh(V H + b) (eq 4; Cho et al.'s c = tanh(V h_N)) of the final state ``h_last``."""
    return anp.tanh(anp.dot(V, h_last) + b)


def eq05_decoder_hidden_states(ys, E, h0, U_y, U_e, W, b):
    """H'_{t+1} = tanh(U' [y_t; E] + W' H'_t + b) (eq 5, with Cho et al.'s previous word y_t
    beside the summary E), U' split into its y block ``U_y`` and its E block ``U_e``:
    (T, hidden) for the embedded decoder inputs ``ys`` (T, embed)."""
    h, states = h0, []
    for y in ys:
        h = anp.tanh(anp.dot(U_y, y) + anp.dot(U_e, E) + anp.dot(W, h) + b)
        states.append(h)
    return anp.stack(states)


def eq06_output_distribution(hs, V, b):
    """O_{t+1} = softmax(V' H'_{t+1} + b) (eq 6) for each state of ``hs`` (T, hidden):
    (T, vocab)."""
    return anp.stack([_softmax(anp.dot(V, h) + b) for h in hs])


# ---- the cells of eq 3 ---------------------------------------------------------------------------
def lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh):
    """One LSTM step (Hochreiter & Schmidhuber, 1997; forget gate of Gers et al., 2000), one vector,
    each gate with its own matrices (rows of the stacked weights in the order i, f, g, o)."""
    n = h.shape[0]
    W_xi, W_xf, W_xg, W_xo = (W_ih[k * n:(k + 1) * n] for k in range(4))
    W_hi, W_hf, W_hg, W_ho = (W_hh[k * n:(k + 1) * n] for k in range(4))
    b_i, b_f, b_g, b_o = (b_ih[k * n:(k + 1) * n] + b_hh[k * n:(k + 1) * n] for k in range(4))
    input_gate = _sigmoid(anp.dot(W_xi, x) + anp.dot(W_hi, h) + b_i)
    forget_gate = _sigmoid(anp.dot(W_xf, x) + anp.dot(W_hf, h) + b_f)
    candidate = anp.tanh(anp.dot(W_xg, x) + anp.dot(W_hg, h) + b_g)
    output_gate = _sigmoid(anp.dot(W_xo, x) + anp.dot(W_ho, h) + b_o)
    c_new = forget_gate * c + input_gate * candidate
    return output_gate * anp.tanh(c_new), c_new


def gru_step(x, h, W_ih, W_hh, b_ih, b_hh, reset_after=True):
    """One GRU step (Cho et al., 2014, eq 5-8), one vector, gates r, z, n::

        r = sigmoid(W_r x + U_r h),  z = sigmoid(W_z x + U_z h)
        h~ = tanh(W x + U (r * h))                  (Cho et al.; reset_after=False)
        h~ = tanh(W x + r * (U h + b_hn))           (PyTorch / cuDNN; reset_after=True)
        h' = z * h + (1 - z) * h~
    """
    n = h.shape[0]
    W_r, W_z, W_n = (W_ih[k * n:(k + 1) * n] for k in range(3))
    U_r, U_z, U_n = (W_hh[k * n:(k + 1) * n] for k in range(3))
    bi_r, bi_z, bi_n = (b_ih[k * n:(k + 1) * n] for k in range(3))
    bh_r, bh_z, bh_n = (b_hh[k * n:(k + 1) * n] for k in range(3))
    r = _sigmoid(anp.dot(W_r, x) + bi_r + anp.dot(U_r, h) + bh_r)
    z = _sigmoid(anp.dot(W_z, x) + bi_z + anp.dot(U_z, h) + bh_z)
    if reset_after:
        candidate = anp.tanh(anp.dot(W_n, x) + bi_n + r * (anp.dot(U_n, h) + bh_n))
    else:
        candidate = anp.tanh(anp.dot(W_n, x) + bi_n + anp.dot(U_n, r * h) + bh_n)
    return z * h + (1.0 - z) * candidate


# ---- eq 7-10: attention --------------------------------------------------------------------------
def eq07_alignment_scores(h_t, hs, kind, W_a=None, v_a=None):
    """Luong et al.'s alignment scores e_tj = score(h_t, h_j) (eq 7) of the current state h_t
    against each source state in ``hs`` (S, key): "dot" h_t . h_j, "general" h_t . (W_a h_j),
    "concat" v_a . tanh(W_a [h_t; h_j]). (S,)."""
    scores = []
    for h_j in hs:
        if kind == "dot":
            scores.append(anp.dot(h_t, h_j))
        elif kind == "general":
            scores.append(anp.dot(h_t, anp.dot(W_a, h_j)))
        else:
            scores.append(anp.dot(v_a, anp.tanh(anp.dot(W_a, anp.concatenate([h_t, h_j])))))
    return anp.stack(scores)


def eq08_additive_scores(s_prev, hs, W, U, v):
    """Bahdanau et al.'s e_ij = v^T tanh(W s_{i-1} + U h_j) (eq 8; the survey's
    W_comb tanh(W_dec H_dec + W_enc H_enc)) for each source state h_j in ``hs``: (S,)."""
    return anp.stack([anp.dot(v, anp.tanh(anp.dot(W, s_prev) + anp.dot(U, h_j))) for h_j in hs])


def eq09_attention_weights(scores, mask=None):
    """alpha_j = exp(e_j) / sum_k exp(e_k) (eq 9) over the positions where ``mask`` is True
    (every position when None); 0 everywhere when no position is."""
    keep = np.ones(len(scores), bool) if mask is None else np.asarray(mask, bool)
    if not keep.any():
        return np.zeros(len(scores))
    largest = max(scores[j] for j in range(len(scores)) if keep[j])
    e = anp.exp(anp.where(keep, scores - largest, -np.inf))
    return e / anp.sum(e)


def eq10_context_vector(weights, hs):
    """c = sum_j alpha_j h_j (eq 10)."""
    total = 0.0
    for alpha_j, h_j in zip(weights, hs):
        total = total + alpha_j * h_j
    return total


def luong_local_p(h_t, hs, mask, kind, window, W_p, v_p, W_a=None, v_a=None):
    """Local-p attention (Luong et al., 2015, section 3.2) with positions counted from 0:
    p_t = (S - 1) sigmoid(v_p . tanh(W_p h_t)) for S real source tokens; weights
    align(h_t, h_s) exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D/2, with align the softmax over the
    real positions within [p_t - D, p_t + D]. Returns (context, weights, p_t)."""
    length = float(np.sum(mask))
    p_t = (length - 1.0) * _sigmoid(anp.dot(v_p, anp.tanh(anp.dot(W_p, h_t))))
    positions = np.arange(len(hs), dtype=np.float64)
    in_window = np.abs(positions - _value(p_t)) <= window
    align = eq09_attention_weights(eq07_alignment_scores(h_t, hs, kind, W_a, v_a),
                                   mask * in_window)
    sigma = window / 2.0
    weights = align * anp.exp(-((positions - p_t) ** 2) / (2.0 * sigma ** 2))
    return eq10_context_vector(weights, hs), weights, p_t


def _value(x):
    """The plain number inside an autograd box (the window is a choice, not differentiated)."""
    while hasattr(x, "_value"):
        x = x._value
    return float(x)


def luong_attentional_state(context, h_t, W_c):
    """h~_t = tanh(W_c [c_t; h_t]) (Luong et al., 2015, eq 5)."""
    return anp.tanh(anp.dot(W_c, anp.concatenate([context, h_t])))
