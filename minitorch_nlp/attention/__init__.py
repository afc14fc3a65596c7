"""Attention patterns: the masks of the surveyed models in one place, and pictures of them.

Every mask is a NumPy bool array, True where a query may attend a key, broadcastable to
``(batch, heads, q_time, k_time)`` (see ``masks``); ``draw_mask`` / ``draw_masks`` draw them.
"""
from .drawing import draw_mask, draw_masks
from .masks import (PermutationMasks, block_sparse_mask, bucket_mask, causal_mask, combine,
                    fixed_mask, global_mask, padding_mask, permutation_mask, prefix_lm_mask,
                    sliding_window_mask, strided_mask, to_bias)

__all__ = ["PermutationMasks", "block_sparse_mask", "bucket_mask", "causal_mask", "combine",
           "draw_mask", "draw_masks", "fixed_mask", "global_mask", "padding_mask",
           "permutation_mask", "prefix_lm_mask", "sliding_window_mask", "strided_mask",
           "to_bias"]
