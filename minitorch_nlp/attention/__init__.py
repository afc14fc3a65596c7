"""Attention patterns: the masks of the surveyed models in one place, and pictures of them.

Every mask is a NumPy bool array, True where a query may attend a key, broadcastable to
``(batch, heads, q_time, k_time)`` (see ``masks``); ``draw_mask`` / ``draw_masks`` draw them.

The efficient attention cores, for ``nn.MultiHeadAttention(core=...)``, never form the n x n
matrix: ``SparseTransformerAttention`` (strided / fixed factorised patterns, in groups of dense
products, see ``grouped``), ``LinformerAttention`` (keys and values projected to k positions) and
``PerformerAttention`` (FAVOR+ positive random features), ``LSHAttention`` (the Reformer's
hashed, sorted and chunked shared-QK attention) and ``BlockSparseAttention`` (BigBird's window,
global and random blocks); ``LongformerSelfAttention`` is a ``MultiHeadAttention`` with a
(dilated, per-head) window and global tokens with their own projections; ``ETCAttention`` is
one over ETC's two inputs, global and long tokens, with relative position labels.
"""
from .big_bird import BlockSparseAttention
from .drawing import draw_mask, draw_masks
from .extended_transformer import ETCAttention
from .linformer import LinformerAttention, linformer_cores
from .longformer import LongformerSelfAttention
from .lsh import LSHAttention
from .masks import (PermutationMasks, block_sparse_layout, block_sparse_mask, bucket_mask,
                    causal_mask, combine, fixed_mask, global_mask, padding_mask,
                    permutation_mask, prefix_lm_mask, sliding_window_mask, strided_mask, to_bias)
from .performer import PerformerAttention
from .sparse_transformer import SparseTransformerAttention, alternating_sparse_cores

__all__ = ["BlockSparseAttention", "ETCAttention", "LSHAttention", "LinformerAttention",
           "LongformerSelfAttention", "PerformerAttention", "PermutationMasks",
           "SparseTransformerAttention", "alternating_sparse_cores", "block_sparse_layout",
           "block_sparse_mask", "bucket_mask", "causal_mask", "combine", "draw_mask",
           "draw_masks", "fixed_mask", "global_mask", "linformer_cores", "padding_mask",
           "permutation_mask", "prefix_lm_mask", "sliding_window_mask", "strided_mask",
           "to_bias"]
