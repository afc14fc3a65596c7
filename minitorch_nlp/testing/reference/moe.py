"""Reference maths of GShard's mixture of experts (Lepikhin et al., 2020): eq 32-34.

Written one token at a time, the way Algorithm 1 of the paper reads, where the library uses
cumulative sums, one-hot masks and einsums over whole groups.
"""
import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval


def _softmax_row(row):
    """exp(g_e) / sum exp(g), the largest gate logit subtracted first (logits of ±1e4)."""
    exps = anp.exp(row - anp.max(row))
    return exps / anp.sum(exps)


def _one_hot_slot(num_experts, capacity, expert, slot):
    place = np.zeros((num_experts, capacity))
    place[expert, slot] = 1.0
    return place


def eq32_gshard_gating(logits, *, k=2, capacity, draws=None):
    """G_{s,E} = GATE(x_s) (eq 32) as GShard's top-2 gating (Algorithm 1), or Switch's top-1 for
    ``k=1``: ``logits`` (S, E) = x_s W_g; returns (S, E, capacity), token s's weight in the slot
    it takes in an expert's buffer.

    Token by token: the gates are a softmax; first choices fill the experts' buffers in token
    order, then second choices; an expert that already holds ``capacity`` tokens refuses more.
    For k = 2 the two gates are renormalised to sum to 1 and the second expert is wanted only
    when 2 g2 > draws[s] (every time when ``draws`` is None). The survey writes eq 32 without
    the capacity or the second expert's rule; both are the paper's.
    """
    num_tokens, num_experts = logits.shape
    gates = [_softmax_row(logits[s]) for s in range(num_tokens)]
    ranked = [np.argsort(-getval(g), kind="stable") for g in gates]
    filled = [0] * num_experts
    placed = []
    for s in range(num_tokens):                      # first choices, in token order
        first, second = ranked[s][0], ranked[s][1] if num_experts > 1 else None
        weight = gates[s][first] if k == 1 else gates[s][first] / (gates[s][first] +
                                                                     gates[s][second])
        if filled[first] < capacity:
            placed.append((s, first, filled[first], weight))
            filled[first] += 1
    if k == 2:
        for s in range(num_tokens):                  # then second choices, in token order
            first, second = ranked[s][0], ranked[s][1]
            weight = gates[s][second] / (gates[s][first] + gates[s][second])
            wanted = draws is None or draws[s] < 2 * getval(weight)
            if wanted and filled[second] < capacity:
                placed.append((s, second, filled[second], weight))
                filled[second] += 1
    rows = []
    for s in range(num_tokens):
        row = anp.zeros((num_experts, capacity))
        for token, expert, slot, weight in placed:
            if token == s:
                row = row + weight * _one_hot_slot(num_experts, capacity, expert, slot)
        rows.append(row)
    return anp.stack(rows)


def _expert(x_s, wi_e, wo_e):
    hidden = anp.dot(x_s, wi_e)
    return anp.dot(hidden * (hidden > 0), wo_e)


def eq33_expert_ffn(x, wi, wo):
    """FFN_e(x_s) = wo_e . ReLU(wi_e . x_s) (eq 33) for each expert e's buffer x[e] (C, d_model),
    one token at a time; ``wi`` (E, d_model, d_ff), ``wo`` (E, d_ff, d_model)."""
    return anp.stack([anp.stack([_expert(x[e, c], wi[e], wo[e]) for c in range(x.shape[1])])
                      for e in range(x.shape[0])])


def eq34_mixture_of_experts(x, wi, wo, *, combine):
    """y_s = sum_e G_{s,e} FFN_e(x_s) (eq 34), literally: every expert applied to token s
    itself (no buffers), weighted by the token's gate G_{s,e} (its slot's entry of ``combine``,
    (S, E, C), summed over slots; differentiable, so that ``combine`` may come from eq 32's
    reference). ``x`` (S, d_model)."""
    rows = []
    for s in range(x.shape[0]):
        y_s = anp.zeros(x.shape[1])
        for e in range(wi.shape[0]):
            gate = anp.sum(combine[s, e])
            if getval(gate) != 0:
                y_s = y_s + gate * _expert(x[s], wi[e], wo[e])
        rows.append(y_s)
    return anp.stack(rows)
