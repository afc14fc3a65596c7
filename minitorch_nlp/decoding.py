"""Decoding an autoregressive model: greedy search and beam search (the survey's eq 1-2), and the
sampling rules of open-ended generation (temperature, top-k, top-p, repetition penalty).

A model is seen through one step function::

    step_fn(tokens, state) -> (log_probs, new_state)

``tokens`` is an int64 NumPy array ``(N,)`` (the token each of the N rows emitted last, <bos> at
the start), ``log_probs`` a Tensor ``(N, V)`` of log P(y_t | y_<t, x) and ``state`` anything the
model carries from step to step: a nested dict / list / tuple of Tensors and NumPy arrays whose
axis 0 is the N rows. Beam search keeps ``N = batch * beam`` rows and reorders the state with
:func:`reorder_state` when hypotheses are pruned, so the same step function serves both searches.

Both searches return the generated ids after <bos>, <eos> included, and ``pad_id`` after a row's
<eos>. They run without recording a graph.

Sampling works on the logits of the next token, a NumPy array ``(N, V)``, one small function per
rule so that each can be read and tested alone; :func:`next_tokens` chains them in the order
HuggingFace does (repetition penalty, temperature, top-k, top-p) and picks one token per row.
A filter sets the logits of the tokens it removes to -inf.
"""
from __future__ import annotations

import numpy as np

from . import cookbook
from . import functional as F
from .autograd import Generator, Tensor, no_grad
from .autograd.random import rng
from .backends import backend as use_backend

__all__ = ["apply_repetition_penalty", "apply_temperature", "beam_search", "expand_state",
           "fill_masks", "force_tokens", "generate_seq2seq", "generate_text", "greedy_search",
           "next_tokens", "reorder_state", "sample_logits", "sample_search", "Seq2SeqGeneration",
           "sequence_log_prob",
           "top_k_filter", "top_p_filter", "wu_length_penalty"]


def reorder_state(state, index):
    """``state`` with its rows (axis 0 of every Tensor / NumPy array in it) taken at ``index``;
    dicts, lists and tuples (named ones too) are rebuilt around the reordered leaves, anything
    else (None, numbers, strings) is kept as it is."""
    index = np.asarray(index, dtype=np.int64)
    if isinstance(state, Tensor):
        return state[state.backend.asarray(index)]
    if isinstance(state, np.ndarray):
        return state[index]
    if isinstance(state, dict):
        return {key: reorder_state(value, index) for key, value in state.items()}
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*(reorder_state(value, index) for value in state))
    if isinstance(state, (list, tuple)):
        return type(state)(reorder_state(value, index) for value in state)
    return state


def expand_state(state, beam_size):
    """Every row of ``state`` repeated ``beam_size`` times in place (row b becomes rows
    b * beam_size ... b * beam_size + beam_size - 1)."""
    rows = _rows(state)
    return state if rows is None else reorder_state(state, np.repeat(np.arange(rows), beam_size))


def _rows(state):
    if isinstance(state, (Tensor, np.ndarray)):
        return state.shape[0]
    values = state.values() if isinstance(state, dict) else \
        state if isinstance(state, (list, tuple)) else ()
    for value in values:
        rows = _rows(value)
        if rows is not None:
            return rows
    return None


def _log_probs(step_fn, tokens, state, rows):
    log_probs, state = step_fn(tokens, state)
    values = np.asarray(log_probs.numpy() if isinstance(log_probs, Tensor) else log_probs,
                        dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != rows:
        raise ValueError(f"decoding: step_fn must return log-probabilities of shape (rows={rows}, "
                         f"vocab), got {values.shape}")
    return values, state


def _check(batch_size, max_len, op):
    for name, value in (("batch_size", batch_size), ("max_len", max_len)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{op}: {name} must be a positive int, got {value!r}")


def _token_by_token(step_fn, state, batch_size, bos_id, eos_id, max_len, pad_id, choose, op):
    """The loop greedy and sampled decoding share: ``choose(log_probs, generated)`` picks each
    row's next token from the step's log-probabilities (N, V) and the ids so far (N, t)."""
    _check(batch_size, max_len, op)
    tokens = np.full(batch_size, bos_id, dtype=np.int64)
    finished = np.zeros(batch_size, dtype=bool)
    generated = np.zeros((batch_size, 0), dtype=np.int64)
    with no_grad():
        for _ in range(max_len):
            log_probs, state = _log_probs(step_fn, tokens, state, batch_size)
            tokens = np.where(finished, pad_id, choose(log_probs, generated)).astype(np.int64)
            generated = np.concatenate([generated, tokens[:, None]], axis=1)
            finished |= tokens == eos_id
            if finished.all():
                break
    return generated


@cookbook.equation(1)
def greedy_search(step_fn, state, batch_size, bos_id, eos_id, max_len, pad_id=0):
    """Greedy decoding: y_t = argmax_y P(y | y_<t, x) at each step, the cheapest approximation of
    eq 1, y* = argmax_y P(y | x) = argmax prod_t P(y_t | y_<t, x) (eq 2).

    Stops when every row has emitted ``eos_id`` or after ``max_len`` tokens. Returns int64 ids
    ``(batch_size, L)`` with L <= max_len: <eos> included, ``pad_id`` after it."""
    return _token_by_token(step_fn, state, batch_size, bos_id, eos_id, max_len, pad_id,
                           lambda log_probs, generated: log_probs.argmax(axis=-1),
                           "greedy_search")


def sample_search(step_fn, state, batch_size, bos_id, eos_id, max_len, pad_id=0, *,
                  temperature=1.0, top_k=None, top_p=None, generator=None):
    """Ancestral sampling: y_t drawn from P(y | y_<t, x) reshaped by ``temperature``, ``top_k``
    and ``top_p`` (:func:`next_tokens`; the filters act on log-probabilities, which differ from
    the logits by a constant per row, so the draw is the same). Stops as :func:`greedy_search`
    does and returns ids of the same form; ``generator`` makes the draws reproducible."""
    def choose(log_probs, generated):
        return next_tokens(log_probs, generated, do_sample=True, temperature=temperature,
                           top_k=top_k, top_p=top_p, generator=generator)
    return _token_by_token(step_fn, state, batch_size, bos_id, eos_id, max_len, pad_id, choose,
                           "sample_search")


def force_tokens(step_fn, max_len, forced_bos_id=None, forced_eos_id=None):
    """``step_fn`` whose first step can emit only ``forced_bos_id`` (mBART's target-language
    token, BART's <s>) and whose step number ``max_len`` only ``forced_eos_id`` (a hypothesis
    cut off by the length limit still ends with <eos>), as HuggingFace's forced BOS/EOS logits
    processors do. Every other token gets log-probability -inf at those steps, the forced one
    0. Count the steps of one search only: the returned function keeps a step counter."""
    steps = [0]

    def forced_step(tokens, state):
        log_probs, state = step_fn(tokens, state)
        log_probs = np.array(log_probs.numpy() if isinstance(log_probs, Tensor) else log_probs,
                             dtype=np.float64)
        steps[0] += 1
        forced = forced_bos_id if steps[0] == 1 else None
        if forced is None and steps[0] == max_len:
            forced = forced_eos_id
        if forced is not None:
            log_probs[:] = -np.inf
            log_probs[:, forced] = 0.0
        return log_probs, state
    return forced_step


def wu_length_penalty(length, alpha):
    """Wu et al. (2016), section 7: lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha. Beam search ranks
    hypotheses by log P(Y | X) / lp(Y), so that longer ones are not penalised merely for having
    more factors below 1; alpha = 0 ranks by log P itself."""
    return ((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** alpha


@cookbook.equation(1)
def beam_search(step_fn, state, batch_size, bos_id, eos_id, max_len, beam_size,
                length_penalty=1.0, pad_id=0, early_stopping=False, convention="wu"):
    """Beam search for eq 1, y* = argmax_y log P(y | x), keeping the ``beam_size`` best prefixes
    of every source sentence at each step. Two conventions for what happens to a hypothesis that
    emits <eos>:

    * ``convention="wu"`` (the default; the section III and IV models' ``beam_decode``): ranked by
      log P(y_<=t | x) / lp(|y_<=t|) with Wu et al.'s (2016) length normalisation
      (:func:`wu_length_penalty`, ``length_penalty`` is their alpha; |y| counts <eos>). A
      finished hypothesis stays in the beam with its score frozen (it extends only with
      ``pad_id`` at no cost) and competes with the live ones; the search stops when all beams of
      all sentences are finished or after ``max_len`` tokens; with ``early_stopping`` it stops as
      soon as the best-ranked hypothesis of every sentence has finished (a live one could then
      still overtake it only through the length normalisation, so with ``length_penalty=0`` the
      result is the same, found sooner). With ``beam_size=1`` this is exactly
      :func:`greedy_search`; with a beam as wide as the number of prefixes it is the exhaustive
      argmax.
    * ``convention="huggingface"`` (what ``generate_seq2seq`` uses, so that imported checkpoints
      give HuggingFace's ids): see :func:`_beam_search_huggingface`. A finished hypothesis
      leaves the beam for a per-sentence set of the ``beam_size`` best finished ones, scored
      log P(y | x) / |y| ** ``length_penalty``; ``early_stopping`` is True, False or "never".

    ``state`` holds one row per sentence; it is expanded to ``batch_size * beam_size`` rows.
    Returns ``(ids, scores)``: the best hypothesis of each sentence as int64 ids
    ``(batch_size, L)`` (<eos> included, ``pad_id`` after it) and its normalised score
    ``(batch_size,)``."""
    _check(batch_size, max_len, "beam_search")
    if isinstance(beam_size, bool) or not isinstance(beam_size, (int, np.integer)) or beam_size < 1:
        raise ValueError(f"beam_search: beam_size must be a positive int, got {beam_size!r}")
    if convention == "huggingface":
        return _beam_search_huggingface(step_fn, state, batch_size, bos_id, eos_id, max_len,
                                        beam_size, length_penalty, pad_id, early_stopping)
    if convention != "wu":
        raise ValueError(f"beam_search: convention must be 'wu' or 'huggingface', got "
                         f"{convention!r}")
    batch, beam = batch_size, beam_size
    state = expand_state(state, beam)
    tokens = np.full(batch * beam, bos_id, dtype=np.int64)
    scores = np.full((batch, beam), -np.inf)
    scores[:, 0] = 0.0  # the beams start identical: keep one, or the top-k would hold copies
    lengths = np.zeros((batch, beam), dtype=np.int64)
    finished = np.zeros((batch, beam), dtype=bool)
    history = np.zeros((batch, beam, 0), dtype=np.int64)
    alpha = length_penalty
    with no_grad():
        for _ in range(max_len):
            log_probs, state = _log_probs(step_fn, tokens, state, batch * beam)
            vocab = log_probs.shape[-1]
            candidates = scores[..., None] + log_probs.reshape(batch, beam, vocab)
            candidates[finished] = -np.inf  # a finished hypothesis only pads, at no cost
            candidates[finished, pad_id] = scores[finished]
            candidate_lengths = np.broadcast_to((lengths + ~finished)[..., None], candidates.shape)
            ranked = (candidates / wu_length_penalty(candidate_lengths, alpha)).reshape(
                batch, beam * vocab)
            best = np.argsort(-ranked, axis=1, kind="stable")[:, :beam]
            source, tokens = np.divmod(best, vocab)
            scores = np.take_along_axis(candidates.reshape(batch, -1), best, axis=1)
            lengths = np.take_along_axis(candidate_lengths.reshape(batch, -1), best, axis=1)
            finished = np.take_along_axis(finished, source, axis=1) | (tokens == eos_id)
            finished |= np.isneginf(scores)  # an impossible hypothesis is as good as finished
            history = np.concatenate(
                [np.take_along_axis(history, source[..., None], axis=1), tokens[..., None]], axis=2)
            state = reorder_state(state, (np.arange(batch)[:, None] * beam + source).reshape(-1))
            tokens = tokens.reshape(-1)
            if finished.all() or (early_stopping and finished[:, 0].all()):
                break
    # the beams are sorted by normalised score, best first
    return history[:, 0], scores[:, 0] / wu_length_penalty(lengths[:, 0], alpha)


_HF_IMPOSSIBLE = -1.0e9  # HuggingFace's score for a beam that must not be chosen


def _beam_search_huggingface(step_fn, state, batch_size, bos_id, eos_id, max_len, beam_size,
                             length_penalty, pad_id, early_stopping):
    """HuggingFace's beam search (transformers 5.x ``GenerationMixin._beam_search``, the
    vectorised form of its ``BeamSearchScorer`` and beam hypotheses), step by step:

    1. the ``beam * vocab`` continuations of a sentence are ranked by log P(y_<=t | x), without
       length normalisation, and the best ``2 * beam`` are kept, so that at least ``beam`` of
       them are unfinished;
    2. a candidate that ends (emits <eos>, or reaches ``max_len``) leaves the beam; if it ranks
       among the first ``beam`` candidates it is offered to the sentence's finished set, which
       keeps the ``beam`` best by log P(y | x) / |y| ** ``length_penalty`` (|y| counts <eos>);
    3. the ``beam`` best unfinished candidates form the next beam;
    4. a sentence stops taking finished hypotheses once no live one can improve its set:
       ``early_stopping=True`` as soon as the set is full; ``False`` when the set is full and
       the best live hypothesis, normalised at its current length, does not beat the set's
       worst (a heuristic: with ``length_penalty > 0`` a longer one could still); ``"never"``
       the same but normalised at ``max_len`` when ``length_penalty > 0``, the most a live one
       can reach, so that the search is exact. The search stops when no sentence can improve,
       when every set is full with ``early_stopping=True``, or after ``max_len`` tokens.

    Scores that must never be chosen are HuggingFace's -1e9 rather than -inf, added once per
    reason, so that the same candidates win the same ties. Returns the best finished hypothesis
    of each sentence and its normalised score."""
    if early_stopping is not True and early_stopping is not False and early_stopping != "never":
        raise ValueError(f"beam_search: with convention='huggingface', early_stopping must be "
                         f"True, False or 'never', got {early_stopping!r}")
    batch, beam = batch_size, beam_size
    state = expand_state(state, beam)
    tokens = np.full(batch * beam, bos_id, dtype=np.int64)
    rows = np.arange(batch)[:, None]
    running_scores = np.full((batch, beam), _HF_IMPOSSIBLE)
    running_scores[:, 0] = 0.0  # the beams start identical: keep one, or the top-k holds copies
    running = np.full((batch, beam, max_len), pad_id, dtype=np.int64)
    finished_scores = np.full((batch, beam), _HF_IMPOSSIBLE)
    finished = np.full((batch, beam, max_len), pad_id, dtype=np.int64)
    finished_lengths = np.zeros((batch, beam), dtype=np.int64)
    filled = np.zeros((batch, beam), dtype=bool)
    improvable = np.ones(batch, dtype=bool)
    with no_grad():
        for t in range(max_len):
            log_probs, state = _log_probs(step_fn, tokens, state, batch * beam)
            vocab = log_probs.shape[-1]
            continuations = (running_scores[..., None] + log_probs.reshape(batch, beam, vocab)
                             ).reshape(batch, beam * vocab)
            kept = np.argsort(-continuations, axis=1, kind="stable")[:, :2 * beam]
            scores = np.take_along_axis(continuations, kept, axis=1)
            source, new_tokens = np.divmod(kept, vocab)
            sequences = running[rows, source]
            sequences[..., t] = new_tokens
            ends = (new_tokens == eos_id) | (t + 1 == max_len)
            live_scores = scores + ends * _HF_IMPOSSIBLE
            chosen = np.argsort(-live_scores, axis=1, kind="stable")[:, :beam]
            running_scores = np.take_along_axis(live_scores, chosen, axis=1)
            running = sequences[rows, chosen]
            offered = ends & (np.arange(ends.shape[1]) < beam)
            closed = filled.all(axis=1) & (early_stopping is True)
            penalties = (closed[:, None].astype(int) + (~improvable)[:, None] + ~offered)
            normalised = scores / (t + 1) ** length_penalty + penalties * _HF_IMPOSSIBLE
            merged_scores = np.concatenate([finished_scores, normalised], axis=1)
            best = np.argsort(-merged_scores, axis=1, kind="stable")[:, :beam]
            finished_scores = np.take_along_axis(merged_scores, best, axis=1)
            finished = np.concatenate([finished, sequences], axis=1)[rows, best]
            finished_lengths = np.take_along_axis(np.concatenate(
                [finished_lengths, np.full(offered.shape, t + 1)], axis=1), best, axis=1)
            filled = np.take_along_axis(np.concatenate([filled, offered], axis=1), best, axis=1)
            state = reorder_state(state, (rows * beam + np.take_along_axis(source, chosen, axis=1)
                                          ).reshape(-1))
            tokens = np.take_along_axis(new_tokens, chosen, axis=1).reshape(-1)
            reach = max_len if early_stopping == "never" and length_penalty > 0 else t + 1
            best_live = running_scores[:, :1] / reach ** length_penalty
            worst_finished = np.where(filled, finished_scores.min(axis=1, keepdims=True),
                                      _HF_IMPOSSIBLE)
            improvable &= (best_live > worst_finished).any(axis=1)
            if not improvable.any() or (early_stopping is True and filled.all()) or ends.all():
                break
    return finished[:, 0, :finished_lengths[:, 0].max()], finished_scores[:, 0]


@cookbook.equation(2)
def sequence_log_prob(logits, targets, pad_id=0):
    """log P(y | x) = sum_t log P(y_t | y_<t, x) (eq 2, the chain rule that eq 1 maximises) from
    teacher-forced ``logits`` ``(batch, T, V)`` and ``targets`` ``(batch, T)``; positions
    holding ``pad_id`` count for nothing. Returns ``(batch,)``, differentiable in the logits."""
    return -F.cross_entropy(logits, targets, ignore_index=pad_id, reduction="none").sum(axis=-1)


# ---- sampling ------------------------------------------------------------------------------------
def _check_logits(logits, op):
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 2 or logits.shape[1] == 0:
        raise ValueError(f"{op}: logits must be (rows, vocab), got shape {logits.shape}")
    return logits


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def apply_repetition_penalty(logits, previous_ids, penalty):
    """Make every token already in ``previous_ids`` (rows, time) less likely: its logit is
    divided by ``penalty`` when positive and multiplied by it when negative (Keskar et al.,
    2019, CTRL, section 4.1, in HuggingFace's form: CTRL divides every such logit by theta,
    which makes a negative one *more* likely). ``penalty`` = 1 changes nothing; CTRL uses 1.2."""
    logits = _check_logits(logits, "apply_repetition_penalty")
    if not penalty > 0:
        raise ValueError(f"apply_repetition_penalty: penalty must be > 0, got {penalty}")
    previous_ids = np.asarray(previous_ids, dtype=np.int64).reshape(logits.shape[0], -1)
    rows = np.arange(logits.shape[0])[:, None]
    seen = logits[rows, previous_ids]
    out = logits.copy()
    out[rows, previous_ids] = np.where(seen > 0, seen / penalty, seen * penalty)
    return out


def apply_temperature(logits, temperature):
    """softmax(logits / T): T < 1 sharpens the distribution (T -> 0 is the argmax), T > 1
    flattens it (Ackley et al., 1985; the usual knob of sampling)."""
    if not temperature > 0:
        raise ValueError(f"apply_temperature: temperature must be > 0, got {temperature} (for "
                         "the argmax, decode greedily)")
    return _check_logits(logits, "apply_temperature") / temperature


def top_k_filter(logits, k):
    """Keep the ``k`` largest logits of each row (Fan et al., 2018), ties broken towards the
    lower id so that exactly k survive; the others become -inf."""
    logits = _check_logits(logits, "top_k_filter")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"top_k_filter: k must be a positive int, got {k!r}")
    keep = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    out = np.full_like(logits, -np.inf)
    np.put_along_axis(out, keep, np.take_along_axis(logits, keep, axis=-1), axis=-1)
    return out


def top_p_filter(logits, p):
    """Nucleus sampling (Holtzman et al., 2020): keep the smallest set of most likely tokens
    whose probability adds up to at least ``p``, i.e. every token whose more likely predecessors
    hold less than ``p``; the others become -inf. The most likely token always stays."""
    logits = _check_logits(logits, "top_p_filter")
    if not 0 < p <= 1:
        raise ValueError(f"top_p_filter: p must be in (0, 1], got {p}")
    order = np.argsort(-logits, axis=-1, kind="stable")
    probs = np.take_along_axis(_softmax(logits), order, axis=-1)
    mass_before = np.cumsum(probs, axis=-1) - probs
    drop = np.zeros(logits.shape, dtype=bool)
    np.put_along_axis(drop, order, mass_before >= p, axis=-1)
    return np.where(drop, -np.inf, logits)


def sample_logits(logits, generator=None):
    """One token per row drawn from softmax(logits), with one uniform number per row from
    ``generator`` (a ``minitorch_nlp.Generator``; the global one when None): the first token
    whose cumulative probability exceeds it."""
    cdf = np.cumsum(_softmax(_check_logits(logits, "sample_logits")), axis=-1)
    u = rng(generator).random(cdf.shape[0])[:, None] * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=-1), cdf.shape[1] - 1).astype(np.int64)


def next_tokens(logits, previous_ids, *, do_sample=False, temperature=1.0, top_k=None,
                top_p=None, repetition_penalty=1.0, generator=None):
    """The next token of each row from its logits (N, V): the repetition penalty over
    ``previous_ids`` (N, time), then either the argmax (``do_sample=False``, greedy) or the
    temperature, the top-k and top-p filters and one draw. Returns int64 ids (N,)."""
    logits = _check_logits(logits, "next_tokens")
    if repetition_penalty != 1.0:
        logits = apply_repetition_penalty(logits, previous_ids, repetition_penalty)
    if not do_sample:
        return logits.argmax(axis=-1)
    logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, p=top_p)
    return sample_logits(logits, generator)


# ---- encoder-decoder models: one generate for all of them ---------------------------------------
def generate_seq2seq(model, input_ids, attention_mask=None, *, decoder_start_token_id,
                     eos_token_id, pad_token_id=0, max_new_tokens=20, num_beams=1,
                     do_sample=False, temperature=1.0, top_k=None, top_p=None,
                     length_penalty=1.0, early_stopping=False, forced_bos_token_id=None,
                     forced_eos_token_id=None, use_cache=True, generator=None,
                     beam_convention="huggingface"):
    """Generate targets for the sources ``input_ids`` (batch, src_time) with any encoder-decoder
    ``model`` that has

    * ``start_decoding(input_ids, attention_mask, use_cache) -> state``: the encoder run once per
      source, plus the decoder's empty self-attention caches (the cross-attention keys and values
      are projected from the encoder's output at the first step and reused after); with
      ``use_cache=False`` the state keeps the prefix, which every step runs again;
    * ``step(tokens, state) -> (log_probs (N, V), state)``: one decoder step (the
      :mod:`decoding` step function).

    The decoder starts from ``decoder_start_token_id`` (the Transformer's <bos>, T5's <pad>,
    BART's </s>, mBART's language token). ``num_beams`` > 1 runs :func:`beam_search` with
    ``length_penalty`` and ``early_stopping`` in HuggingFace's convention (finished hypotheses
    leave the beam, scores divided by |y| ** length_penalty, ``early_stopping`` True, False or
    "never"), so that a checkpoint imported from HuggingFace gives HuggingFace's ids;
    ``beam_convention="wu"`` runs the section III convention instead (Wu et al.'s
    normalisation, ``length_penalty`` their alpha); otherwise ``do_sample``
    chooses :func:`sample_search` (``temperature``, ``top_k``, ``top_p``, ``generator``) over
    :func:`greedy_search`. ``forced_bos_token_id`` / ``forced_eos_token_id``: see
    :func:`force_tokens`. ``attention_mask`` (batch, src_time), 1 on real source tokens, lets
    left- or right-padded sources give each row what it gives alone.

    Returns int64 ids (batch, 1 + L), L <= ``max_new_tokens``, starting with
    ``decoder_start_token_id`` (HuggingFace's convention), ``pad_token_id`` after each row's
    <eos>."""
    op = "generate_seq2seq"
    ids = np.asarray(input_ids.numpy() if isinstance(input_ids, Tensor) else input_ids)
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.shape[1] == 0:
        raise ValueError(f"{op}: input_ids must be integer token ids of shape (batch, time) with "
                         f"time >= 1, got {ids.dtype} {ids.shape}")
    if attention_mask is not None:
        attention_mask = np.asarray(attention_mask.numpy() if isinstance(attention_mask, Tensor)
                                    else attention_mask)
        if attention_mask.shape != ids.shape:
            raise ValueError(f"{op}: attention_mask of shape {attention_mask.shape} must match "
                             f"input_ids {ids.shape}")
        attention_mask = attention_mask.astype(bool)
    if decoder_start_token_id is None:
        raise ValueError(f"{op}: the decoder needs a start token; set decoder_start_token_id "
                         "(in the call or the model's config)")
    for name, value in (("num_beams", num_beams), ("max_new_tokens", max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{op}: {name} must be a positive int, got {value!r}")
    if num_beams > 1 and do_sample:
        raise ValueError(f"{op}: beam search does not sample; set do_sample=False or num_beams=1")
    batch = len(ids)
    with model.inference():
        state = model.start_decoding(ids, attention_mask, use_cache)
        step_fn = model.step
        if forced_bos_token_id is not None or forced_eos_token_id is not None:
            step_fn = force_tokens(step_fn, max_new_tokens, forced_bos_token_id,
                                   forced_eos_token_id)
        search = dict(step_fn=step_fn, state=state, batch_size=batch,
                      bos_id=decoder_start_token_id,
                      eos_id=-1 if eos_token_id is None else eos_token_id,
                      max_len=max_new_tokens, pad_id=pad_token_id)
        if num_beams > 1:
            generated, _ = beam_search(**search, beam_size=num_beams,
                                       length_penalty=length_penalty,
                                       early_stopping=early_stopping,
                                       convention=beam_convention)
        elif do_sample:
            generated = sample_search(**search, temperature=temperature, top_k=top_k,
                                      top_p=top_p, generator=generator)
        else:
            generated = greedy_search(**search)
    start = np.full((batch, 1), decoder_start_token_id, dtype=np.int64)
    return np.concatenate([start, generated], axis=1)


class Seq2SeqGeneration:
    """``start_decoding``, ``step`` and ``generate`` for an encoder-decoder model with an output
    layer (a mixin: T5, BART) that defines

    * ``encoder_decoder``: the module that has ``encode(input_ids, attention_mask)`` and
      ``decode(decoder_input_ids, memory, attention_mask, cache=...)`` (each returning a
      ``ModelOutput`` with ``last_hidden_state``; ``decode`` feeds only the new positions when
      ``cache`` is not None) and ``new_cache()``;
    * ``logits(hidden)``, the output layer, and a ``config`` with ``decoder_start_token_id``,
      ``eos_token_id`` and ``pad_token_id``."""

    def start_decoding(self, input_ids, attention_mask=None, use_cache=True):
        """The state :func:`generate_seq2seq` starts from: the encoded sources, their mask, and
        the decoder's empty caches (or, ``use_cache=False``, an empty prefix)."""
        mask = None if attention_mask is None else np.asarray(attention_mask).astype(bool)
        memory = self.encoder_decoder.encode(input_ids, mask).last_hidden_state
        state = {"memory": memory, "attention_mask": mask}
        if use_cache:
            state["cache"] = self.encoder_decoder.new_cache()
        else:
            state["prefix"] = np.zeros((len(mask if mask is not None else input_ids), 0),
                                       dtype=np.int64)
        return state

    def step(self, tokens, state):
        """The log-probabilities (N, vocab) of the token after ``tokens`` (N,), and the state."""
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1, 1)
        if "cache" not in state:
            state = {**state, "prefix": np.concatenate([state["prefix"], tokens], axis=1)}
        out = self.encoder_decoder.decode(state.get("prefix", tokens), state["memory"],
                                          state["attention_mask"], cache=state.get("cache"))
        return self.logits(out.last_hidden_state[:, -1:])[:, 0].log_softmax(axis=-1), state

    def generate(self, input_ids, attention_mask=None, **options):
        """:func:`generate_seq2seq` with the start, end and padding ids of the model's config,
        and its forced first and last tokens where it has them (BART); ``options`` may override
        them."""
        config = self.config
        defaults = dict(decoder_start_token_id=config.decoder_start_token_id,
                        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
                        forced_bos_token_id=getattr(config, "forced_bos_token_id", None),
                        forced_eos_token_id=getattr(config, "forced_eos_token_id", None))
        return generate_seq2seq(self, input_ids, attention_mask, **{**defaults, **options})


# ---- text in, text out: what `minitorch-nlp generate` prints -------------------------------------
def generate_text(model, tokenizer, prompt, *, max_new_tokens=200, temperature=0.8, top_k=None,
                  top_p=None, repetition_penalty=1.0, seed=0, on_text=None):
    """``prompt`` and its continuation by a causal LM with a ``generate`` method and
    ``config.n_positions`` (GPT, GPT-2); ``on_text`` receives each new piece of text as soon as
    its tokens decode to whole characters (streaming). ``temperature=0`` is greedy decoding (the
    likeliest token every step); the other sampling options are ``model.generate``'s.

    The model reads at most ``n_positions`` tokens (its position table has no more rows), so a
    longer text is written with a sliding window, as nanoGPT does: when the context is full, the
    model goes on from the last ``n_positions // 2`` tokens (the prompt too is cropped to them
    when it is longer). Special tokens (<bos>, <pad>, <unk> ...) are never part of the text."""
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    if not prompt_ids:
        raise ValueError("generate_text: the prompt is empty after tokenization; give some text")
    if temperature < 0:
        raise ValueError(f"generate_text: temperature must be >= 0 (0: greedy), got {temperature}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 1:
        raise ValueError(f"generate_text: max_new_tokens must be a positive int, got "
                         f"{max_new_tokens!r}")
    window, keep = model.config.n_positions, max(1, model.config.n_positions // 2)
    if window < 2:    # the sliding window below needs room for one new token beside the kept
        raise ValueError(f"generate_text: the model reads {window} token at a time; generating "
                         "needs a context of at least 2 (n_positions)")
    generator = Generator(seed)
    ids, new_ids, printed = list(prompt_ids), [], [0]

    def stream(step_ids):
        new_ids.append(int(step_ids[0]))
        text = tokenizer.decode(new_ids, skip_special_tokens=True)
        if on_text is not None and not text.endswith("\ufffd"):   # wait for a whole character
            on_text(text[printed[0]:])
            printed[0] = len(text)

    with use_backend(next(iter(model.parameters())).backend):
        while len(new_ids) < max_new_tokens:
            context = ids if len(ids) < window else ids[-keep:]
            steps = min(max_new_tokens - len(new_ids), window - len(context))
            out = model.generate(np.asarray([context]), steps, do_sample=temperature > 0,
                                 temperature=temperature or 1.0, top_k=top_k, top_p=top_p,
                                 repetition_penalty=repetition_penalty, generator=generator,
                                 streamer=stream)
            ids = ids + [int(token) for token in out[0, len(context):]]
            if out.shape[1] - len(context) < steps:   # the model emitted its end-of-text token
                break
    return prompt + tokenizer.decode(new_ids, skip_special_tokens=True)


def fill_masks(model, tokenizer, text):
    """``text`` with each mask token replaced by a masked LM's likeliest token (BERT, RoBERTa)."""
    ids = tokenizer.encode(text)
    if tokenizer.mask_token_id not in ids:
        raise ValueError(f"fill_masks: the prompt has no {tokenizer.mask_token}: put one where "
                         "a word should be guessed")
    with no_grad():
        logits = model(input_ids=np.asarray([ids])).logits.numpy()[0]
    filled = [int(logits[i].argmax()) if token == tokenizer.mask_token_id else token
              for i, token in enumerate(ids)]
    return tokenizer.decode(filled, skip_special_tokens=True)
