"""Attention masks: which keys each query may attend, for every pattern of the surveyed models.

Convention (the ``mask=`` of ``F.scaled_dot_product_attention``): a mask is a NumPy bool array,
**True where query i may attend key j**, broadcastable to ``(batch, heads, q_time, k_time)``.

* Patterns that depend only on the lengths are ``(q_time, k_time)``: they broadcast over batch
  and heads.
* Patterns that differ per sequence are ``(batch, 1, q_time, k_time)`` (padding is
  ``(batch, 1, 1, k_time)``: it only depends on the key).
* Factorised Sparse Transformer patterns (``factorized=True``) are ``(2, q_time, k_time)``, one
  pattern per head of a two-head attention.

A *key mask* ``(batch, k_time)``, True for real tokens and False for padding, is what the
``key_mask=`` arguments take; ``padding_mask`` turns one (or the lengths) into the 4-D form.
``combine`` intersects masks, ``to_bias`` turns one into an additive 0 / -inf score bias.

In every formula below i is the query position and j the key position, both counted from 0.
"""
from __future__ import annotations

import functools
from collections import namedtuple

import numpy as np

from .. import checks, cookbook
from ..autograd import Generator, dtypes
from ..autograd import random as mt_random

__all__ = ["PermutationMasks", "block_sparse_layout", "block_sparse_mask", "bucket_mask",
           "causal_mask", "combine", "fixed_mask", "global_mask", "padding_mask",
           "permutation_mask", "prefix_lm_mask", "sliding_window_mask", "strided_mask", "to_bias"]

PermutationMasks = namedtuple("PermutationMasks", ["content", "query"])
PermutationMasks.__doc__ = """XLNet's two-stream masks: ``content`` (h, position z_t sees
z_<=t) and ``query`` (g, position z_t sees z_<t only, so it cannot read the token it predicts)."""


# ---- input checks ------------------------------------------------------------------------------
def _int_array(builder, name, value, ndims):
    """``value`` as an int64 array with one of ``ndims`` dimensions."""
    array = np.asarray(value)
    if array.size == 0 and array.dtype.kind == "f":
        array = array.astype(np.int64)  # np.asarray([]) is float64
    if array.dtype.kind not in "iu" or array.ndim not in ndims:
        wanted = " or ".join(f"{n}-D" for n in ndims)
        raise ValueError(f"{builder}: {name} must be a {wanted} array of ints, got "
                         f"{array.dtype} of shape {array.shape}")
    return array.astype(np.int64)


def _check_range(builder, name, array, low, high, why):
    """Every entry of ``array`` in [low, high]."""
    bad = array[(array < low) | (array > high)]
    if bad.size:
        raise ValueError(f"{builder}: {name} must lie in [{low}, {high}] ({why}), got "
                         f"{bad.flat[0]}")


def _offsets(q_time, k_time):
    """j - i for every (query i, key j), queries aligned with the last keys."""
    return np.arange(k_time)[None, :] - np.arange(q_time)[:, None] - (k_time - q_time)


def _positions(time):
    """(i, j) grids of query and key positions, for self-attention over ``time`` positions."""
    return np.arange(time)[:, None], np.arange(time)[None, :]


# ---- the builders ------------------------------------------------------------------------------
def causal_mask(q_time: int, k_time: int | None = None) -> np.ndarray:
    """Autoregressive (decoder) masking, Vaswani et al. (2017), section 3.2.3: a position never
    sees the future.

    allowed[i, j] = j <= i + (k_time - q_time)

    With ``k_time`` > ``q_time`` the queries are the *last* ``q_time`` positions, as when decoding
    with a key/value cache: the cached keys are all in the past. Shape ``(q_time, k_time)``."""
    q_time = checks.int_at_least(q_time, 1, "q_time", "causal_mask")
    k_time = q_time if k_time is None else checks.int_at_least(k_time, 1, "k_time", "causal_mask")
    if k_time < q_time:
        raise ValueError(f"causal_mask: k_time {k_time} < q_time {q_time}; the queries are the "
                         "last k_time positions, so there cannot be more of them than keys")
    return _offsets(q_time, k_time) <= 0


def padding_mask(lengths: np.ndarray, time: int | None = None) -> np.ndarray:
    """Padding: a key that is padding is never attended (Vaswani et al., 2017; BERT's
    ``attention_mask``).

    allowed[b, :, :, j] = j < lengths[b]

    ``lengths`` is one int per sequence (``time`` defaults to the longest), or a key mask
    ``(batch, k_time)``, True for real tokens. Shape ``(batch, 1, 1, k_time)``."""
    array = np.asarray(lengths)
    if array.dtype.kind == "b":
        if array.ndim != 2:
            raise ValueError(f"padding_mask: a key mask must be (batch, k_time), got shape "
                             f"{array.shape}")
        if time is not None and time != array.shape[1]:
            raise ValueError(f"padding_mask: time {time!r} differs from the key mask's k_time "
                             f"{array.shape[1]}; leave time out")
        return array[:, None, None, :].copy()
    array = _int_array("padding_mask", "lengths", array, (1,))
    if array.size == 0:
        raise ValueError("padding_mask: lengths is empty; give one length per sequence")
    time = int(array.max()) if time is None else time
    time = checks.int_at_least(time, 1, "time", "padding_mask")
    _check_range("padding_mask", "lengths", array, 0, time, f"time is {time}")
    return (np.arange(time)[None, :] < array[:, None])[:, None, None, :]


def prefix_lm_mask(prefix_lengths: int | np.ndarray, time: int) -> np.ndarray:
    """Prefix language model (UniLM, Dong et al., 2019, "seq2seq" mask; T5, Raffel et al., 2020,
    figure 3): the prefix is read bidirectionally, the rest is generated left to right.

    allowed[i, j] = j < prefix  or  j <= i

    ``prefix_lengths`` is one int for every sequence (shape ``(time, time)``) or one per
    sequence (shape ``(batch, 1, time, time)``). Prefix 0 is the causal mask, prefix ``time``
    full attention."""
    time = checks.int_at_least(time, 1, "time", "prefix_lm_mask")
    prefix = _int_array("prefix_lm_mask", "prefix_lengths", prefix_lengths, (0, 1))
    _check_range("prefix_lm_mask", "prefix_lengths", prefix, 0, time, f"time is {time}")
    i, j = _positions(time)
    allowed = (j < prefix[..., None, None]) | (j <= i)
    return allowed if prefix.ndim == 0 else allowed[:, None]


def permutation_mask(order: np.ndarray) -> PermutationMasks:
    """XLNet's permutation language model (Yang et al., 2019, section 2.3; the survey's eq 27):
    tokens are predicted in a factorisation order z, a permutation of the positions, and each
    position attends only the positions that come before it in z.

    With rank[j] = t where z_t = j (the step at which position j is predicted):

    content[i, j] = rank[j] <= rank[i]     (h_{z_t} sees x_{z_<=t}, its own token included)
    query[i, j]   = rank[j] <  rank[i]     (g_{z_t} sees x_{z_<t}: not the token it predicts)

    ``order`` is one permutation of ``range(time)`` (masks ``(time, time)``) or one per sequence
    ``(batch, time)`` (masks ``(batch, 1, time, time)``). The order ``0, 1, ..., time-1`` gives
    the causal mask as the content stream. Returns ``PermutationMasks(content, query)``."""
    order = _int_array("permutation_mask", "order", order, (1, 2))
    time = order.shape[-1]
    if time == 0:
        raise ValueError("permutation_mask: order is empty; give a permutation of range(time)")
    not_permutations = np.flatnonzero(
        (np.sort(order.reshape(-1, time), axis=-1) != np.arange(time)).any(axis=-1))
    if not_permutations.size:
        row = order.reshape(-1, time)[not_permutations[0]]
        raise ValueError(f"permutation_mask: each order must be a permutation of range({time}) "
                         f"(every position once), got {row.tolist()}")
    rank = np.argsort(order, axis=-1)
    content = rank[..., None, :] <= rank[..., :, None]
    query = rank[..., None, :] < rank[..., :, None]
    if order.ndim == 2:
        content, query = content[:, None], query[:, None]
    return PermutationMasks(content, query)


def sliding_window_mask(time: int, window: int, dilation: int = 1,
                        causal: bool = False) -> np.ndarray:
    """Sliding-window (local) attention, Longformer (Beltagy et al., 2020, section 3.1), with
    the dilated variant: query i sees keys i + o * dilation for -window <= o <= window (o <= 0
    when ``causal``), the pattern of ``F.banded_attention``.

    allowed[i, j] = (j - i) mod dilation = 0  and  |j - i| <= window * dilation
                    (and j <= i when causal)

    ``window`` 0 leaves only the diagonal. Shape ``(time, time)``."""
    time = checks.int_at_least(time, 1, "time", "sliding_window_mask")
    window = checks.int_at_least(window, 0, "window", "sliding_window_mask")
    dilation = checks.int_at_least(dilation, 1, "dilation", "sliding_window_mask")
    offset = _offsets(time, time)
    allowed = (offset % dilation == 0) & (np.abs(offset) <= window * dilation)
    return allowed & (offset <= 0) if causal else allowed


def global_mask(time: int, global_positions: np.ndarray, window: int = 0,
                dilation: int = 1) -> np.ndarray:
    """Longformer's global attention (Beltagy et al., 2020, section 3.1; ETC's global-local
    attention, Ainslie et al., 2020): a few chosen positions (a [CLS] token, the question) attend
    every position and are attended by every position; the others attend a sliding window.

    allowed[i, j] = i in G  or  j in G  or  sliding_window(window, dilation)[i, j]

    Shape ``(time, time)``."""
    time = checks.int_at_least(time, 1, "time", "global_mask")
    positions = _int_array("global_mask", "global_positions", global_positions, (1,))
    _check_range("global_mask", "global_positions", positions, 0, time - 1, f"time is {time}")
    is_global = np.zeros(time, dtype=bool)
    is_global[positions] = True
    local = sliding_window_mask(time, window, dilation)
    return local | is_global[:, None] | is_global[None, :]


def block_sparse_mask(time: int, block: int, *, num_window_blocks: int = 3,
                      global_blocks: tuple[int, ...] = (0,), num_random_blocks: int = 0,
                      generator: Generator | None = None) -> np.ndarray:
    """BigBird's block-sparse attention (Zaheer et al., 2020, section 2 and appendix D): the
    sequence is cut into blocks of ``block`` positions and attention is decided per block pair.

    With I = i // block and J = j // block the query and key blocks, w = num_window_blocks:

    allowed[i, j] = |I - J| <= (w - 1) / 2        (window: each block and its neighbours)
                    or I in G  or  J in G          (global blocks: attend and attended by all)
                    or J in R(I)                   (random: r further key blocks per query block)

    R(I) holds ``num_random_blocks`` key blocks drawn without replacement, for each non-global
    query block, among those the window and global parts leave out (all of them if fewer are
    left), from ``generator`` (an ``mt.Generator``; the default generator when None).
    ``global_blocks`` are block indices (negative ones count from the end: ``(0, -1)`` makes the
    first and last blocks global, as BigBird-ITC). Shape ``(time, time)``; ``block_sparse_layout``
    gives the (blocks, blocks) pattern itself."""
    builder = "block_sparse_mask"
    time = checks.int_at_least(time, 1, "time", builder)
    block = checks.int_at_least(block, 1, "block", builder)
    if time % block:
        raise ValueError(f"{builder}: time {time} is not a multiple of block {block}; pad the "
                         "sequence to a multiple of the block size")
    layout, _ = block_sparse_layout(time // block, num_window_blocks=num_window_blocks,
                                    global_blocks=global_blocks,
                                    num_random_blocks=num_random_blocks, generator=generator,
                                    builder=builder)
    return layout.repeat(block, axis=0).repeat(block, axis=1)


def block_sparse_layout(blocks: int, *, num_window_blocks: int = 3,
                        global_blocks: tuple[int, ...] = (0,), num_random_blocks: int = 0,
                        generator: Generator | None = None, builder: str = "block_sparse_layout"
                        ) -> tuple[np.ndarray, np.ndarray]:
    """BigBird's pattern over blocks (see ``block_sparse_mask``): a (blocks, blocks) bool array,
    True where query block I attends key block J, and the (blocks,) bool array of global
    blocks."""
    blocks = checks.int_at_least(blocks, 1, "blocks", builder)
    window = checks.int_at_least(num_window_blocks, 1, "num_window_blocks", builder)
    if window % 2 == 0:
        raise ValueError(f"{builder}: num_window_blocks must be odd (a block and as many "
                         f"neighbours on each side), got {window}")
    num_random = checks.int_at_least(num_random_blocks, 0, "num_random_blocks", builder)
    chosen = _int_array(builder, "global_blocks", global_blocks, (1,))
    _check_range(builder, "global_blocks", chosen, -blocks, blocks - 1,
                 f"there are {blocks} blocks")
    is_global = np.zeros(blocks, dtype=bool)
    is_global[chosen] = True
    index = np.arange(blocks)
    allowed = np.abs(index[:, None] - index[None, :]) <= window // 2
    allowed |= is_global[:, None] | is_global[None, :]
    if num_random:
        rng = mt_random.rng(generator)
        for row in np.flatnonzero(~is_global):
            left_out = np.flatnonzero(~allowed[row])
            picked = rng.choice(left_out, size=min(num_random, left_out.size), replace=False)
            allowed[row, picked] = True
    return allowed, is_global


def _factorized(local, other, factorized):
    return np.stack([local, other]) if factorized else local | other


def strided_mask(time: int, stride: int, *, factorized: bool = False) -> np.ndarray:
    """Strided attention of the Sparse Transformer (Child et al., 2019, section 4.2; the
    survey's section IX-A), causal. Head 1 attends the previous ``stride`` positions, head 2
    every ``stride``-th position before:

    A1[i, j] = max(0, i - stride) <= j <= i
    A2[i, j] = j <= i  and  (i - j) mod stride = 0

    With stride ~ sqrt(time) each query sees O(sqrt(time)) keys. Returns the merged pattern
    A1 | A2, ``(time, time)`` (the survey's eq 94), or with ``factorized=True`` the two stacked,
    ``(2, time, time)``, one per head (eq 95)."""
    time = checks.int_at_least(time, 1, "time", "strided_mask")
    stride = checks.int_at_least(stride, 1, "stride", "strided_mask")
    behind = -_offsets(time, time)  # i - j
    causal = behind >= 0
    return _factorized(causal & (behind <= stride), causal & (behind % stride == 0), factorized)


def fixed_mask(time: int, stride: int, c: int, *, factorized: bool = False) -> np.ndarray:
    """Fixed attention of the Sparse Transformer (Child et al., 2019, section 4.2), causal: the
    sequence is cut into blocks of ``stride``; head 1 attends its own block, head 2 the last
    ``c`` positions of every block (the "summary" cells that carry information forward):

    A1[i, j] = j <= i  and  j // stride = i // stride
    A2[i, j] = j <= i  and  j mod stride >= stride - c

    Returns A1 | A2, ``(time, time)``, or with ``factorized=True`` the two stacked,
    ``(2, time, time)``."""
    time = checks.int_at_least(time, 1, "time", "fixed_mask")
    stride = checks.int_at_least(stride, 1, "stride", "fixed_mask")
    c = checks.int_at_least(c, 1, "c", "fixed_mask")
    if c > stride:
        raise ValueError(f"fixed_mask: c must be at most stride {stride} (c summary positions "
                         f"per block), got {c}")
    i, j = _positions(time)
    causal = j <= i
    return _factorized(causal & (j // stride == i // stride), causal & (j % stride >= stride - c),
                       factorized)


@cookbook.equation(98)
def bucket_mask(buckets: np.ndarray, *, causal: bool = False) -> np.ndarray:
    """Reformer's LSH attention sets (Kitaev et al., 2020, section 3; the survey's eq 96-98):
    a query attends only the keys hashed into its bucket, over one or several hashing rounds.

    P[i, j] = h^(r)(x_i) = h^(r)(x_j) for some round r     (eq 98, the union over rounds)
              (and j <= i when causal, eq 96's P_i)

    ``buckets`` holds the bucket ids ``(batch, time)``, or ``(batch, rounds, time)`` for
    several rounds. Shape ``(batch, 1, time, time)``. (The Reformer also hides a position from
    itself when it has another key; that is the model's choice, not part of the sets.)"""
    buckets = _int_array("bucket_mask", "buckets", buckets, (2, 3))
    if buckets.ndim == 2:
        buckets = buckets[:, None, :]
    if buckets.shape[-1] == 0:
        raise ValueError("bucket_mask: buckets has no positions")
    allowed = (buckets[..., :, None] == buckets[..., None, :]).any(axis=1)
    if causal:
        allowed &= causal_mask(buckets.shape[-1])
    return allowed[:, None]


# ---- combining ---------------------------------------------------------------------------------
def _bool_array(op, value, which):
    array = np.asarray(value)
    if array.dtype.kind != "b":
        raise TypeError(f"{op}: {which} must be a bool array (True = may attend), got "
                        f"{array.dtype}")
    return array


def combine(*masks: np.ndarray) -> np.ndarray:
    """The positions every mask allows: their logical and, broadcast (e.g. a ``(time, time)``
    causal mask with a ``(batch, 1, 1, time)`` padding mask gives ``(batch, 1, time, time)``)."""
    if not masks:
        raise ValueError("combine: give at least one mask")
    arrays = [_bool_array("combine", mask, f"mask {n}") for n, mask in enumerate(masks)]
    try:
        np.broadcast_shapes(*(array.shape for array in arrays))
    except ValueError:
        raise ValueError(f"combine: mask shapes {[array.shape for array in arrays]} do not "
                         "broadcast together") from None
    return functools.reduce(np.logical_and, arrays)


@cookbook.equation(97)
def to_bias(mask: np.ndarray, dtype="float32") -> np.ndarray:
    """The mask as an additive score bias: 0 where allowed, -inf where blocked, so that
    softmax(scores + bias) gives blocked keys no weight. The bias is -m(j, P_i) of the
    Reformer's eq 97 (m = infinity for j outside P_i, 0 inside)."""
    mask = _bool_array("to_bias", mask, "the mask")
    dtype = dtypes.resolve(dtype)
    if not dtypes.is_floating(dtype):
        raise TypeError(f"to_bias: the bias needs a floating dtype, got {dtype}")
    return np.where(mask, 0.0, -np.inf).astype(dtype)
