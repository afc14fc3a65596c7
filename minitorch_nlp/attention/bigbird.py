"""BigBird's block-sparse attention (Zaheer et al., 2020; the survey's section VIII) as an
attention core for ``nn.MultiHeadAttention(core=...)``.

The sequence is cut into blocks of b positions. Each query block attends a window of w blocks
around it, the g global blocks and r random blocks (BigBird-ITC); the global blocks attend
everything. The work is dense products per block: every non-global query block is one group
against the key blocks of its row of the pattern (w + g + r blocks), the global query blocks one
group against all keys, so the memory is O(n (w + g + r) b + g b n), never n x n.
"""
from __future__ import annotations

import numpy as np

from .. import checks
from ..autograd import Generator, Tensor, concatenate
from ..nn.transformer import FullAttention
from .grouped import grouped_attention, self_attention_inputs, ungroup
from .masks import block_sparse_layout

__all__ = ["BlockSparseAttention"]


class BlockSparseAttention(FullAttention):
    """BigBird-ITC attention over blocks of ``block`` positions: ``num_window_blocks`` (odd)
    around each query block, ``global_blocks`` (block indices; negative ones count from the end)
    that attend and are attended by all, and ``num_random_blocks`` drawn per query block among
    the rest (``masks.block_sparse_layout``), at every call from ``generator`` (the default
    generator when None), or the same at every call with ``seed``. ``layout(time)`` gives the
    (blocks, blocks) pattern the next call would use when seeded.

    The sequence length must be a multiple of ``block``. ``causal=True`` also hides later
    positions. A general ``mask``, a ``bias`` or ``need_weights`` take the full core with the
    pattern as an n x n mask (for pictures and tests); so does a key/value cache.
    """

    def __init__(self, block, num_window_blocks=3, global_blocks=(0,), num_random_blocks=0, *,
                 seed=None, generator=None, dropout=0.0):
        super().__init__(dropout)
        name = "BlockSparseAttention"
        self.block = checks.positive_int(block, "block", name)
        self.num_window_blocks = checks.positive_int(num_window_blocks, "num_window_blocks",
                                                     name)
        if num_window_blocks % 2 == 0:
            raise ValueError(f"{name}: num_window_blocks must be odd (a block and as many "
                             f"neighbours on each side), got {num_window_blocks}")
        self.global_blocks = tuple(int(b) for b in global_blocks)
        self.num_random_blocks = checks.int_at_least(num_random_blocks, 0, "num_random_blocks",
                                                     name)
        self.seed, self.generator = seed, generator

    def layout(self, time):
        """The (blocks, blocks) pattern and the global blocks for a sequence of ``time``."""
        name = "BlockSparseAttention"
        if time % self.block:
            raise ValueError(f"{name}: the sequence length {time} is not a multiple of "
                             f"block={self.block}; pad the sequence (with a key_mask) to a "
                             "multiple of the block size")
        generator = Generator(self.seed) if self.seed is not None else self.generator
        return block_sparse_layout(time // self.block, num_window_blocks=self.num_window_blocks,
                                   global_blocks=self.global_blocks,
                                   num_random_blocks=self.num_random_blocks, generator=generator,
                                   builder=name)

    def forward(self, q, k, v, *, mask=None, bias=None, causal=False, key_mask=None,
                need_weights=False):
        layout, is_global = self.layout(k.shape[2])
        if mask is not None or bias is not None or need_weights or q.shape[2] != k.shape[2]:
            pattern = layout.repeat(self.block, axis=0).repeat(self.block, axis=1)
            pattern = q.backend.asarray(pattern[-q.shape[2]:])
            if mask is not None:
                pattern = pattern & (mask.data if isinstance(mask, Tensor) else
                                     q.backend.asarray(mask))
            return super().forward(q, k, v, mask=pattern, bias=bias, causal=causal,
                                   key_mask=key_mask, need_weights=need_weights)
        q, k, v, key_mask = self_attention_inputs(q, k, v, key_mask, "BlockSparseAttention")
        return self.sparse(q, k, v, layout, is_global, causal, key_mask), None

    def sparse(self, q, k, v, layout, is_global, causal, key_mask):
        """Non-global query blocks against their rows' key blocks, global ones against all."""
        b, time = self.block, q.shape[2]
        within = np.arange(b)
        scale = 1.0 / float(np.sqrt(q.shape[-1]))
        outs, query_groups = [], []
        local_rows = np.flatnonzero(~is_global)
        if local_rows.size:
            counts = layout[local_rows].sum(axis=1)
            width = int(counts.max())
            key_blocks = np.zeros((local_rows.size, width), dtype=np.int64)
            real = np.arange(width)[None, :] < counts[:, None]
            for row, blocks in enumerate(layout[local_rows]):
                key_blocks[row, :counts[row]] = np.flatnonzero(blocks)
            queries = local_rows[:, None] * b + within                      # (groups, b)
            keys = (key_blocks[:, :, None] * b + within).reshape(local_rows.size, -1)
            allowed = np.repeat(real, b, axis=1)[:, None, :]
            outs.append(self._attend(q, k, v, queries, keys, allowed, causal, key_mask, scale))
            query_groups.append(queries)
        global_rows = np.flatnonzero(is_global)
        if global_rows.size:
            queries = global_rows[:, None] * b + within
            keys = np.broadcast_to(np.arange(time), (global_rows.size, time))
            allowed = np.ones((1, 1, time), dtype=bool)
            outs.append(self._attend(q, k, v, queries, keys, allowed, causal, key_mask, scale))
            query_groups.append(queries)
        out = outs[0] if len(outs) == 1 else concatenate(outs, axis=2)
        return ungroup(out, np.concatenate(query_groups)[None, None], time)

    def _attend(self, q, k, v, queries, keys, allowed, causal, key_mask, scale):
        if causal:
            allowed = allowed & (keys[:, None, :] <= queries[:, :, None])
        out, _ = grouped_attention(q, k, v, queries[None, None], keys[None, None], allowed,
                                   scale=scale, key_mask=key_mask, dropout=self.dropout)
        return out

    def extra_repr(self):
        return (f"block={self.block}, num_window_blocks={self.num_window_blocks}, "
                f"global_blocks={self.global_blocks}, "
                f"num_random_blocks={self.num_random_blocks}, seed={self.seed}")
