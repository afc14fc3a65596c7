"""Padding, masks and mini-batches for sequence-to-sequence training."""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from ..autograd import Tensor, int64, tensor

from .vocab import Vocab


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id lists to the longest one.

    Returns ``(ids, mask)``: an ``np.int64`` array (B, T) filled with ``pad_id`` after each
    sequence, and a bool array (B, T) that is True on real tokens.
    """
    lengths = [len(sequence) for sequence in sequences]
    width = max(lengths, default=0)
    ids = np.full((len(lengths), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(lengths), width), dtype=bool)
    for row, (sequence, length) in enumerate(zip(sequences, lengths)):
        ids[row, :length] = sequence
        mask[row, :length] = True
    return ids, mask


@dataclass
class Seq2SeqBatch:
    """One mini-batch of (source, target) pairs, right-padded with the vocabularies' pad ids.

    - ``src`` (B, S) int64 Tensor: the source tokens (no <bos>/<eos>);
      ``src_mask`` (B, S) bool numpy array, True on real tokens; ``src_lengths`` (B,) np.int64.
    - ``tgt_in`` (B, T) int64 Tensor: <bos> + target, the decoder's input (teacher forcing);
      ``tgt_out`` (B, T) int64 Tensor: target + <eos>, what the decoder must predict at each step;
      ``tgt_mask`` (B, T) bool numpy array, True where ``tgt_out`` is a real token (the loss mask).
    """

    src: Tensor
    src_mask: np.ndarray
    src_lengths: np.ndarray
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_mask: np.ndarray

    def __len__(self) -> int:
        return int(self.src_lengths.shape[0])


def _token_list(tokens, where: str) -> list:
    if isinstance(tokens, str):
        raise TypeError(f"make_batches: {where} is the string {tokens!r}; pairs must hold token "
                        "lists, e.g. list('abc') or 'four thousand'.split()")
    return list(tokens)


def make_batches(pairs: Sequence[tuple[Sequence[str], Sequence[str]]], src_vocab: Vocab,
                 tgt_vocab: Vocab, batch_size: int, shuffle: bool = True,
                 seed: int = 0) -> list[Seq2SeqBatch]:
    """Split ``(source_tokens, target_tokens)`` pairs into :class:`Seq2SeqBatch` mini-batches.

    With ``shuffle`` the pairs are put in a random order drawn from ``seed`` (the same order for
    the same seed); otherwise they keep their order. The last batch holds the remainder.
    """
    if batch_size < 1:
        raise ValueError(f"make_batches: batch_size must be >= 1, got {batch_size}")
    if tgt_vocab.bos_id is None or tgt_vocab.eos_id is None or tgt_vocab.pad_id is None:
        raise ValueError("make_batches: the target vocabulary needs '<pad>', '<bos>' and '<eos>'")
    if src_vocab.pad_id is None:
        raise ValueError("make_batches: the source vocabulary needs '<pad>'")
    order = np.arange(len(pairs))
    if shuffle:
        order = np.random.default_rng(seed).permutation(len(pairs))
    batches = []
    for start in range(0, len(pairs), batch_size):
        chosen = [pairs[index] for index in order[start:start + batch_size]]
        sources = [src_vocab.encode(_token_list(source, "a source")) for source, _ in chosen]
        targets = [tgt_vocab.encode(_token_list(target, "a target")) for _, target in chosen]
        src, src_mask = pad_sequences(sources, src_vocab.pad_id)
        tgt_in, _ = pad_sequences([[tgt_vocab.bos_id] + ids for ids in targets], tgt_vocab.pad_id)
        tgt_out, tgt_mask = pad_sequences([ids + [tgt_vocab.eos_id] for ids in targets],
                                          tgt_vocab.pad_id)
        batches.append(Seq2SeqBatch(
            src=tensor(src, dtype=int64), src_mask=src_mask,
            src_lengths=src_mask.sum(axis=1).astype(np.int64),
            tgt_in=tensor(tgt_in, dtype=int64), tgt_out=tensor(tgt_out, dtype=int64),
            tgt_mask=tgt_mask))
    return batches
