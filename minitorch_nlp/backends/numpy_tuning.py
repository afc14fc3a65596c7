"""How the NumPy backend's kernels are run fast: threads, cache-sized blocks and BLAS thread counts.

``numpy_backend.py`` holds the maths of each kernel; this module holds the ways of running it that
change only the speed, never the values (the tests check that blocks and threads give what one
whole-array pass on the calling thread gives, bit for bit):

* ``matmul``: a stack of small matrix products on one OpenBLAS thread (``threads.one_blas_thread``);
* ``in_parts`` / ``in_row_blocks``: work cut into consecutive parts, one per Python thread
  (``threads.in_threads``), for kernels made of many small NumPy calls that each use one core;
* ``group_blocks`` and ``BandBlocks``: units of attention taken in blocks whose scores fit in the
  L2 cache, so that a block is still there between the product that writes it and the softmax
  and product that read it;
* ``sum_last_axis``: a row sum through einsum, which NumPy's reduction is several times slower
  than on short rows.

The sizes below were measured on a 2-core machine; each comment gives the figures.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .threads import in_threads, one_blas_thread

# A stack of matrix products each with at most this many multiply-adds runs on one BLAS thread
# (``threads.one_blas_thread``): at 4M a product takes ~0.1 ms on one core, less than a busy
# machine makes a BLAS helper thread wait to be scheduled.
SMALL_PRODUCT = 1 << 22
# Grouped attention takes its (batch, head, group) units in blocks of about this many scores
# (1 MB in float32, an L2 cache), as banded attention takes its blocks of queries
# (``BandBlocks.chunks``): a block's gathered rows and scores stay in the cache between its
# products and its softmax, and the gathered copies are never more than a block's.
GROUP_BLOCK = 1 << 18
# The GELUs run over blocks of rows of about this many elements (``in_row_blocks``), shared
# among the threads. Each block costs every one of its dozen NumPy calls a few microseconds of
# Python, which holds the GIL: bias + tanh-GELU on (2048, 512) float32, forward and backward, took
# 1.44 and 2.51 ms as whole arrays on two threads, 2.21 and 3.48 ms in blocks of 2^14 elements,
# 1.18 and 1.92 at 2^16 and 0.83 and 1.34 at 2^18 (1.33 and 2.15 on one thread, against 1.46 and
# 2.74 whole).
ELEMENTWISE_BLOCK = 1 << 18


def _stack_of_small_products(a, b):
    """Whether ``a @ b`` is several products of at most ``SMALL_PRODUCT`` multiply-adds."""
    if a.ndim < 3 and b.ndim < 3:
        return False
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    stack = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return stack > 1 and m * n * a.shape[-1] <= SMALL_PRODUCT


def matmul(a, b, out=None):
    """``np.matmul(a, b, out=out)``; a stack of small products runs on one BLAS thread, as
    OpenBLAS's helper threads cost more to wake on each small product than they save."""
    if _stack_of_small_products(a, b):
        with one_blas_thread():
            return np.matmul(a, b, out=out)
    return np.matmul(a, b, out=out)


def sum_last_axis(x):
    """``x.sum(axis=-1, keepdims=True)`` through einsum's loop, as NumPy's reduction takes 3-4x
    as long on rows of 32 to 1024 elements, paying a fixed cost per row ((16, 4, 128, 128)
    float32: 290 against 86 us)."""
    return np.einsum("...i->...", x)[..., None]


def in_parts(blocks, threads, run):
    """``run(part)`` for consecutive parts of the list ``blocks``, one part per thread of
    ``threads`` (``threads.in_threads``: a stack of small products runs on one BLAS thread, so
    the blocks' products use more cores only side by side); the results in part order. With one
    thread, one part: ``[run(blocks)]``."""
    if threads == 1 or len(blocks) < 2:
        return [run(blocks)]
    size = -(-len(blocks) // threads)
    parts = [blocks[i:i + size] for i in range(0, len(blocks), size)]
    results = [None] * len(parts)

    def task(i):
        results[i] = run(parts[i])

    in_threads([functools.partial(task, i) for i in range(len(parts))], len(parts))
    return results


def row_blocks(rows, width):
    """Slices of ``rows`` consecutive rows of ``width`` elements, about ``ELEMENTWISE_BLOCK``
    elements each."""
    step = max(1, ELEMENTWISE_BLOCK // max(1, width))
    return [slice(start, start + step) for start in range(0, rows, step)]


def group_blocks(units, per_query, per_key):
    """(first, end) of the blocks of units (groups of one (batch, head) pair) whose scores are
    about ``GROUP_BLOCK`` elements (at least one unit each)."""
    step = max(1, GROUP_BLOCK // (per_query * per_key))
    return [(u, min(units, u + step)) for u in range(0, units, step)]


class BandBlocks:
    """The geometry of banded attention computed in blocks of queries.

    A dilated band is an ordinary band within each residue class of positions modulo the
    dilation (query i sees i + o*dilation, a key of its own class), so the sequence is folded to
    (..., dilation, n / dilation, d) and every class is a band of width ``window`` steps. Each
    class is cut into blocks of ``block`` consecutive queries; the keys a block's band reaches,
    ``window`` before its first query to ``window`` after its last (none after when causal), are
    ``block + span`` consecutive rows, read as a strided view of the zero-padded keys (no copy).
    A block's scores are then one (block, d) x (d, block + span) product; ``mask`` puts -inf
    outside the band, on padding and on masked keys.

    The block trades waste for product size: (block + span) / (span + 1) of the scores computed
    are used, and products of at least 16-64 rows run near a dense GEMM's speed."""

    def __init__(self, n, window, dilation, causal):
        self.n, self.dilation = n, dilation
        self.before, after = window, (0 if causal else window)
        self.span = self.before + after
        self.block = 64 if self.span >= 128 else 32 if self.span >= 16 else 16
        self.steps = -(-n // dilation)                      # positions per residue class
        self.count = -(-self.steps // self.block)           # blocks per residue class
        self.width = self.block + self.span                 # keys per block
        # the padded keys are long enough for every block's window and for the overlap-add
        self.key_rows = (self.count + -(-self.span // self.block)) * self.block

    def _fold(self, x, front, rows):
        """(..., n, d) -> (..., dilation, rows, d): residue class c's positions c, c + dilation,
        ... at rows ``front`` onwards, zeros elsewhere."""
        out = np.zeros(x.shape[:-2] + (self.dilation, rows, x.shape[-1]), x.dtype)
        by_step = out[..., front:front + self.steps, :].swapaxes(-2, -3)   # (..., steps, dil, d)
        whole, rest = divmod(self.n, self.dilation)
        by_step[..., :whole, :, :] = x[..., :whole * self.dilation, :].reshape(
            x.shape[:-2] + (whole, self.dilation, x.shape[-1]))
        if rest:
            by_step[..., whole, :rest, :] = x[..., whole * self.dilation:, :]
        return out

    def _unfold(self, x, front):
        """The inverse of ``_fold``: (..., dilation, rows, d) -> (..., n, d)."""
        x = x[..., front:front + self.steps, :].swapaxes(-2, -3)
        return x.reshape(x.shape[:-3] + (self.steps * self.dilation, x.shape[-1]))[..., :self.n, :]

    def queries(self, x):
        """(..., n, d) -> (..., dilation, blocks, block, d), a copy."""
        folded = self._fold(x, 0, self.count * self.block)
        return folded.reshape(folded.shape[:-2] + (self.count, self.block, x.shape[-1]))

    def unfold_queries(self, x):
        """(..., dilation, blocks, block, d) -> (..., n, d)."""
        return self._unfold(x.reshape(x.shape[:-3] + (-1, x.shape[-1])), 0)

    def _windows(self, padded):
        """(..., rows, d) padded keys -> (..., blocks, width, d), block j's keys from row
        j * block: a read-only strided view."""
        strides = padded.strides
        return np.lib.stride_tricks.as_strided(
            padded, padded.shape[:-2] + (self.count, self.width, padded.shape[-1]),
            strides[:-2] + (self.block * strides[-2],) + strides[-2:], writeable=False)

    def key_windows(self, x):
        """(..., n, d) keys or values -> (..., dilation, blocks, width, d)."""
        return self._windows(self._fold(x, self.before, self.key_rows))

    def key_rows_like(self, windows, width):
        """Zeros (..., dilation, padded rows, ``width``) for ``add_key_windows`` to add into."""
        return np.zeros(windows.shape[:-3] + (self.key_rows, width), windows.dtype)

    def add_key_windows(self, rows, windows, first):
        """The gradient of ``key_windows``, a chunk at a time: the windows (..., dilation,
        blocks, width, d) of the blocks from ``first`` on added, in place, into ``rows`` (from
        ``key_rows_like``) where they were read (windows overlap)."""
        count, d = windows.shape[-3], windows.shape[-1]
        for start in range(0, self.width, self.block):
            part = windows[..., start:start + self.block, :]
            top = first * self.block + start
            target = rows[..., top:top + count * self.block, :]
            target.reshape(target.shape[:-2] + (count, self.block, d))[
                ..., :part.shape[-2], :] += part

    def unfold_keys(self, rows):
        """The padded key rows of ``key_rows_like`` -> (..., n, d)."""
        return self._unfold(rows, self.before)

    def chunks(self, leading):
        """Slices of the blocks axis whose scores, with ``leading`` (batch * heads * dilation)
        of them per block, fill about ``GROUP_BLOCK`` elements: one chunk's scores and their
        gradients are computed, used and dropped while they are in the cache, and no array of
        the whole band's scores is made but the kept probabilities."""
        step = max(1, GROUP_BLOCK // (leading * self.block * self.width))
        return [slice(j, min(self.count, j + step)) for j in range(0, self.count, step)]

    def hidden_keys(self, key_mask):
        """Where a block's scores are hidden by the band's padding or by ``key_mask`` (batch, n;
        None: every key real): a bool view (batch|1, 1, dilation, blocks, 1, width), and the
        blocks that have any (without a key mask only the blocks at the ends read padding)."""
        real = (np.ones((1, self.n), dtype=bool) if key_mask is None
                else np.asarray(key_mask, dtype=bool))
        hidden = ~self._windows(self._fold(real[..., None], self.before, self.key_rows))[..., 0]
        hidden = hidden[:, None, :, :, None, :]
        return hidden, hidden.any(axis=(0, 1, 2, 4, 5))

    def mask(self, scores, hidden, touched, chunk):
        """-inf, in place, on the scores (batch, heads, dilation, blocks, block, width) of the
        blocks ``chunk`` (a slice): on keys outside the band, and on the keys ``hidden_keys``
        hides where its ``touched`` (blocks,) says a block has any."""
        offset = (np.arange(self.width)[None, :] - self.before) - np.arange(self.block)[:, None]
        outside = (offset < -self.before) | (offset > self.span - self.before)
        np.copyto(scores, -np.inf, where=outside)
        if touched[chunk].any():
            np.copyto(scores, -np.inf, where=hidden[..., chunk, :, :])
