"""The Reformer's LSH attention (Kitaev et al., 2020; the survey's section IX-B, eq 96-103) as an
attention core for ``nn.MultiHeadAttention(core=...)``.

Shared-QK attention: the keys are the queries normalised, k_j = q_j / |q_j|, so a query and a key
that are close hash together. Per hashing round r:

1. hash: h(x) = argmax([x R; -x R]) for a random rotation R (d, b / 2), b buckets (eq 98's h^(r));
2. sort the positions by (bucket, position); s_i is i's place in that order;
3. cut the sorted sequence into chunks of m; a query attends the keys of its own chunk and the
   previous one (eq 99) that share its bucket (P_i^(r), the mask m of eq 97), only earlier ones
   when causal, and itself only when it has no other key (Kitaev et al., section 3);
4. each chunk is a small dense attention (``grouped_attention``), giving o_i^(r) and its
   log-sum-exp z(i, P_i^(r)) (eq 103).

The rounds combine as eq 100-102: o_i = sum_r exp(z(i, P^(r)) - z(i, P)) o_i^(r), where a pair
found in N_ij rounds has its score lowered by log N_ij so that it counts once, which makes o_i
exactly the softmax attention over the union P_i of the rounds' sets (eq 98). Memory is
O(rounds * n * m), never n x n.
"""
from __future__ import annotations

import numpy as np

from .. import checks, cookbook
from ..autograd import Generator, Tensor
from ..autograd import random as mt_random
from ..nn.transformer import FullAttention
from .grouped import grouped_attention, merge_attentions, self_attention_inputs, ungroup

__all__ = ["LSHAttention", "SELF_PENALTY", "restrict_pairs"]

SELF_PENALTY = 1e5
"""Subtracted from a query's score with itself: it gets no weight unless it is its only key (the
value the Reformer's implementations use)."""


def restrict_pairs(found, causal, key_mask):
    """The pairs an LSH core attends among the bool (batch, heads, time, time) pairs its chunks
    ``found``: earlier keys only when ``causal``, real keys only (``key_mask`` (batch, time)),
    and no query with itself unless it has no other key."""
    time = found.shape[-1]
    allowed = found.copy()
    if causal:
        allowed &= np.tril(np.ones((time, time), dtype=bool))
    if key_mask is not None:
        allowed &= np.asarray(key_mask, dtype=bool)[:, None, None, :]
    itself = np.eye(time, dtype=bool)
    others = (allowed & ~itself).any(axis=-1, keepdims=True)
    return allowed & ~(itself & others)


def _shared_keys(q):
    """The shared-QK keys k_j = q_j / |q_j| (Kitaev et al., section 3)."""
    return q / (q * q).sum(axis=-1, keepdims=True).sqrt()


@cookbook.equation(96, 97, 99)
class LSHAttention(FullAttention):
    """Shared-QK LSH attention (eq 96-103): ``num_buckets`` buckets (even, or 1), chunks of
    ``chunk_length`` (the paper's m; it must divide the sequence length), ``num_rounds`` hashing
    rounds.

    The rotations are drawn at every call from ``generator`` (the default generator when None),
    or, with ``seed``, are the same at every call (HuggingFace's ``hash_seed``): ``rotations``
    gives them. The core reads only ``q`` (and ``v``): keys are the normalised queries, so
    ``MultiHeadAttention``'s key projection goes unused. ``need_weights`` materialises the
    (q_time, k_time) weights from ``pairs`` (for pictures and tests); a general ``mask`` or
    ``bias`` is an error (it would need the n x n scores).
    """

    def __init__(self, num_buckets: int, chunk_length: int, num_rounds: int = 1, *,
                 seed: int | None = None, generator: Generator | None = None,
                 dropout: float = 0.0) -> None:
        super().__init__(dropout)
        name = "LSHAttention"
        self.num_buckets = checks.positive_int(num_buckets, "num_buckets", name)
        if num_buckets > 1 and num_buckets % 2:
            raise ValueError(f"{name}: num_buckets must be even (h(x) = argmax([xR; -xR]) makes "
                             f"2 buckets per rotation column) or 1, got {num_buckets}")
        self.chunk_length = checks.positive_int(chunk_length, "chunk_length", name)
        self.num_rounds = checks.positive_int(num_rounds, "num_rounds", name)
        self.seed, self.generator = seed, generator

    def rotations(self, head_dim: int) -> np.ndarray:
        """(rounds, head_dim, num_buckets / 2) random rotations; round r's are the same for any
        ``num_rounds`` >= r + 1 given the same ``seed``."""
        rng = np.random.default_rng(self.seed) if self.seed is not None else mt_random.rng(
            self.generator)
        columns = max(1, self.num_buckets // 2)
        return np.stack([rng.standard_normal((head_dim, columns))
                         for _ in range(self.num_rounds)])

    @cookbook.equation(98)
    def hash(self, x, rotations, *, xp=np):
        """h^(r)(x) = argmax([x R_r; -x R_r]) for every round: (batch, heads, rounds, time)
        bucket ids from ``x`` (batch, heads, time, d) and ``rotations``, arrays of the array
        module ``xp`` (a backend's ``xp``: on the CuPy backend they stay on the GPU). The
        rotations are taken in the precision of ``x``, as HuggingFace hashes in the model's
        dtype (float32 products instead of an upcast to float64: 8 against 40 ms at 16k)."""
        batch, heads, time, d = x.shape
        if self.num_buckets == 1:
            return xp.zeros((batch, heads, self.num_rounds, time), dtype=np.int64)
        # every round's rotation of every row in one product: (R, B * H * T, columns)
        rotated = xp.matmul(x.reshape(1, -1, d), rotations.astype(x.dtype, copy=False))
        # the argmax over [xR; -xR] without building it: the first half wins ties, as argmax's
        # first maximum does
        top, bottom = rotated.argmax(axis=-1), rotated.argmin(axis=-1)
        buckets = xp.where(rotated.max(axis=-1) >= -rotated.min(axis=-1), top,
                           bottom + rotated.shape[-1])
        return xp.moveaxis(buckets.reshape(-1, batch, heads, time), 0, 2)

    def chunks(self, buckets, *, xp=np):
        """Sort by (bucket, position) and chunk (eq 99): the sorted order (batch, heads, rounds,
        time) and each position's chunk (batch, heads, rounds, time), arrays of ``xp`` as
        ``buckets`` is."""
        time = buckets.shape[-1]
        order = xp.argsort(buckets * time + xp.arange(time), axis=-1, kind="stable")
        sorted_place = xp.argsort(order, axis=-1, kind="stable")
        return order, sorted_place // self.chunk_length

    def pairs(self, q: Tensor | np.ndarray, causal: bool = False,
              rotations: np.ndarray | None = None, key_mask: np.ndarray | None = None
              ) -> np.ndarray:
        """The attended pairs P_i as a bool (batch, heads, time, time) array (n x n: for
        pictures and tests), the union over rounds (eq 98) of same bucket within a chunk and the
        previous one (eq 99), causal if asked, real keys only (``key_mask`` (batch, time)), and
        no query with itself unless it has no other key."""
        x = q.numpy() if isinstance(q, Tensor) else np.asarray(q)
        rotations = self.rotations(x.shape[-1]) if rotations is None else rotations
        buckets = self.hash(x, rotations)
        _, chunk = self.chunks(buckets)
        same = buckets[..., :, None] == buckets[..., None, :]
        near = (chunk[..., None, :] <= chunk[..., :, None]) & (
            chunk[..., None, :] >= chunk[..., :, None] - 1)
        return restrict_pairs((same & near).any(axis=2), causal, key_mask)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        name = "LSHAttention"
        if mask is not None or bias is not None:
            raise ValueError(f"{name}: a general mask or score bias needs the n x n scores that "
                             "LSH attention never forms; use causal and key_mask")
        q, _, v, key_mask = self_attention_inputs(q, k, v, key_mask, name)
        time = q.shape[2]
        if time % self.chunk_length:
            raise ValueError(f"{name}: the sequence length {time} is not a multiple of "
                             f"chunk_length={self.chunk_length}; pad the sequence (with a "
                             "key_mask) or pick a chunk length that divides it")
        rotations = self.rotations(q.shape[-1])
        if need_weights:
            allowed = self.pairs(q.numpy(), causal, rotations,
                                 None if key_mask is None else q.backend.to_numpy(key_mask))
            allowed = q.backend.asarray(allowed)
            return super().forward(q, _shared_keys(q), v, mask=allowed, key_mask=key_mask,
                                   need_weights=True)
        return self.combine_rounds(self.rounds(q, v, rotations, causal, key_mask)), None

    def rounds(self, q: Tensor, v: Tensor, rotations, causal: bool,
               key_mask) -> list[tuple[Tensor, Tensor]]:
        """[(o^(r), z(i, P_i^(r))) for every round r] (eq 103) of self-attention over ``q``,
        ``v`` (batch, heads, time, d), the sequence a multiple of ``chunk_length``: hash with
        ``rotations``, sort, chunk and attend each round; ``forward`` combines them. The hashing,
        sorting and masks use the backend's array module (on the CuPy backend, the GPU)."""
        keys = _shared_keys(q)
        xp = q.backend.xp
        buckets = self.hash(q.data, xp.asarray(rotations), xp=xp)
        order, chunk = self.chunks(buckets, xp=xp)
        return [self.attend_round(q, keys, v, r, buckets, order, chunk, causal, key_mask)
                for r in range(self.num_rounds)]

    @cookbook.equation(103)
    def attend_round(self, q: Tensor, keys: Tensor, v: Tensor, r: int, buckets, order, chunk,
                     causal: bool, key_mask) -> tuple[Tensor, Tensor]:
        """o_i^(r) and z(i, P_i^(r)) of round ``r`` (eq 103), position by position: each chunk's
        queries against the keys of the chunk and the previous one, same bucket only, pairs
        found in N_ij rounds lowered by log N_ij (eq 101)."""
        batch, heads, time, _ = q.shape
        m = self.chunk_length
        xp = q.backend.xp
        queries = order[:, :, r].reshape(batch, heads, time // m, m)
        previous = xp.roll(queries, 1, axis=2)
        key_index = xp.concatenate([previous, queries], axis=-1)        # (B, H, chunks, 2m)
        first_chunk = xp.arange(time // m)[:, None] == 0               # has no previous chunk
        has_previous = xp.concatenate([xp.broadcast_to(~first_chunk, (time // m, m)),
                                       xp.ones((time // m, m), dtype=bool)], axis=-1)
        allowed, score_bias = q.backend.lsh_round_masks(buckets, chunk, queries, key_index,
                                                        has_previous, r, causal, SELF_PENALTY,
                                                        q.dtype)
        # the masks stay in the backend's arrays; grouped_attention and ungroup take NumPy
        # index arrays (positions only: O(n) integers, no copy on the NumPy backends)
        queries, key_index = q.backend.to_numpy(queries), q.backend.to_numpy(key_index)
        out, lse = grouped_attention(q, keys, v, queries, key_index, allowed,
                                     scale=1.0 / float(np.sqrt(q.shape[-1])), key_mask=key_mask,
                                     bias=score_bias, dropout=self.dropout)
        return ungroup(out, queries, time), ungroup(lse[..., None], queries, time)[..., 0]

    @cookbook.equation(100, 101, 102)
    def combine_rounds(self, rounds: list[tuple[Tensor, Tensor]]) -> Tensor:
        """o_i = sum_r exp(z(i, P_i^(r)) - z(i, P_i)) o_i^(r) (eq 100-102)."""
        return merge_attentions(rounds)[0]

    def extra_repr(self):
        return (f"num_buckets={self.num_buckets}, chunk_length={self.chunk_length}, "
                f"num_rounds={self.num_rounds}, seed={self.seed}")
