"""The global-local attention of ETC, the Extended Transformer Construction (Ainslie et al.,
2020, "ETC: Encoding Long and Structured Inputs in Transformers", section 3; the survey's section
VIII-D).

The input is two sequences: a few *global* tokens (n_g) and the *long* input (n_l, n_g << n_l).
Attention is cut into four pieces:

* g2g and g2l: a global token attends every global and every long token;
* l2g: a long token attends every global token;
* l2l: a long token attends the long tokens within ``local_radius`` r of it, |i - j| <= r.

A global token's softmax runs over g2g and g2l together, a long token's over l2g and l2l
together. Scores carry relative position labels (Shaw et al., 2018): a learned vector a_l per
label l and head, e_ij = q_i . (k_j + a_label(i,j)) / sqrt(d_k) (each head its own vectors, as
the paper's code, ``relative_emb_table`` [labels, heads, d_k]). Between
two tokens of the same input the label is the distance j - i clipped to [-k, k] (k =
``max_distance``, 2k + 1 labels). Between a global and a long token it comes from the
*global-local mapping*: ``segment_ids`` gives for each long token the global token that stands
for its segment (a sentence, a paragraph), and the pair gets the label "own" when the long token
belongs to that global token and "other" otherwise.

The pieces are grouped dense products (``grouped_attention``): the global rows against all
n_g + n_l keys, the long rows in blocks of r against the three blocks around them (l2l) and
against the n_g global keys (l2g), the two merged by their log-sum-exps. Memory is
O(n_l * (r + n_g)), never (n_g + n_l)^2.
"""
from __future__ import annotations

import numpy as np

from .. import checks
from ..autograd import Tensor, concatenate, empty
from ..nn import init
from ..nn.parameter import Parameter
from ..nn.transformer import MultiHeadAttention
from .grouped import _flat_rows, grouped_attention, merge_attentions, ungroup
from .longformer import _window_groups

__all__ = ["ETCAttention"]


def _everything(count, offset=0):
    """Positions offset .. offset + count - 1 as one group: (1, 1, 1, count)."""
    return (offset + np.arange(count))[None, None, None]


class ETCAttention(MultiHeadAttention):
    """ETC's global-local attention over ``d_model`` features in ``num_heads`` heads, long tokens
    attending each other within ``local_radius``, relative positions clipped at ``max_distance``
    (default: the radius). One set of projections Q, K, V and output serves both inputs; the
    relative vectors are ``relative_keys`` (num_heads, num_labels, head_dim), labels 0 .. 2k for the
    distances -k .. k, then ``own_label`` and ``other_label`` for the global-long pairs.

    ``forward(global_x, long_x, *, segment_ids=None, global_mask=None, long_mask=None)`` takes
    global_x (batch, n_g, d_model), long_x (batch, n_l, d_model), segment_ids (batch, n_l) ints,
    the global token of each long token's segment or -1 for none (None: every long token
    -1), and the masks (batch, n_g), (batch, n_l), False on padding. It returns the global and
    long outputs, (batch, n_g, d_model) and (batch, n_l, d_model).
    """

    def __init__(self, d_model: int, num_heads: int, local_radius: int,
                 max_distance: int | None = None, bias: bool = True,
                 dropout: float = 0.0) -> None:
        super().__init__(d_model, num_heads, bias, dropout)
        name = "ETCAttention"
        self.local_radius = checks.positive_int(local_radius, "local_radius", name)
        self.max_distance = self.local_radius if max_distance is None else checks.int_at_least(
            max_distance, 0, "max_distance", name)
        self.own_label, self.other_label = 2 * self.max_distance + 1, 2 * self.max_distance + 2
        self.num_labels = 2 * self.max_distance + 3
        self.relative_keys = Parameter(init.normal_(empty(num_heads, self.num_labels,
                                                          self.head_dim),
                                                    std=0.02))

    def labels(self, queries: np.ndarray, keys: np.ndarray, segments: np.ndarray,
               n_global: int) -> np.ndarray:
        """The relative position label of every (query, key) pair of the joint sequence [global
        tokens; long tokens]: ``queries`` (1, 1, groups, q) and ``keys`` (1, 1, groups, k) are
        joint positions, ``segments`` (batch, n_l) the mapping. Returns (batch | 1, 1, groups,
        q, k) ints."""
        q, k = queries[..., :, None], keys[..., None, :]
        distance = np.clip(k - q, -self.max_distance, self.max_distance) + self.max_distance
        q_global, k_global = q < n_global, k < n_global
        mixed = q_global != k_global
        if not mixed.any():
            return distance
        global_token = np.where(q_global, q, k)[0, 0]
        long_token = np.clip(np.where(q_global, k, q) - n_global, 0, segments.shape[1] - 1)[0, 0]
        own = segments[:, long_token] == global_token                  # (batch, groups, q, k)
        mapped = np.where(own, self.own_label, self.other_label)[:, None]
        return np.where(mixed, mapped, distance)

    def forward(self, global_x: Tensor, long_x: Tensor, *,
                segment_ids: Tensor | np.ndarray | None = None,
                global_mask: Tensor | np.ndarray | None = None,
                long_mask: Tensor | np.ndarray | None = None) -> tuple[Tensor, Tensor]:
        name = "ETCAttention"
        checks.features(global_x, self.d_model, "global_x", name)
        checks.features(long_x, self.d_model, "long_x", name)
        batch, n_global = global_x.shape[:2]
        n_long = long_x.shape[1]
        if long_x.shape[0] != batch:
            raise ValueError(f"{name}: global_x has batch {batch}, long_x {long_x.shape[0]}; "
                             "give both inputs of every example")
        if n_global == 0 or n_long == 0:
            raise ValueError(f"{name}: needs at least one global and one long token, got "
                             f"n_g={n_global}, n_l={n_long}")
        segments = self.segments(segment_ids, batch, n_global, n_long)
        key_mask = self.key_mask(global_mask, long_mask, batch, n_global, n_long)
        q, k, v = self.project(concatenate([global_x, long_x], axis=1), None, None, None)
        scale = 1.0 / float(np.sqrt(self.head_dim))
        relative = (q @ self.relative_keys.mT) * scale   # q_i . a_l / sqrt(d_k), every l, per head

        def attend(queries, keys, allowed):
            labels = self.labels(queries, keys, segments, n_global)
            flat = queries[..., :, None] * self.num_labels + labels
            shape = relative.shape
            bias = _flat_rows(relative.reshape(shape[0], shape[1], shape[2] * shape[3], 1),
                              flat)[..., 0]
            return grouped_attention(q, k, v, queries, keys, allowed, scale=scale,
                                     key_mask=key_mask, bias=bias, dropout=self.core.dropout)

        every_key = np.ones((1, 1, 1, 1, 1), dtype=bool)
        global_rows, _ = attend(_everything(n_global), _everything(n_global + n_long),
                                every_key)                                   # g2g and g2l
        window, valid, window_keys, allowed = _window_groups(n_long, self.local_radius, 1,
                                                             False)
        window = window[None, None]
        local, local_lse = attend(window + n_global, window_keys[None, None] + n_global,
                                  allowed[None, None])                       # l2l
        to_global, to_global_lse = attend(_everything(n_long, n_global), _everything(n_global),
                                          every_key)                         # l2g
        long_rows = merge_attentions([
            (ungroup(local, window, n_long, valid),
             ungroup(local_lse[..., None], window, n_long, valid)[..., 0]),
            (to_global[:, :, 0], to_global_lse[:, :, 0])])[0]
        z = concatenate([global_rows[:, :, 0], long_rows], axis=2)
        out = self.out_proj(self.merge_heads(z))
        return out[:, :n_global], out[:, n_global:]

    @staticmethod
    def segments(segment_ids: Tensor | np.ndarray | None, batch: int, n_global: int,
                 n_long: int) -> np.ndarray:
        """The global-local mapping as (batch, n_l) ints in [-1, n_g) (all -1 when None)."""
        if segment_ids is None:
            return np.full((batch, n_long), -1, dtype=np.int64)
        segments = checks.ids_array(segment_ids, "segment_ids", "ETCAttention",
                                    shape=(batch, n_long))
        outside = (segments < -1) | (segments >= n_global)
        if outside.any():
            raise ValueError(f"ETCAttention: segment_ids holds {int(segments[outside][0])}; "
                             f"each long token names its global token in [0, n_g={n_global}), "
                             "or -1 for none")
        return segments

    @staticmethod
    def key_mask(global_mask: Tensor | np.ndarray | None, long_mask: Tensor | np.ndarray | None,
                 batch: int, n_global: int, n_long: int) -> np.ndarray | None:
        """The two padding masks as one (batch, n_g + n_l) key mask of the joint sequence, or
        None when every token is real."""
        masks = []
        for name, mask, axes, width in (("global_mask", global_mask, "n_g", n_global),
                                        ("long_mask", long_mask, "n_l", n_long)):
            if mask is None:
                masks.append(None)
                continue
            mask = np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask)
            if mask.shape != (batch, width):
                raise ValueError(f"ETCAttention: {name} of shape {mask.shape} must be (batch, "
                                 f"{axes}) = {(batch, width)}, False on padding")
            masks.append(checks.attention_mask(mask, (batch, width), "ETCAttention"))
        if all(mask is None for mask in masks):
            return None
        return np.concatenate([np.ones((batch, width), dtype=bool) if mask is None else mask
                               for mask, width in zip(masks, (n_global, n_long))], axis=1)

    def extra_repr(self):
        return f"local_radius={self.local_radius}, max_distance={self.max_distance}"
