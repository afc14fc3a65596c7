"""BigBird's block-sparse attention (Zaheer et al., 2020; the survey's section VIII) as an
attention core for ``nn.MultiHeadAttention(core=...)``.

The sequence is cut into blocks of b positions. Each query block attends a window of w blocks
around it, the g global blocks and r random blocks (BigBird-ITC); the global blocks attend
everything. The work is dense products per block: every non-global query block is one group
against the key blocks of its row of the pattern (w + g + r blocks), the global query blocks one
group against all keys, so the memory is O(n (w + g + r) b + g b n), never n x n.

``BigBirdBlockSparseAttention`` is the same computation as HuggingFace's ``BigBirdModel`` does
it (per-head random blocks from ``random_block_plan``, the released code's seeded numpy draw;
full attention for short inputs; padding to a block multiple), the core of
``models/big_bird.py``.
"""
from __future__ import annotations

import numpy as np

from .. import checks
from ..autograd import Generator, Tensor, concatenate, tensor, zeros
from ..nn.transformer import FullAttention
from .grouped import grouped_attention, self_attention_inputs, ungroup
from .masks import block_sparse_layout

__all__ = ["BigBirdBlockSparseAttention", "BlockSparseAttention", "random_block_plan",
           "sparse_threshold"]


class BlockSparseAttention(FullAttention):
    """BigBird-ITC attention over blocks of ``block`` positions: ``num_window_blocks`` (odd)
    around each query block, ``global_blocks`` (block indices; negative ones count from the end)
    that attend and are attended by all, and ``num_random_blocks`` drawn per query block among
    the rest (``masks.block_sparse_layout``), at every call from ``generator`` (the default
    generator when None), or the same at every call with ``seed``. ``layout(time)`` gives the
    (blocks, blocks) pattern the next call would use when seeded; a call works from
    ``block_counts(time, heads)``, the pattern as counts per head, which subclasses override
    (``BigBirdBlockSparseAttention``: HuggingFace's per-head random blocks).

    The sequence length must be a multiple of ``block``. ``causal=True`` also hides later
    positions. A general ``mask``, a ``bias`` or ``need_weights`` take the full core with the
    pattern as an n x n mask (for pictures and tests); so does a key/value cache.
    """

    def __init__(self, block: int, num_window_blocks: int = 3,
                 global_blocks: tuple[int, ...] = (0,), num_random_blocks: int = 0, *,
                 seed: int | None = None, generator: Generator | None = None,
                 dropout: float = 0.0) -> None:
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

    def layout(self, time: int) -> tuple[np.ndarray, np.ndarray]:
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

    # the sparse path drops attention weights (HuggingFace's block-sparse attention does not)
    drops_sparse_weights = True

    def block_counts(self, time: int, heads: int) -> tuple[np.ndarray, np.ndarray]:
        """How many times each query block attends each key block, a (1 or ``heads``, blocks,
        blocks) int array (0: not at all), and the (blocks,) bool array of global blocks. Here
        ``layout(time)`` as 0 and 1, alike for every head; a subclass whose heads draw their own
        random blocks, or that repeats a block in a row (HuggingFace in evaluation), overrides
        it. A key block counted m times weighs as m copies of its keys in the softmax."""
        layout, is_global = self.layout(time)
        return layout[None].astype(np.int64), is_global

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        counts, is_global = self.block_counts(k.shape[2], q.shape[1])
        if mask is not None or bias is not None or need_weights or q.shape[2] != k.shape[2]:
            counts = counts.repeat(self.block, axis=1).repeat(self.block, axis=2)[:, -q.shape[2]:]
            pattern = q.backend.asarray(counts > 0)
            if mask is not None:
                pattern = pattern & (mask.data if isinstance(mask, Tensor) else
                                     q.backend.asarray(mask))
            if (counts > 1).any():      # m copies of a key = one key with log(m) added
                repeats = tensor(np.log(np.maximum(counts, 1)), dtype=q.dtype,
                                 backend=q.backend.name)
                bias = repeats if bias is None else bias + repeats
            return super().forward(q, k, v, mask=pattern, bias=bias, causal=causal,
                                   key_mask=key_mask, need_weights=need_weights)
        q, k, v, key_mask = self_attention_inputs(q, k, v, key_mask, "BlockSparseAttention")
        return self.sparse(q, k, v, counts, is_global, causal, key_mask), None

    def sparse(self, q: Tensor, k: Tensor, v: Tensor, counts: np.ndarray, is_global: np.ndarray,
               causal: bool, key_mask) -> Tensor:
        """Non-global query blocks against their rows' key blocks (per head when ``counts``
        differ by head), global ones against all. With ``causal``, key blocks after a query
        block, which none of its queries may see, are left out of its group (and a global
        block attends only the keys up to its end), so that no work goes to hidden pairs."""
        b, time = self.block, q.shape[2]
        within = np.arange(b)
        scale = 1.0 / float(np.sqrt(q.shape[-1]))
        outs, query_groups = [], []
        local_rows = np.flatnonzero(~is_global)
        if local_rows.size:
            row_counts = counts[:, local_rows]
            if causal:
                row_counts = row_counts * (np.arange(counts.shape[-1]) <= local_rows[:, None])
            key_blocks, real = _key_block_lists(row_counts)                 # (H|1, groups, width)
            queries = local_rows[:, None] * b + within                      # (groups, b)
            keys = (key_blocks[..., None] * b + within).reshape(key_blocks.shape[:2] + (-1,))
            allowed = np.repeat(real, b, axis=-1)[..., None, :]
            outs.append(self._attend(q, k, v, queries[None, None], keys[None], allowed, causal,
                                     key_mask, scale))
            query_groups.append(queries)
        global_rows = np.flatnonzero(is_global)
        key_ends = (global_rows + 1) * b if causal else np.full(global_rows.size, time)
        for end in np.unique(key_ends):
            queries = global_rows[key_ends == end][:, None] * b + within
            keys = np.broadcast_to(np.arange(end), (queries.shape[0], end))
            allowed = np.ones((1, 1, end), dtype=bool)
            outs.append(self._attend(q, k, v, queries[None, None], keys[None, None], allowed,
                                     causal, key_mask, scale))
            query_groups.append(queries)
        out = outs[0] if len(outs) == 1 else concatenate(outs, axis=2)
        return ungroup(out, np.concatenate(query_groups)[None, None], time)

    def _attend(self, q, k, v, queries, keys, allowed, causal, key_mask, scale):
        if causal:
            allowed = allowed & (keys[..., None, :] <= queries[..., :, None])
        out, _ = grouped_attention(q, k, v, queries, keys, allowed, scale=scale,
                                   key_mask=key_mask,
                                   dropout=self.dropout if self.drops_sparse_weights else None)
        return out

    def extra_repr(self):
        return (f"block={self.block}, num_window_blocks={self.num_window_blocks}, "
                f"global_blocks={self.global_blocks}, "
                f"num_random_blocks={self.num_random_blocks}, seed={self.seed}")


def _key_block_lists(counts):
    """(A, rows, blocks) counts -> the key blocks of each row, each block listed as often as it
    is counted, padded to one width: (A, rows, width) ints and the bool array of real slots."""
    flat = counts.reshape(-1, counts.shape[-1])
    totals = flat.sum(axis=1)
    width = int(totals.max())
    blocks = np.repeat(np.tile(np.arange(flat.shape[1]), flat.shape[0]), flat.ravel())
    row = np.repeat(np.arange(flat.shape[0]), totals)
    slot = np.arange(blocks.size) - np.repeat(np.cumsum(totals) - totals, totals)
    key_blocks = np.zeros((flat.shape[0], width), dtype=np.int64)
    key_blocks[row, slot] = blocks
    real = np.arange(width)[None, :] < totals[:, None]
    shape = counts.shape[:2] + (width,)
    return key_blocks.reshape(shape), real.reshape(shape)


# ---- BigBird as the released code and HuggingFace compute it -------------------------------------
# HuggingFace's BigBirdModel pads to a block multiple and uses the sparse pattern only above
# (5 + 2 r) blocks: 2 global, 3 in the window, r random and r more as a buffer.
def sparse_threshold(block: int, num_random_blocks: int) -> int:
    """The longest sequence BigBird attends in full: (5 + 2 r) blocks; longer ones are sparse."""
    return (5 + 2 * num_random_blocks) * block


def random_block_plan(time: int, block: int, num_random_blocks: int, heads: int, seed: int, *,
                      max_positions: int) -> np.ndarray:
    """The random key blocks of every non-global query block of each head, (heads, blocks - 2,
    r) ints, drawn as BigBird's released code and HuggingFace draw them in training:
    ``numpy.random.RandomState(seed)`` (HuggingFace seeds numpy with the layer's index before
    every call), permutations of the candidate blocks, and the first r blocks outside the row's
    window, the first block and the last block of the candidate range.

    The candidates follow HuggingFace's plan: for the lengths of the paper's experiments (1024,
    3072 and 4096 positions) every head draws among blocks 1 .. 1024 / block - 2 of a
    ``max_positions`` sequence; otherwise, when the sequence has more than 2 r + 5 blocks, every
    row draws among the first 2 r + 5 blocks (rows inside them among those outside their
    window), and with fewer blocks among all of them (half of r among the first r + 5 when
    there are more than r + 5).
    """
    rng = np.random.RandomState(seed)
    blocks = time // block
    r = num_random_blocks
    if time in (1024, 3072, 4096):
        last = 1024 // block - 1 if 1024 > 2 * block else max_positions // block - 1
        return np.stack([_paper_plan(rng, max_positions // block, r, last)[:blocks - 2]
                         for _ in range(heads)])
    if 2 * r + 5 < blocks:
        ends, per_part = [2 * r + 5, blocks], [r, 0]
    elif r + 5 < blocks:
        ends, per_part = [r + 5, blocks], [r // 2, r - r // 2]
    else:
        ends, per_part = [blocks], [r]
    offsets = np.concatenate([[0], np.cumsum(per_part)])
    starts = [0] + ends[:-1]
    plan = np.zeros((heads, blocks, r), dtype=np.int64)

    def draw(rows, part):
        columns = slice(offsets[part], offsets[part + 1])
        for row in rows:
            for head in range(heads):
                picked = _row_choice(rng, row, starts[part], ends[part], per_part[part])
                if len(picked) < per_part[part]:
                    raise ValueError(
                        f"random_block_plan: query block {row} of {blocks} has {len(picked)} "
                        f"blocks to draw {per_part[part]} random blocks from (time={time}, "
                        f"block={block}); use fewer random blocks or a longer sequence")
                plan[head, row, columns] = picked

    for part in range(len(ends)):
        if part > 0:
            if per_part[part]:        # the rows of the earlier parts draw in this part too
                draw(range(1, ends[part - 1]), part)
            for earlier in range(part):
                if per_part[earlier]:
                    draw(range(ends[part - 1], ends[part]), earlier)
        if per_part[part]:
            draw(range(max(starts[part], 1), ends[part]), part)
    return plan[:, 1:blocks - 1]


def _row_choice(rng, row, start, end, count):
    """``count`` blocks of ``start .. end - 1`` in a random order, leaving out the row's window,
    the first block and the last of the range (and for the second and the second-to-last row
    the block that the other one of them already sees)."""
    illegal = {row - 1, row, row + 1, 0, end - 1}
    if row == 1:
        illegal.add(end - 2)
    if row == end - 2:
        illegal.add(1)
    order = rng.permutation(np.arange(start, end, dtype=np.int32))
    return [block for block in order if block not in illegal][:count]


def _paper_plan(rng, blocks, r, last):
    """The plan of the paper's lengths: row i (1 .. blocks - 2) draws r blocks among 1 ..
    ``last`` - 1 outside its window (the released code's exclusions, kept as they are)."""
    middle = np.arange(1, blocks - 1, dtype=np.int32)
    plan = np.zeros((blocks - 2, r), dtype=np.int64)
    for i in range(1, blocks - 1):
        if i == 1:
            candidates = middle[2:last]
        elif i == 2:
            candidates = middle[3:last]
        elif i in (blocks - 3, blocks - 2):
            candidates = middle[:last]
        elif i - 2 > last:
            candidates = middle[:last]
        elif i + 1 == last:
            candidates = middle[:i - 2]
        else:
            candidates = np.concatenate((middle[:i - 2], middle[i + 1:last]))
        plan[i - 1] = rng.permutation(candidates)[:r]
    return plan


class BigBirdBlockSparseAttention(BlockSparseAttention):
    """BigBird-ITC as Zaheer et al.'s released code and HuggingFace's ``BigBirdModel`` compute it,
    so that their checkpoints give their outputs: blocks of ``block`` positions, the first and
    the last block global, a window of 3 blocks, and ``num_random_blocks`` random blocks per
    query block that every head draws for itself (``random_block_plan`` with the layer's
    ``seed``, the same at every call).

    In evaluation HuggingFace draws nothing: every random block is block 0, which each row then
    counts r + 1 times in its softmax. This core does the same (``model.eval()``), so that
    outputs match; in training it uses the seeded plan.

    Sequences of at most ``sparse_threshold(block, r)`` positions get full attention (with
    dropout ``dropout``), and so do queries fewer than the keys (a key/value cache). Longer ones
    are padded to a multiple of ``block`` (the padding hidden by the key mask, its outputs
    dropped), attended sparsely without attention dropout, and the outputs of padded queries
    are zero, as HuggingFace's. ``max_positions`` (the model's ``max_position_embeddings``)
    matters only for the paper's lengths (see ``random_block_plan``).
    """

    drops_sparse_weights = False

    def __init__(self, block: int, num_random_blocks: int = 3, *, seed: int,
                 max_positions: int, dropout: float = 0.0) -> None:
        super().__init__(block, 3, (0, -1), 0, dropout=dropout)
        name = "BigBirdBlockSparseAttention"
        self.random_blocks = checks.int_at_least(num_random_blocks, 0, "num_random_blocks", name)
        self.seed = int(seed)
        self.max_positions = checks.positive_int(max_positions, "max_positions", name)

    def block_counts(self, time: int, heads: int) -> tuple[np.ndarray, np.ndarray]:
        """The window and the global blocks, plus each head's random blocks (block 0 r times in
        evaluation)."""
        counts, is_global = super().block_counts(time, heads)
        counts = np.repeat(counts, heads, axis=0)
        blocks = time // self.block
        if self.training:
            plan = random_block_plan(time, self.block, self.random_blocks, heads, self.seed,
                                     max_positions=self.max_positions)
        else:
            plan = np.zeros((heads, blocks - 2, self.random_blocks), dtype=np.int64)
        head, row = np.indices(plan.shape)[:2]
        np.add.at(counts, (head, row + 1, plan), 1)
        return counts, is_global

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        time = k.shape[2]
        if time <= sparse_threshold(self.block, self.random_blocks) or q.shape[2] != time:
            return FullAttention.forward(self, q, k, v, mask=mask, bias=bias, causal=causal,
                                         key_mask=key_mask, need_weights=need_weights)
        padding = -time % self.block
        if padding and (mask is not None or bias is not None):
            raise ValueError(f"BigBirdBlockSparseAttention: the sequence length {time} is not a "
                             f"multiple of block={self.block}, and a mask or bias cannot be "
                             "padded for you; give a multiple of the block size")
        real = (np.ones((q.shape[0], time), dtype=bool) if key_mask is None
                else np.asarray(key_mask.numpy() if isinstance(key_mask, Tensor)
                                else q.backend.to_numpy(q.backend.asarray(key_mask)), dtype=bool))
        if padding:
            q, k, v = (_pad_time(x, padding) for x in (q, k, v))
            real = np.pad(real, ((0, 0), (0, padding)))
        out, weights = super().forward(q, k, v, mask=mask, bias=bias, causal=causal,
                                       key_mask=real, need_weights=need_weights)
        out = out * tensor(real[:, None, :, None], dtype=out.dtype, backend=out.backend.name)
        if padding:
            out = out[:, :, :time]
            weights = None if weights is None else weights[:, :, :time, :time]
        return out, weights

    def extra_repr(self):
        return (f"block={self.block}, num_random_blocks={self.random_blocks}, seed={self.seed}, "
                f"max_positions={self.max_positions}")


def _pad_time(x, padding):
    """(batch, heads, time, d) with ``padding`` rows of zeros after the last position."""
    return concatenate([x, zeros(x.shape[0], x.shape[1], padding, x.shape[3], dtype=x.dtype,
                                 backend=x.backend.name)], axis=2)
