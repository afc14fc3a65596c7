"""Longformer's attention (Beltagy et al., 2020, section 3; the survey's section VIII): a
(dilated) sliding window for every token, and global attention, with its own projections, for a
few chosen tokens.

* Local: query i attends keys i + o * dilation, |o| <= window (o <= 0 when causal), and every
  global token, with the layer's projections Q, K, V. The window is computed in groups of dense
  products: the positions of one residue class mod the dilation, cut into blocks of ``window``,
  each block against the three blocks around it; the global keys are a second group, and the two
  are combined by their log-sum-exps (``grouped_attention``, ``merge_attentions``). Memory
  O(n * (window + globals)).
* Global: a token with global attention attends every token, with separate projections
  Q_g, K_g, V_g (the paper's section 3.1, "two sets of projections"), O(n * globals).

Each head may have its own dilation (the paper's dilated heads). ``LongformerSelfAttention`` is
a ``MultiHeadAttention`` (it owns the extra projections), so a Transformer layer takes it in
place of the plain one.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import checks
from .. import functional as F
from ..autograd import Tensor, concatenate
from ..nn.layers import Linear
from ..nn.transformer import MultiHeadAttention
from .grouped import _flat_rows, grouped_attention, merge_attentions, ungroup

__all__ = ["LongformerSelfAttention"]


@functools.lru_cache(maxsize=8)
def _window_groups(time, window, dilation, causal):
    """Query slots, key slots and the allowed pairs of the dilated window, grouped by residue
    class mod ``dilation`` and blocks of ``window`` class positions: (queries (G, w), valid
    queries (G, w), keys (G, 3w), allowed (G, w, 3w)), read-only. Kept for the next layer and
    call with the same sizes: at 4096 tokens and a 128-token window, building them took 3 ms of
    each layer's 80. Few are kept, as ``allowed`` has about 3 x time x window entries (25 MB at
    16k tokens and a 512-token window) and batches of many lengths would each add one."""
    per_class = -(-time // dilation)
    blocks = -(-per_class // window)
    residue = np.arange(dilation)[:, None, None]
    block = np.arange(blocks)[None, :, None]
    query_place = block * window + np.arange(window)                   # place in the class
    key_place = (block - 1) * window + np.arange(3 * window)
    queries = (residue + query_place * dilation).reshape(-1, window)
    keys = (residue + key_place * dilation).reshape(-1, 3 * window)
    query_place = np.broadcast_to(query_place, (dilation, blocks, window)).reshape(-1, window)
    key_place = np.broadcast_to(key_place, (dilation, blocks, 3 * window)).reshape(-1, 3 * window)
    offset = key_place[:, None, :] - query_place[:, :, None]
    allowed = (np.abs(offset) <= window) & (key_place[:, None, :] >= 0) & (
        keys[:, None, :] < time)
    if causal:
        allowed &= offset <= 0
    valid = queries < time
    groups = np.minimum(queries, time - 1), valid, np.clip(keys, 0, time - 1), allowed
    for array in groups:
        array.flags.writeable = False
    return groups


class LongformerSelfAttention(MultiHeadAttention):
    """Longformer self-attention over ``d_model`` features in ``num_heads`` heads: a window of
    ``window`` keys on each side every ``dilation``-th position (one int, or one per head), and
    global attention for the tokens marked in ``forward``'s ``global_attention_mask`` (batch,
    time), True (or 1) for global tokens, with the projections ``query_global``, ``key_global``,
    ``value_global``.

    ``forward(x, *, global_attention_mask=None, key_mask=None, causal=False, head_mask=None,
    need_weights=False)``; causal attention is the window only (global tokens see the future).
    ``head_mask`` (heads,) or (batch, heads) scales each head's output, as in
    ``MultiHeadAttention``. ``need_weights`` builds the (time, time) weights densely, for
    pictures and tests.
    """

    def __init__(self, d_model, num_heads, window, dilation=1, bias=True, dropout=0.0):
        super().__init__(d_model, num_heads, bias, dropout)
        name = "LongformerSelfAttention"
        self.window = checks.positive_int(window, "window", name)
        dilations = (dilation,) * num_heads if isinstance(dilation, int) else tuple(dilation)
        if len(dilations) != num_heads:
            raise ValueError(f"{name}: dilation must be one int or one per head ({num_heads}), "
                             f"got {len(dilations)}")
        self.dilation = tuple(checks.positive_int(d, "dilation", name) for d in dilations)
        self.query_global = Linear(d_model, d_model, bias=bias)
        self.key_global = Linear(d_model, d_model, bias=bias)
        self.value_global = Linear(d_model, d_model, bias=bias)

    def global_positions(self, global_attention_mask, shape):
        """The global mask as a (batch, time) bool array (all False when None)."""
        if global_attention_mask is None:
            return np.zeros(shape, dtype=bool)
        mask = np.asarray(global_attention_mask.numpy() if isinstance(global_attention_mask,
                                                                      Tensor)
                          else global_attention_mask)
        if mask.shape != tuple(shape):
            raise ValueError(f"LongformerSelfAttention: global_attention_mask of shape "
                             f"{mask.shape} must be (batch, time) = {tuple(shape)}")
        return mask.astype(bool)

    def forward(self, query, key=None, value=None, *, global_attention_mask=None, key_mask=None,
                causal=False, cache=None, head_mask=None, need_weights=False):
        name = "LongformerSelfAttention"
        if key is not None or value is not None or cache is not None:
            raise ValueError(f"{name}: is self-attention without a key/value cache; call it with "
                             "the hidden states only")
        checks.features(query, self.d_model, "x", name)
        is_global = self.global_positions(global_attention_mask, query.shape[:2])
        if causal and is_global.any():
            raise ValueError(f"{name}: global tokens attend every position, which causal "
                             "attention forbids; leave global_attention_mask out when causal")
        q, k, v = self.project(query, None, None, None)
        if key_mask is not None:
            key_mask = np.asarray(key_mask.numpy() if isinstance(key_mask, Tensor) else key_mask)
            checks.attention_mask(key_mask, query.shape[:2], name)
        if need_weights:
            z, weights = self.dense(query, q, k, v, is_global, causal, key_mask)
        else:
            z, weights = self.sparse(query, q, k, v, is_global, causal, key_mask), None
        if head_mask is not None:
            z, weights = self.mask_heads(z, weights, head_mask)
        out = self.out_proj(self.merge_heads(z))
        return (out, weights) if need_weights else out

    def sparse(self, x, q, k, v, is_global, causal, key_mask):
        """Local (window + global keys) for every token, then the global tokens' rows."""
        time = q.shape[2]
        scale = 1.0 / float(np.sqrt(self.head_dim))
        by_dilation = {}
        for head, dilation in enumerate(self.dilation):
            by_dilation.setdefault(dilation, []).append(head)
        outs, order = [], []
        for dilation, heads in by_dilation.items():
            pick = heads if len(heads) < self.num_heads else slice(None)
            outs.append(self.local(q[:, pick], k[:, pick], v[:, pick], dilation, is_global,
                                   causal, key_mask, scale))
            order += heads
        z = outs[0] if len(outs) == 1 else concatenate(outs, axis=1)[:, np.argsort(order)]
        if not is_global.any():
            return z
        return self.with_global_rows(x, z, is_global, key_mask, time)

    def local(self, q, k, v, dilation, is_global, causal, key_mask, scale):
        time = q.shape[2]
        queries, valid, keys, allowed = _window_groups(time, self.window, dilation, causal)
        # global keys are the second part: out of the window's, so no pair counts twice
        allowed = allowed[None, None] & ~is_global[:, keys][:, None, :, None, :]
        window, window_lse = grouped_attention(q, k, v, queries[None, None], keys[None, None],
                                               allowed, scale=scale, key_mask=key_mask,
                                               dropout=self.core.dropout)
        parts = [(ungroup(window, queries[None, None], time, valid),
                  ungroup(window_lse[..., None], queries[None, None], time, valid)[..., 0])]
        if is_global.any():
            slots, slot_valid = self._global_slots(is_global)
            everyone = np.arange(time)[None, None, None]
            seen, seen_lse = grouped_attention(q, k, v, everyone, slots, slot_valid[:, None, None,
                                                                                    None, :],
                                               scale=scale, key_mask=key_mask,
                                               dropout=self.core.dropout)
            parts.append((seen[:, :, 0], seen_lse[:, :, 0]))
        return merge_attentions(parts)[0]

    @staticmethod
    def _global_slots(is_global):
        """Each sequence's global positions (batch, 1, 1, most globals), padded, and which
        slots are real (batch, most globals)."""
        counts = is_global.sum(axis=1)
        width = max(1, int(counts.max()))
        slots = np.zeros((is_global.shape[0], width), dtype=np.int64)
        for b, row in enumerate(is_global):
            slots[b, :counts[b]] = np.flatnonzero(row)
        return slots[:, None, None, :], np.arange(width)[None, :] < counts[:, None]

    def with_global_rows(self, x, z, is_global, key_mask, time):
        """The global tokens' rows replaced by their attention over every token, computed with
        the global projections. Only the global tokens' queries are projected (each sequence's
        few rows gathered first, padded slots repeating position 0 and dropped after)."""
        slots, slot_valid = self._global_slots(is_global)
        batch = z.shape[0]
        global_tokens = x[np.arange(batch)[:, None], slots[:, 0, 0]]
        qg = self.split_heads(self.query_global(global_tokens))
        kg, vg = self.split_heads(self.key_global(x)), self.split_heads(self.value_global(x))
        rows, _ = self.core(qg, kg, vg, key_mask=key_mask)
        place = np.full((batch, time), -1)
        for b in range(batch):
            place[b, slots[b, 0, 0][slot_valid[b]]] = np.flatnonzero(slot_valid[b])
        index = np.where(place >= 0, time + place, np.arange(time))[:, None]
        return _flat_rows(concatenate([z, rows], axis=2), index)

    def dense(self, x, q, k, v, is_global, causal, key_mask):
        """The same attention with (time, time) masks: window-or-global rows with Q, K, V and
        the global rows with Q_g, K_g, V_g."""
        time = q.shape[2]
        offsets = np.arange(time)[None, :] - np.arange(time)[:, None]
        dilation = np.asarray(self.dilation)[:, None, None]
        window = (offsets % dilation == 0) & (np.abs(offsets) <= self.window * dilation)
        if causal:
            window &= offsets <= 0
        local = window[None] | is_global[:, None, None, :]
        weights = F.attention_weights(q, k, mask=local, key_mask=key_mask)
        if is_global.any():
            qg = self.split_heads(self.query_global(x))
            kg = self.split_heads(self.key_global(x))
            global_weights = F.attention_weights(qg, kg, key_mask=key_mask)
            rows = is_global[:, None, :, None]
            weights = weights.masked_fill(rows, 0.0) + global_weights.masked_fill(~rows, 0.0)
            vg = self.split_heads(self.value_global(x))
            z = (weights.masked_fill(rows, 0.0) @ v) + (weights.masked_fill(~rows, 0.0) @ vg)
        else:
            z = weights @ v
        return z, weights

    def extra_repr(self):
        return f"window={self.window}, dilation={self.dilation}"
