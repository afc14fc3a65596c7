"""Spec of the decoding objective (the survey's section III, eq 1): y* = argmax_y P(y | x),
the best sequence of a model that gives P(y_t | y_<t, x).

The model is a table of next-token logits by (sentence, position, previous token), so that a
candidate needs no network; the library's side is ``decoding.beam_search`` with a beam as wide
as the number of prefixes, which is the exhaustive argmax."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import decoding

from .. import strategies as S
from ..reference import seq2seq as reference
from ..spec import Spec

PAD, BOS, EOS = 0, 1, 2


def markov_step(tables):
    """The step function of the tables' model for ``decoding``'s searches, and its first state
    (each row's sentence and position)."""
    def step_fn(tokens, state):
        logits = tables[state["row"], state["position"], tokens]
        largest = logits.max(-1, keepdims=True)
        log_probs = logits - largest - np.log(np.exp(logits - largest).sum(-1, keepdims=True))
        return mt.tensor(log_probs, dtype=mt.float64), dict(state,
                                                             position=state["position"] + 1)
    return step_fn, {"row": np.arange(len(tables)), "position": np.zeros(len(tables), np.int64)}


def argmax_sequence(*, tables, length_penalty):
    """y* = argmax_y log P(y | x) / lp(|y|) (eq 1, with Wu et al.'s lp(n) = ((5 + n) / 6)^alpha,
    alpha = ``length_penalty``; |y| counts <eos>) for every sentence b of the model P(y_t = v |
    y_<t, x_b) = softmax(tables[b, t - 1, y_{t-1}])_v, y_0 = <bos> (``tables`` float64 (batch,
    max_len, V, V)). A sequence ends at its first <eos> or after max_len tokens; <pad> and <bos>
    are never emitted (logits of -1e3, -1e4, -1e9 or -inf). Ids: <pad> 0, <bos> 1, <eos> 2.
    Returns (ids int64 (batch, max_len), <pad> after the end; scores float64 (batch,), the
    normalised log-probabilities).

    The library's ``decoding.beam_search`` with a beam as wide as the prefixes computes it."""
    batch, max_len, vocab = tables.shape[:3]
    step_fn, state = markov_step(tables)
    ids, scores = decoding.beam_search(step_fn, state, batch, BOS, EOS, max_len,
                                       beam_size=(vocab - 2) ** max_len,
                                       length_penalty=length_penalty, pad_id=PAD)
    return np.pad(ids, ((0, 0), (0, max_len - ids.shape[1])), constant_values=PAD), scores


@st.composite
def _table_cases(draw):
    batch, max_len, vocab = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(
        st.integers(3, 5))
    # from a seed: random logits make two sequences' scores tie with probability zero
    rng = np.random.default_rng(draw(S.seeds()))
    tables = rng.normal(0.0, 2.0, (batch, max_len, vocab, vocab))
    tables *= draw(st.sampled_from((1.0, 1.0, 1.0, 1e3)))   # logits of ±1e3 too: sure steps
    if max_len > 1 and vocab == 5 and draw(st.booleans()):
        # a trap for a greedy search: the likelier first token (3) leads to a flat next step,
        # the other one (4) to a nearly sure <eos>
        tables[:, 0, BOS, 2:] = (-4.0, 1.0, 0.5)
        tables[:, 1, 3, 2:], tables[:, 1, 4, 2:] = 0.0, (6.0, -2.0, -2.0)
    tables[..., [PAD, BOS]] = draw(st.sampled_from((-1e3, -1e4, -1e9, -np.inf)))
    length_penalty = draw(st.sampled_from([0.0, 0.6, 1.0]) | st.floats(0.0, 2.0))
    return {"tables": tables, "length_penalty": length_penalty}


def _argmax_reference(tables, length_penalty):
    batch, max_len, vocab = tables.shape[:3]
    ids, scores = np.full((batch, max_len), PAD, dtype=np.int64), np.zeros(batch)
    for b, table in enumerate(tables):
        def log_prob_of_next(prefix, table=table):
            logits = table[len(prefix), prefix[-1] if prefix else BOS]
            return logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())

        best, scores[b] = reference.eq01_argmax_sequence(log_prob_of_next, vocab, EOS, max_len,
                                                         length_penalty, (PAD, BOS))
        ids[b, :len(best)] = best
    return ids, scores


SPECS = (
    Spec(1, "argmax_sequence",
         (("tables", "float64 (batch, max_len, V, V): tables[b, t, u] are the logits of y_{t+1} "
                     "after y_t = u (y_0 = <bos> = 1) in sentence b; V >= 3"),
          ("length_penalty", "float alpha >= 0 of lp(n) = ((5 + n) / 6)^alpha")),
         "(ids int64 (batch, max_len), each sentence's best sequence, <eos> (2) included, <pad> "
         "(0) after it; scores float64 (batch,), its log P(y | x) / lp(|y|))",
         (),
         _table_cases,
         _argmax_reference,
         "minitorch_nlp.testing.equation_specs.decoding:argmax_sequence",
         "Values only: eq 1 is a search over discrete sequences, with no input to differentiate. "
         "The reference enumerates every sequence. The library's side is beam_search with a beam "
         "of (V - 2)^max_len, the exhaustive search (greedy_search approximates it)."),
)
