"""Specs of the Reformer (Kitaev et al., 2020; the survey's section IX-B): LSH attention (eq
96-103) and the reversible block (eq 104-105).

LSH attention hashes with random rotations; the spec fixes them as an argument, ``rotations``
(rounds, d_k, b / 2) for b buckets, so that a candidate and the reference find the same buckets
and their values and float64 gradients compare honestly (the hash is piecewise constant: its
gradient is zero, and the gradients flow through the scores and the values). Attention is
shared-QK: the keys are the normalised queries k_j = q_j / |q_j|, so a candidate receives ``q``
and ``v`` only; a query attends itself only when it has no other key (Kitaev et al., section 3).
The library's side is ``LSHAttention`` run with the given rotations.

The reversible block's F and G are fixed small functions, F(x) = tanh(x W_F^T) and
G(x) = tanh(x W_G^T), their weights arguments; the library's side is ``nn.ReversibleBlock``
with ``f`` and ``g`` those layers, run with the candidate's weights (``nn.replaced_tensors``)."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.attention import masks
from minitorch_nlp.attention.lsh import LSHAttention

from .. import strategies as S
from ..reference import lsh as reference
from ..spec import Spec


class _GivenRotations(LSHAttention):
    """``LSHAttention`` hashing with the given (rounds, d, b / 2) rotations."""

    def __init__(self, rotations, chunk_length):
        super().__init__(2 * rotations.shape[-1], chunk_length, rotations.shape[0])
        self.given = rotations

    def rotations(self, head_dim):
        return self.given


def lsh_attention(q, v, *, rotations, chunk_length, causal, key_mask):
    """The Reformer's LSH attention (eq 100): o_i = sum_{j in P_i} exp(q_i . k_j / sqrt(d_k) -
    z(i, P_i)) v_j for every (batch, head), shared-QK keys k_j = q_j / |q_j|, over
    P_i = union_r P_i^(r), where P_i^(r) holds the j hashed into i's bucket by round r
    (h^(r)(x) = argmax([x R_r; -x R_r]), R_r = ``rotations[r]``) that lie in i's chunk or the
    previous one once the positions are sorted by (bucket, position) and cut into chunks of
    ``chunk_length`` (eq 99); j <= i when ``causal``; real keys only (``key_mask`` None or bool
    (batch, n), False on padding); i itself only when P_i holds nothing else. ``q``, ``v``
    (batch, heads, n, d_k), n a multiple of ``chunk_length``. A query with no key outputs zeros.
    Returns (batch, heads, n, d_k).

    The library's ``LSHAttention(b, chunk_length, rounds)`` computes it with these rotations."""
    core = _GivenRotations(rotations, chunk_length)
    return core(q, q, v, causal=causal, key_mask=key_mask)[0]   # a core returns (output, weights)


def bucket_attention(q, v, *, rotations, causal, key_mask):
    """LSH attention of one round, without chunks (eq 96): P_i = {j : h(q_i) = h(q_j)}, j <= i
    when ``causal``; ``rotations`` (1, d_k, b / 2). The rest as ``lsh_attention``.

    The library's ``LSHAttention(b, n)`` (one chunk) computes it."""
    return lsh_attention(q, v, rotations=rotations, chunk_length=q.shape[2], causal=causal,
                         key_mask=key_mask)


def lsh_masked_attention(q, k, v, *, allowed):
    """o_i = sum_j exp(q_i . k_j / sqrt(d_k) - m(j, P_i) - z(i, P_i)) v_j (eq 97), with
    m(j, P_i) = infinity for j outside P_i and 0 inside: attention over the batching superset
    with the pairs outside P_i masked. ``q``, ``k``, ``v`` (batch, heads, n, d_k); ``allowed``
    bool (batch, heads, n, n), True where j is in P_i (every query has at least one key).
    Returns (batch, heads, n, d_k).

    The library's ``masks.to_bias`` gives -m, added to the scores of
    ``F.scaled_dot_product_attention``."""
    return F.scaled_dot_product_attention(q, k, v, bias=masks.to_bias(allowed, q.dtype))


def multi_round_bucket_attention(q, v, *, rotations, causal, key_mask):
    """LSH attention over the union of the rounds' buckets, without chunks (eq 98): P_i =
    union_r {j : h^(r)(q_i) = h^(r)(q_j)}; ``rotations`` (rounds, d_k, b / 2). The rest as
    ``lsh_attention``.

    The library's ``LSHAttention(b, n, rounds)`` (one chunk) computes it."""
    return lsh_attention(q, v, rotations=rotations, chunk_length=q.shape[2], causal=causal,
                         key_mask=key_mask)


def chunked_bucket_attention(q, v, *, rotations, chunk_length, causal, key_mask):
    """LSH attention of one round over sorted chunks (eq 99): i attends the j of its bucket in
    its chunk or the previous one, floor(s_i / m) - 1 <= floor(s_j / m) <= floor(s_i / m) with
    s the place in the (bucket, position) order; ``rotations`` (1, d_k, b / 2). The rest as
    ``lsh_attention``.

    The library's ``LSHAttention(b, chunk_length)`` computes it."""
    return lsh_attention(q, v, rotations=rotations, chunk_length=chunk_length, causal=causal,
                         key_mask=key_mask)


def lsh_attention_by_rounds(q, v, *, rotations, chunk_length, causal, key_mask):
    """``lsh_attention`` computed round by round as eq 101 writes it: o_i = sum_r
    exp(z(i, P^(r)) - z(i, P)) sum_{j in P^(r)} exp(q_i . k_j / sqrt(d_k) - log N_ij -
    z(i, P^(r))) v_j, N_ij the number of rounds that found the pair (so that a pair counts once)
    and z(i, P^(r)) each round's log-partition with those weights. The same result as
    ``lsh_attention``.

    The library's ``LSHAttention`` computes it this way."""
    return lsh_attention(q, v, rotations=rotations, chunk_length=chunk_length, causal=causal,
                         key_mask=key_mask)


def combine_rounds(outputs, lses):
    """o_i = sum_r exp(z_r,i - z_i) o_i^(r) with z_i = log sum_r exp(z_r,i) (eq 102): the rounds'
    outputs ``outputs`` (rounds, batch, heads, n, d_k) weighted by their log-partitions ``lses``
    (rounds, batch, heads, n). Returns (batch, heads, n, d_k).

    The library's ``LSHAttention.combine_rounds`` computes it."""
    rounds = [(outputs[r], lses[r]) for r in range(outputs.shape[0])]
    return LSHAttention(1, 1).combine_rounds(rounds)


def lsh_round_output(q, v, *, rotations, chunk_length, causal, key_mask, r):
    """o_i^(r) of round ``r`` (eq 103): sum_{j in P_i^(r)} exp(q_i . k_j / sqrt(d_k) -
    log N_ij - z(i, P_i^(r))) v_j over the round's set of ``lsh_attention`` (its bucket, its
    chunk and the previous one), each pair weighted 1 / N_ij by the number of rounds that found
    it (eq 101) and i itself only when the round's set holds nothing else. Returns (batch, heads,
    n, d_k).

    The library's ``LSHAttention.rounds`` (``attend_round``) computes it."""
    core = _GivenRotations(rotations, chunk_length)
    key_mask = None if key_mask is None else q.backend.asarray(key_mask)
    return core.rounds(q, v, rotations, causal, key_mask)[r][0]


def _layer(weight):
    return nn.Sequential(nn.Linear(weight.shape[1], weight.shape[0], bias=False), nn.Tanh())


def _block(W_F, W_G):
    return nn.ReversibleBlock(_layer(W_F), _layer(W_G))


def reversible_forward(x1, x2, W_F, W_G):
    """(Y1, Y2) = (X1 + F(X2), X2 + G(Y1)) (eq 104) with F(x) = tanh(x W_F^T), G(x) =
    tanh(x W_G^T): ``x1``, ``x2`` (batch, n, d), ``W_F``, ``W_G`` (d, d). Returns Y1 and Y2
    stacked, (2, batch, n, d).

    The library's ``nn.ReversibleBlock(F, G)`` computes it with these weights."""
    block = _block(W_F, W_G)
    with nn.replaced_tensors(block, {"f.0.weight": W_F, "g.0.weight": W_G}):
        return mt.stack(list(block(x1, x2)))


def reversible_inverse(y1, y2, W_F, W_G):
    """(X1, X2) = (Y1 - F(X2), Y2 - G(Y1)), X2 first (eq 105): the inputs of ``reversible_
    forward`` from its outputs ``y1``, ``y2`` (batch, n, d), F and G as there. Returns X1 and X2
    stacked, (2, batch, n, d).

    The library's ``nn.ReversibleBlock.inverse`` computes it with these weights."""
    block = _block(W_F, W_G)
    with nn.replaced_tensors(block, {"f.0.weight": W_F, "g.0.weight": W_G}):
        return mt.stack(list(block.inverse(y1, y2)))


# ---- cases and references ------------------------------------------------------------------------
@st.composite
def _lsh_cases(draw, rounds=(1, 3), chunked=True, with_round=False):
    chunk = draw(st.integers(1, 3)) if chunked else None
    time = chunk * draw(st.integers(1, 3)) if chunked else draw(st.integers(1, 6))
    batch, heads, d_k = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    num_rounds = draw(st.integers(*rounds))
    case = {"q": draw(S.nonzero_arrays((batch, heads, time, d_k)))
            * draw(S.magnitudes((1.0, 1e-3, 1e4))),           # shared-QK scores to +-1e4
            "v": draw(S.arrays((batch, heads, time, d_k))),
            "rotations": draw(S.arrays((num_rounds, d_k, draw(st.integers(1, 2))))),
            "causal": draw(st.booleans())}
    if draw(st.booleans()):      # +-1 and 0 entries: exact hash ties ([x R; -x R]'s maximum
        grid = st.sampled_from([-1.0, 1.0])      # taken twice, x R = 0), the first one wins
        case["q"] = draw(hnp.arrays(np.float64, case["q"].shape, elements=grid))
        case["rotations"] = draw(hnp.arrays(np.float64, case["rotations"].shape,
                                            elements=st.sampled_from([-1.0, 0.0, 1.0])))
    if chunked:
        case["chunk_length"] = chunk
    case["key_mask"] = draw(st.none() | S.bool_masks((batch, time)))
    if with_round:
        case["r"] = draw(st.integers(0, num_rounds - 1))
    return case


def _per_sequence(one_head, q, v, rotations, chunk_length, causal, key_mask):
    """``one_head(q_bh, v_bh, rounds)`` for every (batch, head), with ``rounds`` the sets of
    ``reference.round_sets``, found from the queries' values (the hash has no gradient)."""
    values = getval(q)
    num_buckets = 2 * rotations.shape[-1]
    return anp.stack([
        anp.stack([one_head(q[b, h], v[b, h], reference.round_sets(
            values[b, h], rotations, chunk_length, causal,
            None if key_mask is None else key_mask[b], num_buckets))
            for h in range(q.shape[1])])
        for b in range(q.shape[0])])


def _union_reference(q, v, rotations, causal, key_mask, chunk_length=None):
    def one_head(q, v, rounds):
        union = [reference.without_self(set().union(*(sets[i] for sets in rounds)), i)
                 for i in range(q.shape[0])]
        return reference.eq100_lsh_attention(q, v, union)

    return _per_sequence(one_head, q, v, rotations, chunk_length or q.shape[2], causal,
                         key_mask)


def _by_rounds_reference(q, v, rotations, chunk_length, causal, key_mask):
    return _per_sequence(reference.eq101_lsh_attention_by_rounds, q, v, rotations, chunk_length,
                         causal, key_mask)


def _round_reference(q, v, rotations, chunk_length, causal, key_mask, r):
    return _per_sequence(lambda q, v, rounds: reference.eq103_round_output(q, v, rounds, r),
                         q, v, rotations, chunk_length, causal, key_mask)


@st.composite
def _masked_cases(draw):
    batch, heads, time, d_k = (draw(st.integers(1, 3)) for _ in range(4))
    case = {name: draw(S.arrays((batch, heads, time, d_k))) for name in "qkv"}
    case["q"] = case["q"] * draw(S.magnitudes((1.0, 1e-3, 1e4)))   # scores beyond -1e4 masks
    allowed = draw(S.bool_masks((batch, heads, time, time), all_false_row=False))
    diagonal = draw(st.booleans())         # each query keeps a key: itself, or its first one
    allowed[..., 0] |= not diagonal
    case["allowed"] = allowed | (diagonal & np.eye(time, dtype=bool))
    return case


def _masked_reference(q, k, v, allowed):
    return anp.stack([
        anp.stack([reference.eq97_masked_attention(q[b, h], k[b, h], v[b, h], allowed[b, h])
                   for h in range(q.shape[1])])
        for b in range(q.shape[0])])


@st.composite
def _combine_cases(draw):
    rounds, batch, heads, time, d_k = (draw(st.integers(1, 3)) for _ in range(5))
    """Log-partitions from near-equal to +-1e4 apart, some -inf (a round that found no key for
    the query), never every round of a query."""
    lses = draw(S.scaled_arrays((rounds, batch, heads, time), scales=(1.0, 1e-3, 1e4)))
    if draw(st.booleans()):
        lses = np.where(np.isfinite(draw(S.log_probability_arrays(lses.shape, keep_axis=0))),
                        lses, -np.inf)
    return {"outputs": draw(S.arrays((rounds, batch, heads, time, d_k))), "lses": lses}


def _combine_reference(outputs, lses):
    return anp.stack([
        anp.stack([reference.eq102_combine_rounds(outputs[:, b, h], lses[:, b, h])
                   for h in range(outputs.shape[2])])
        for b in range(outputs.shape[1])])


@st.composite
def _reversible_cases(draw, names):
    batch, time, d = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    case = {name: draw(S.arrays((batch, time, d))) for name in names}
    case.update(W_F=draw(S.arrays((d, d), -1.0, 1.0)), W_G=draw(S.arrays((d, d), -1.0, 1.0)))
    return case


def _residual(x, W):
    return anp.tanh(anp.einsum("btd,ed->bte", x, W))


def _forward_reference(x1, x2, W_F, W_G):
    y1 = x1 + _residual(x2, W_F)
    return anp.stack([y1, x2 + _residual(y1, W_G)])


def _inverse_reference(y1, y2, W_F, W_G):
    x2 = y2 - _residual(y1, W_G)
    return anp.stack([y1 - _residual(x2, W_F), x2])


_QV = (("q", "queries, float64 (batch, heads, n, d_k), no zero row (the keys are q / |q|)"),
       ("v", "values, float64 (batch, heads, n, d_k)"))
_ROTATIONS = ("rotations", "float64 (rounds, d_k, b / 2): round r hashes x to "
                           "argmax([x R_r; -x R_r]) among b buckets")
_ONE_ROUND = ("rotations", "float64 (1, d_k, b / 2): x hashes to argmax([x R; -x R])")
_CHUNK = ("chunk_length", "int m >= 1 dividing n")
_MASKS = (("causal", "bool: j <= i only"),
          ("key_mask", "None or bool (batch, n), False on padded keys"))
_RETURNS = "float64 (batch, heads, n, d_k)"
_PAPER = ("Kitaev et al. (2020), section 3, with the scores scaled by 1 / sqrt(d_k) as in "
          "their code; the hash rotations are given.")
_LIBRARY = "minitorch_nlp.testing.equation_specs.reformer:"
_WEIGHTS = (("W_F", "float64 (d, d): F(x) = tanh(x W_F^T)"),
            ("W_G", "float64 (d, d): G(x) = tanh(x W_G^T)"))

SPECS = (
    Spec(96, "bucket_attention",
         _QV + (_ONE_ROUND,) + _MASKS,
         _RETURNS + ": softmax over P_i = {j : h(q_i) = h(q_j)} of the shared-QK scores",
         ("q", "v"),
         lambda: _lsh_cases(rounds=(1, 1), chunked=False),
         _union_reference,
         _LIBRARY + "bucket_attention",
         _PAPER + " The library's side is LSHAttention with one chunk and one round."),
    Spec(97, "lsh_masked_attention",
         (("q", "queries, float64 (batch, heads, n, d_k)"),
          ("k", "keys, float64 (batch, heads, n, d_k)"),
          ("v", "values, float64 (batch, heads, n, d_k)"),
          ("allowed", "bool (batch, heads, n, n): True where j is in P_i; every query has a "
                      "key")),
         _RETURNS + ": sum_j exp(q_i . k_j / sqrt(d_k) - m(j, P_i) - z(i, P_i)) v_j",
         ("q", "k", "v"),
         _masked_cases,
         _masked_reference,
         _LIBRARY + "lsh_masked_attention",
         _PAPER + " The library's side is masks.to_bias (the bias -m) added to the scores of "
         "F.scaled_dot_product_attention."),
    Spec(98, "multi_round_bucket_attention",
         _QV + (_ROTATIONS,) + _MASKS,
         _RETURNS + ": softmax over P_i = union_r {j : h^(r)(q_i) = h^(r)(q_j)}",
         ("q", "v"),
         lambda: _lsh_cases(chunked=False),
         _union_reference,
         _LIBRARY + "multi_round_bucket_attention",
         _PAPER + " The library's side is LSHAttention with one chunk."),
    Spec(99, "chunked_bucket_attention",
         _QV + (_ONE_ROUND, _CHUNK) + _MASKS,
         _RETURNS + ": softmax over i's bucket within its sorted chunk and the previous one",
         ("q", "v"),
         lambda: _lsh_cases(rounds=(1, 1)),
         _union_reference,
         _LIBRARY + "chunked_bucket_attention",
         _PAPER + " The library's side is LSHAttention with one round."),
    Spec(100, "lsh_attention",
         _QV + (_ROTATIONS, _CHUNK) + _MASKS,
         _RETURNS + ": softmax over P_i, the union of the rounds' chunked buckets",
         ("q", "v"),
         _lsh_cases,
         _union_reference,
         _LIBRARY + "lsh_attention",
         _PAPER + " The reference takes one softmax over the union P_i."),
    Spec(101, "lsh_attention_by_rounds",
         _QV + (_ROTATIONS, _CHUNK) + _MASKS,
         _RETURNS + ": the rounds' sums with pairs weighted 1 / N_ij, combined by their "
                    "partition functions",
         ("q", "v"),
         _lsh_cases,
         _by_rounds_reference,
         _LIBRARY + "lsh_attention_by_rounds",
         _PAPER + " The reference follows eq 101 round by round."),
    Spec(102, "combine_rounds",
         (("outputs", "float64 (rounds, batch, heads, n, d_k), the rounds' outputs o^(r)"),
          ("lses", "float64 (rounds, batch, heads, n), their log-partitions z(i, P^(r))")),
         _RETURNS + ": sum_r exp(z_r - log sum_r' exp(z_r')) o^(r)",
         ("outputs", "lses"),
         _combine_cases,
         _combine_reference,
         _LIBRARY + "combine_rounds",
         "Kitaev et al. (2020), section 3, multi-round LSH attention."),
    Spec(103, "lsh_round_output",
         _QV + (_ROTATIONS, _CHUNK) + _MASKS + (("r", "int, the round, 0 <= r < rounds"),),
         _RETURNS + ": o^(r), round r's attention with pairs weighted 1 / N_ij",
         ("q", "v"),
         lambda: _lsh_cases(with_round=True),
         _round_reference,
         _LIBRARY + "lsh_round_output",
         _PAPER),
    Spec(104, "reversible_forward",
         (("x1", "float64 (batch, n, d), the first stream X1"),
          ("x2", "float64 (batch, n, d), the second stream X2")) + _WEIGHTS,
         "float64 (2, batch, n, d): Y1 = X1 + F(X2) and Y2 = X2 + G(Y1), stacked",
         ("x1", "x2", "W_F", "W_G"),
         lambda: _reversible_cases(("x1", "x2")),
         _forward_reference,
         _LIBRARY + "reversible_forward",
         "Gomez et al. (2017); Kitaev et al. (2020), section 4. The survey writes f for both "
         "functions and crosses the streams; this is the RevNet form the Reformer uses."),
    Spec(105, "reversible_inverse",
         (("y1", "float64 (batch, n, d), the first output Y1"),
          ("y2", "float64 (batch, n, d), the second output Y2")) + _WEIGHTS,
         "float64 (2, batch, n, d): X2 = Y2 - G(Y1) and X1 = Y1 - F(X2), stacked (X1 first)",
         ("y1", "y2", "W_F", "W_G"),
         lambda: _reversible_cases(("y1", "y2")),
         _inverse_reference,
         _LIBRARY + "reversible_inverse",
         "Gomez et al. (2017); Kitaev et al. (2020), section 4 (eq 104 undone)."),
)
