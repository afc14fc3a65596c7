"""Reference maths for the Reformer's LSH attention (Kitaev et al., 2020), the survey's section
IX-B, eq 96-103, in ``autograd.numpy``: the reference of ``tests/test_sec9_reformer.py``.

Eq 100 read directly: for each query the set P_i is built position by position (hash by loops,
the sorted order by Python's ``sorted`` on (bucket, position) pairs, the chunk windows of eq 99,
the union over rounds of eq 98), then one textbook softmax over P_i (exponents relative to the
largest score); no per-round attention, no log-sum-exp merging, no duplicate counts.
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval


def lsh_buckets(x, rotation):
    """h(x) = argmax([x R; -x R]) for each row of ``x`` (n, d), ``rotation`` (d, b / 2)."""
    buckets = []
    for row in np.asarray(x):
        rotated = [float(np.dot(row, rotation[:, c])) for c in range(rotation.shape[1])]
        both = rotated + [-value for value in rotated]
        buckets.append(max(range(len(both)), key=lambda c: (both[c], -c)))
    return buckets


def round_sets(x, rotations, chunk_length, causal=False, key_mask_row=None, num_buckets=2):
    """P_i^(r) for every round r: {j : h^(r)(x_i) = h^(r)(x_j), floor(s_i / m) - 1 <=
    floor(s_j / m) <= floor(s_i / m)} (eq 98-99), j <= i when causal, real keys only; i itself
    still in. A list (rounds) of lists (positions) of sets."""
    n = len(x)
    rounds = []
    for rotation in rotations:
        buckets = lsh_buckets(x, rotation) if num_buckets > 1 else [0] * n
        order = sorted(range(n), key=lambda i: (buckets[i], i))
        place = {position: s for s, position in enumerate(order)}
        sets = [set() for _ in range(n)]
        for i in range(n):
            for j in range(n):
                same = buckets[i] == buckets[j]
                near = place[i] // chunk_length - 1 <= place[j] // chunk_length \
                    <= place[i] // chunk_length
                if same and near and (not causal or j <= i) and (
                        key_mask_row is None or key_mask_row[j]):
                    sets[i].add(j)
        rounds.append(sets)
    return rounds


def without_self(members, i):
    """The set without i, unless i is all it holds (Kitaev et al., section 3)."""
    return members - {i} if members - {i} else members


def lsh_sets(x, rotations, chunk_length, causal=False, key_mask_row=None, num_buckets=2):
    """P_i = union_r P_i^(r) (eq 98, the rounds of ``round_sets``); i itself only when P_i has
    nothing else."""
    rounds = round_sets(x, rotations, chunk_length, causal, key_mask_row, num_buckets)
    return [without_self(set().union(*(sets[i] for sets in rounds)), i)
            for i in range(len(x))]


def eq100_lsh_attention(q, v, sets):
    """o_i = sum_{j in P_i} exp(q_i . k_j / sqrt(d) - z(i, P_i)) v_j with shared-QK keys
    k_j = q_j / |q_j| (eq 96-97, 100; the paper scales the scores as Vaswani et al.). A query
    with an empty set outputs zeros."""
    d = q.shape[-1]
    keys = [q[j] / anp.sqrt(anp.sum(q[j] * q[j])) for j in range(q.shape[0])]
    rows = []
    for i in range(q.shape[0]):
        members = sorted(sets[i])
        if not members:                       # every key padding: the output is zero
            rows.append(0.0 * v[i])
            continue
        scores = [anp.sum(q[i] * keys[j]) / anp.sqrt(d) for j in members]
        weights = _relative_exps(scores)
        rows.append(sum(w * v[j] for w, j in zip(weights, members)) / sum(weights))
    return anp.stack(rows)


def _relative_exps(scores, top=None):
    """exp(s - top) of each score, ``top`` (default: the largest score) a constant: the
    normalised weights are unchanged, and scores of 1e4 do not overflow."""
    top = max(getval(score) for score in scores) if top is None else top
    return [anp.exp(score - top) for score in scores]


def eq97_masked_attention(q, k, v, allowed):
    """o_i = sum_j exp(q_i . k_j / sqrt(d) - m(j, P_i) - z(i, P_i)) v_j (eq 97) for one head,
    m = infinity outside P_i: the sum runs over the allowed keys only (``allowed`` (n, n) bool,
    each row with a key), the pairs outside P_i never enter it."""
    d = q.shape[-1]
    rows = []
    for i in range(q.shape[0]):
        members = [j for j in range(k.shape[0]) if allowed[i, j]]
        weights = _relative_exps([anp.sum(q[i] * k[j]) / anp.sqrt(d) for j in members])
        rows.append(sum(w * v[j] for w, j in zip(weights, members)) / sum(weights))
    return anp.stack(rows)


def _shared_keys(q):
    return [q[j] / anp.sqrt(anp.sum(q[j] * q[j])) for j in range(q.shape[0])]


def eq101_lsh_attention_by_rounds(q, v, rounds):
    """Eq 101 read directly: each round's sum over its set with every pair weighted 1 / N_ij
    (N_ij the number of rounds whose set holds j), normalised by its own partition function
    Z_r = sum_j exp(q_i . k_j / sqrt(d)) / N_ij, then the rounds weighted by Z_r / sum_r Z_r
    (= exp(z(i, P^(r)) - z(i, P))). ``rounds`` are ``round_sets``' sets; i itself leaves every
    round's set when the union holds another key. A query with no key outputs zeros."""
    d = q.shape[-1]
    keys = _shared_keys(q)
    rows = []
    for i in range(q.shape[0]):
        union = set().union(*(sets[i] for sets in rounds))
        drop_self = bool(union - {i})
        members = [sets[i] - {i} if drop_self else sets[i] for sets in rounds]
        partitions, outputs = [], []
        scores = {j: anp.sum(q[i] * keys[j]) / anp.sqrt(d) for j in set().union(*members)}
        top = max((getval(score) for score in scores.values()), default=0.0)
        for found in members:
            if not found:
                continue
            found = sorted(found)
            counts = [sum(j in other for other in members) for j in found]
            # Z_r relative to the union's largest score (one shift for every round, so that
            # Z_r / sum_r Z_r is unchanged); the round's own average relative to its own
            # largest, so that a round far below the others still has an output
            partitions.append(sum(anp.exp(scores[j] - top) / n for j, n in zip(found, counts)))
            weights = [w / n for w, n in zip(_relative_exps([scores[j] for j in found]), counts)]
            outputs.append(sum(w * v[j] for w, j in zip(weights, found)) / sum(weights))
        if not outputs:
            rows.append(0.0 * v[i])
            continue
        rows.append(sum(z * o for z, o in zip(partitions, outputs)) / sum(partitions))
    return anp.stack(rows)


def eq103_round_output(q, v, rounds, r):
    """o_i^(r) = sum_{j in P_i^(r)} exp(q_i . k_j / sqrt(d) - log N_ij - z(i, P_i^(r))) v_j
    (eq 103, with eq 101's count N_ij of the rounds that found the pair, so that the rounds
    combine by eq 102 into one softmax over the union); i itself leaves round r's set when that
    set holds another key (the Reformer masks it per round). An empty set outputs zeros."""
    d = q.shape[-1]
    keys = _shared_keys(q)
    rows = []
    for i in range(q.shape[0]):
        found = without_self(rounds[r][i], i)
        if not found:
            rows.append(0.0 * v[i])
            continue
        scores = [anp.sum(q[i] * keys[j]) / anp.sqrt(d) for j in sorted(found)]
        weights = [w / sum(j in sets[i] for sets in rounds)
                   for w, j in zip(_relative_exps(scores), sorted(found))]
        rows.append(sum(w * v[j] for w, j in zip(weights, sorted(found))) / sum(weights))
    return anp.stack(rows)


def eq102_combine_rounds(outputs, lses):
    """o = sum_r exp(z_r - z) o^(r) with z = log sum_r exp(z_r) (eq 102), one query at a time:
    ``outputs`` (rounds, n, d), ``lses`` (rounds, n)."""
    rows = []
    for i in range(outputs.shape[1]):
        weights = _relative_exps([lses[r, i] for r in range(outputs.shape[0])])
        total = sum(weights)
        rows.append(sum(w / total * outputs[r, i] for r, w in enumerate(weights)))
    return anp.stack(rows)
