"""Hypothesis strategies shared by every test file: shapes, arrays in safe domains, layouts,
indices, masks and token batches.

Array strategies take a ``shape`` (or draw one) and give float64 NumPy arrays with bounded
magnitude, so that forward values and gradients stay comparable at tight tolerances. The domain
variants keep inputs away from the places where a function or its derivative is undefined or
kinked:

* ``positive_arrays``: log, sqrt, rsqrt, the base of ``**``;
* ``nonzero_arrays``: denominators;
* ``distinct_arrays``: max/min/sort (no ties), abs/relu (no zeros), std (no constant rows). Values
  lie on a grid with a known spacing, so two arrays drawn with different ``offset`` never tie
  (``maximum(a, b)``).

``noncontiguous`` and ``maybe_noncontiguous`` turn any of them into transposed or strided views of
a bigger buffer with the same values: layout must never change a result.

Typical use::

    from minitorch_nlp.testing import strategies as S

    @given(S.arrays(S.shapes(max_dims=2)))
    def test_something(x): ...

    @given(st.data())
    def test_other(data):
        shape_a, shape_b = data.draw(S.broadcastable_shapes(2))
        a = data.draw(S.maybe_noncontiguous(S.arrays(shape_a)))
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

MAX_SIDE = 4
MAX_DIMS = 3


# ---- shapes --------------------------------------------------------------------------------------
def shapes(min_dims=0, max_dims=MAX_DIMS, min_side=1, max_side=MAX_SIDE):
    """Small shapes, including 0-d ``()`` (when ``min_dims == 0``) and length-1 axes."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=MAX_DIMS, max_side=MAX_SIDE):
    """A tuple of ``num_shapes`` shapes that broadcast together (pairs: 2, triples: 3)."""
    return hnp.mutually_broadcastable_shapes(
        num_shapes=num_shapes, min_dims=min_dims, max_dims=max_dims, min_side=1,
        max_side=max_side).map(lambda b: b.input_shapes)


@st.composite
def broadcast_targets(draw, shape, max_extra_dims=2, max_side=3):
    """A shape that ``shape`` broadcasts *to* (new leading axes; length-1 axes stretched)."""
    extra = draw(st.lists(st.integers(1, max_side), max_size=max_extra_dims))
    stretched = [draw(st.integers(1, max_side)) if n == 1 else n for n in shape]
    return tuple(extra) + tuple(stretched)


def axes(ndim, allow_none=True, allow_tuple=True):
    """An ``axis=`` argument valid for ``ndim`` dimensions: None, an int (negative too) or a tuple
    of distinct ints."""
    options = []
    if allow_none:
        options.append(st.none())
    if ndim > 0:
        options.append(st.integers(-ndim, ndim - 1))
        if allow_tuple:
            options.append(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim,
                                    unique=True).map(tuple))
    return st.one_of(options)


def axis(ndim):
    """One axis (an int, possibly negative) of an ``ndim``-dimensional array (``ndim >= 1``)."""
    return st.integers(-ndim, ndim - 1)


# ---- arrays --------------------------------------------------------------------------------------
TINY = 1e-8


def finite_floats(low=-3.0, high=3.0, width=64):
    """Floats in [low, high]; magnitudes below ``TINY`` become 0 (when 0 is in range), so that
    squares and products of a few values never underflow to denormals."""
    if width == 32:
        low, high = float(np.float32(low)), float(np.float32(high))
    floats = st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False,
                       width=width)
    if low <= 0.0 <= high:
        return floats.map(lambda v: 0.0 if abs(v) < TINY else v)
    return floats.filter(lambda v: abs(v) >= TINY)


def _shape_strategy(shape):
    if shape is None:
        return shapes()
    return st.just(tuple(shape)) if not isinstance(shape, st.SearchStrategy) else shape


def arrays(shape=None, low=-3.0, high=3.0, dtype=np.float64):
    """Finite arrays with values in [low, high] (float64 unless ``dtype``)."""
    dtype = np.dtype(dtype)
    return hnp.arrays(dtype, _shape_strategy(shape),
                      elements=finite_floats(low, high, width=dtype.itemsize * 8))


def positive_arrays(shape=None, low=0.1, high=3.0):
    """Arrays in [low, high] with ``low > 0``: inputs of log, sqrt, rsqrt, powers."""
    if low <= 0:
        raise ValueError("positive_arrays: low must be > 0")
    return arrays(shape, low, high)


@st.composite
def nonzero_arrays(draw, shape=None, min_abs=0.5, max_abs=3.0):
    """Arrays with min_abs <= |x| <= max_abs: safe denominators."""
    shape = draw(_shape_strategy(shape))
    magnitude = draw(arrays(shape, min_abs, max_abs))
    negative = draw(hnp.arrays(np.bool_, shape))
    return np.where(negative, -magnitude, magnitude)


@st.composite
def distinct_arrays(draw, shape=None, spacing=0.1, offset=0.0):
    """Pairwise distinct values ``(k + 1/2) * spacing + offset`` for distinct integers k: no ties
    (max, min, sort, topk) and, with ``offset`` 0, no zeros (abs, relu) and no constant rows (std).
    Arrays drawn with offsets that differ by spacing/2 never share a value."""
    shape = draw(_shape_strategy(shape))
    size = int(np.prod(shape, dtype=np.int64))
    bound = max(40, size)
    ks = draw(hnp.arrays(np.int64, shape, elements=st.integers(-bound, bound - 1), unique=True))
    return np.asarray((ks + 0.5) * spacing + offset)


# ---- layouts -------------------------------------------------------------------------------------
LAYOUTS = ("transposed", "strided", "sliced", "reversed")


def relayout(array, layout):
    """The same values as ``array``, laid out as a view that is not C-contiguous (unless it has
    at most one element): a transposed Fortran-order copy, every other element of a bigger
    buffer, an offset slice of a bigger buffer, or a negative-stride view. The unused parts of the
    buffer hold NaN, so reading them shows up."""
    a = np.asarray(array)
    if a.ndim == 0:
        return a
    if layout == "transposed":
        view = np.asfortranarray(a)
    elif layout == "strided":
        big = np.full(tuple(2 * n for n in a.shape), np.nan, dtype=a.dtype)
        view = big[(slice(None, None, 2),) * a.ndim]
    elif layout == "sliced":
        big = np.full(a.shape[:-1] + (a.shape[-1] + 2,), np.nan, dtype=a.dtype)
        view = big[..., 1:-1]
    elif layout == "reversed":
        big = np.full(a.shape, np.nan, dtype=a.dtype)
        view = big[(slice(None, None, -1),) * a.ndim]
    else:
        raise ValueError(f"relayout: unknown layout {layout!r}; choose one of {LAYOUTS}")
    view[...] = a
    if view.flags.c_contiguous and a.size > 1 and layout != "strided":
        return relayout(a, "strided")  # e.g. a 1-D slice, or F order with one long axis
    return view


def noncontiguous(strategy):
    """Arrays from ``strategy``, as non-contiguous views (same values)."""
    return st.tuples(strategy, st.sampled_from(LAYOUTS)).map(lambda p: relayout(*p))


def maybe_noncontiguous(strategy):
    """Arrays from ``strategy``, sometimes contiguous, sometimes a view (same values)."""
    return st.one_of(strategy, noncontiguous(strategy))


def transposed_views(shape=None, low=-3.0, high=3.0):
    """``x.T`` of a contiguous array: an array of ``shape`` with reversed strides."""
    return _shape_strategy(shape).flatmap(
        lambda s: arrays(s[::-1], low, high).map(lambda a: a.T))


# ---- indices and masks ---------------------------------------------------------------------------
def index_arrays(size, shape=None, allow_negative=True, max_len=6):
    """Integer index arrays valid for an axis of ``size`` (values repeat; negatives count from the
    end when ``allow_negative``). ``shape`` defaults to a 1-D length 1..max_len."""
    if size <= 0:
        raise ValueError("index_arrays: the axis must have at least one element")
    low = -size if allow_negative else 0
    shape = st.integers(1, max_len).map(lambda n: (n,)) if shape is None else _shape_strategy(shape)
    return hnp.arrays(np.int64, shape, elements=st.integers(low, size - 1))


@st.composite
def index_arrays_for(draw, shape, axis=0, allow_negative=True):
    """An integer array ``idx`` with ``idx.shape == shape`` except along ``axis`` (any length),
    with values valid for that axis: the index of ``take_along_axis`` / ``gather`` /
    ``scatter_add``."""
    shape = tuple(shape)
    n = shape[axis]
    length = draw(st.integers(1, MAX_SIDE))
    index_shape = shape[:axis] + (length,) + shape[axis + 1:]
    return draw(index_arrays(n, index_shape, allow_negative=allow_negative))


@st.composite
def score_biases(draw, scores_shape, dtype=np.float64):
    """An additive attention score bias broadcastable to ``scores_shape`` (batch, heads, q_time,
    k_time): each axis full or 1, leading axes sometimes left out; sometimes with -inf entries (a
    mask given as a bias) and a query row that is -inf throughout (a query that sees no key);
    sometimes a non-contiguous view."""
    shape = tuple(n if draw(st.booleans()) else 1 for n in scores_shape)
    shape = shape[draw(st.integers(0, len(shape) - 1)):]
    bias = draw(arrays(shape, dtype=dtype))
    if draw(st.booleans()):
        bias[draw(hnp.arrays(np.bool_, shape))] = -np.inf
        rows = bias.reshape(-1, shape[-1])
        rows[draw(st.integers(0, rows.shape[0] - 1))] = -np.inf
    layout = draw(st.sampled_from((None,) + LAYOUTS))
    return bias if layout is None else relayout(bias, layout)


@st.composite
def bool_masks(draw, shape=None, all_false_row=None):
    """Boolean arrays of ``shape``; some (or, with ``all_false_row=True``, always one) row along
    the first axis is all False, the case that breaks naive masked softmax and boolean indexing."""
    shape = draw(_shape_strategy(shape))
    mask = draw(hnp.arrays(np.bool_, shape))
    if all_false_row is None:
        all_false_row = len(shape) > 0 and draw(st.booleans())
    if all_false_row and len(shape) > 0:
        mask[draw(st.integers(0, shape[0] - 1))] = False
    return mask


class TokenBatch(NamedTuple):
    ids: np.ndarray      # (batch, length) int64; ``pad_id`` after each sequence's end
    lengths: np.ndarray  # (batch,) int64, each in [min_len, length]
    mask: np.ndarray     # (batch, length) bool, True on real tokens (the padding mask)


@st.composite
def token_batches(draw, vocab_size=20, max_batch=4, max_len=8, min_len=1, pad_id=0):
    """Right-padded batches of token ids with their lengths and padding mask. Real tokens are
    drawn from [0, vocab_size) without ``pad_id``; at least one row has the full length."""
    if vocab_size < 2:
        raise ValueError("token_batches: need a vocabulary of at least 2 (one id is padding)")
    batch = draw(st.integers(1, max_batch))
    length = draw(st.integers(max(min_len, 1), max_len))
    lengths = np.array(draw(st.lists(st.integers(min_len, length), min_size=batch,
                                     max_size=batch)), dtype=np.int64)
    lengths[draw(st.integers(0, batch - 1))] = length
    real = st.integers(0, vocab_size - 1).filter(lambda t: t != pad_id)
    ids = draw(hnp.arrays(np.int64, (batch, length), elements=real))
    mask = np.arange(length)[None, :] < lengths[:, None]
    ids = np.where(mask, ids, pad_id)
    return TokenBatch(ids, lengths, mask)


def seeds():
    """A seed for ``numpy.random.default_rng``: cheap random cotangents and directions that are
    still reproduced by hypothesis."""
    return st.integers(0, 2**32 - 1)


# ---- stress: logits, scores and masking values at the sizes real models see ---------------------
MASKING_VALUES = (-1e4, -1e9, -np.inf)
"""The values models write into masked logits and scores: BERT's -1e4, -1e9, and -inf."""

STRESS_KINDS = ("plain", "shifted", "large", "tiny")
"""How ``stress_arrays`` draws: values in [low, high]; the same shifted by ±1e4 (``large``: a
softmax or a log-sum-exp without the max subtraction overflows); scaled up to about ±1e4 (near
one-hot softmaxes, exp underflows); scaled down by 1e-6 (near uniform, differences below
float32's resolution)."""


@st.composite
def stress_arrays(draw, shape=None, low=-3.0, high=3.0, kinds=STRESS_KINDS, large=1e4):
    """Arrays of ``shape`` drawn as one of ``kinds`` (see ``STRESS_KINDS``), ``"plain"`` more
    often than the others: the small values that keep a counter-example readable stay common.
    ``large`` is the magnitude of the ``"large"`` kind (100 for queries and keys makes scores of
    about 1e4) and of the ``"shifted"`` kind's shift."""
    base = draw(arrays(shape, low, high))
    kind = draw(st.sampled_from(("plain",) + tuple(kinds)))
    if kind == "shifted":
        return base + draw(st.sampled_from((large, -large)))
    if kind == "large":
        return base * (large / max(abs(low), abs(high)))
    if kind == "tiny":
        return base * 1e-6
    return base


@st.composite
def masked_logits(draw, shape, low=-3.0, high=3.0, all_masked_rows=False):
    """``stress_arrays`` logits of ``shape`` with some entries replaced by a masking value (-1e4,
    -1e9 or -inf, one per example), leaving at least one entry of each row along the last axis
    unmasked; with ``all_masked_rows``, sometimes one row masked throughout as well. Also returns
    the boolean array of what is masked: ``(logits, masked)``."""
    logits = draw(stress_arrays(shape, low, high))
    masked = draw(hnp.arrays(np.bool_, shape)) if draw(st.booleans()) else np.zeros(shape, bool)
    rows = masked.reshape(-1, shape[-1])
    rows[:, draw(st.integers(0, shape[-1] - 1))] = False
    if all_masked_rows and rows.shape[0] and draw(st.booleans()):
        rows[draw(st.integers(0, rows.shape[0] - 1))] = True
    value = draw(st.sampled_from(MASKING_VALUES))
    return np.where(masked, value, logits), masked


# ---- stress: magnitudes and zero probabilities ---------------------------------------------------
# Models see logits of +-1e4 and log-probabilities of -inf (a document or token the model rules
# out); a softmax or log-sum-exp without its max subtraction, or a product of probabilities taken
# outside log space, passes on values in [-3, 3] and fails here.
MAGNITUDES = (1.0, 1e-4, 1e2, 1e4)
"""Scales for inputs whose result is scale-sensitive: near-uniform (1e-4) to saturated (1e4)."""


def magnitudes(values=MAGNITUDES):
    """One scale from ``values`` (1.0 first, so that shrinking ends on the plain case)."""
    return st.sampled_from(values)


@st.composite
def scaled_arrays(draw, shape, low=-3.0, high=3.0, scales=MAGNITUDES):
    """``arrays(shape, low, high)`` times a scale drawn from ``scales``: scores and logits of
    order 1e4 as well as nearly equal ones."""
    return draw(arrays(shape, low, high)) * draw(magnitudes(scales))


def score_offsets():
    """A shift added to a whole row of scores, to which a softmax is blind: 0, or +-1e5 (the
    exponential overflows without the max subtraction; a masking value of -1e4 then beats the
    real scores)."""
    return st.sampled_from((0.0, 1e5, -1e5))


def masking_values():
    """One of ``MASKING_VALUES``, the additive values that mask a score out in real models."""
    return st.sampled_from(MASKING_VALUES)


@st.composite
def log_probability_arrays(draw, shape, low=-6.0, zero_probabilities=True, keep_axis=-1):
    """Log-probabilities (entries in [low, 0]); sometimes some are -1e4 (vanishing) and, with
    ``zero_probabilities``, some -inf (ruled out), but never every entry along ``keep_axis`` of
    any row, so that a log of their sum stays finite."""
    values = draw(arrays(shape, low, 0.0))
    kind = draw(st.sampled_from(("plain", "vanishing", "zero")))
    if kind == "plain" or values.size == 0:
        return values
    fill = -np.inf if kind == "zero" and zero_probabilities else -1e4
    values[draw(hnp.arrays(np.bool_, shape))] = fill
    kept = np.ascontiguousarray(np.moveaxis(values, keep_axis, -1))
    for row in kept.reshape(-1, kept.shape[-1]):
        if not np.isfinite(row).any():
            row[draw(st.integers(0, len(row) - 1))] = draw(st.floats(low, 0.0))
    return np.moveaxis(kept, -1, keep_axis)
