"""Synthetic sequence-to-sequence tasks: copy, reverse, sort and multi-digit addition; and one
classification task, sorted or not.

Each task returns a list of ``(source_tokens, target_tokens)`` pairs (lists of str) and is
deterministic given ``seed``. The number-words translation task lives in
:mod:`minitorch_nlp.data.numbers`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Pair = tuple[list[str], list[str]]


def _symbol_sequences(n: int, min_len: int, max_len: int, alphabet: Sequence[str], seed: int,
                      where: str) -> list[list[str]]:
    if n < 0:
        raise ValueError(f"{where}: n must be >= 0, got {n}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"{where}: need 1 <= min_len <= max_len, got min_len={min_len}, "
                         f"max_len={max_len}")
    symbols = list(alphabet)
    if not symbols or len(set(symbols)) != len(symbols):
        raise ValueError(f"{where}: the alphabet must hold distinct symbols, got {alphabet!r}")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n)
    return [[symbols[i] for i in rng.integers(0, len(symbols), size=length)]
            for length in lengths]


def _task(n: int, min_len: int, max_len: int, alphabet: Sequence[str], seed: int, where: str,
          target: Callable[[list[str]], list[str]]) -> list[Pair]:
    return [(source, target(source))
            for source in _symbol_sequences(n, min_len, max_len, alphabet, seed, where)]


def copy_task(n: int, min_len: int, max_len: int, alphabet: Sequence[str] = "abcdefghij",
              seed: int = 0) -> list[Pair]:
    """``n`` random sequences of ``min_len .. max_len`` symbols drawn from ``alphabet`` (a string
    of one-character symbols, or a sequence of tokens); the target is the source."""
    return _task(n, min_len, max_len, alphabet, seed, "copy_task", list)


def reverse_task(n: int, min_len: int, max_len: int, alphabet: Sequence[str] = "abcdefghij",
                 seed: int = 0) -> list[Pair]:
    """As :func:`copy_task`; the target is the source reversed."""
    return _task(n, min_len, max_len, alphabet, seed, "reverse_task", lambda s: s[::-1])


def sort_task(n: int, min_len: int, max_len: int, alphabet: Sequence[str] = "abcdefghij",
              seed: int = 0) -> list[Pair]:
    """As :func:`copy_task`; the target is the source sorted by each symbol's position in
    ``alphabet`` (repeats kept)."""
    rank = {symbol: index for index, symbol in enumerate(alphabet)}
    return _task(n, min_len, max_len, alphabet, seed, "sort_task",
                 lambda s: sorted(s, key=rank.__getitem__))


def addition_task(n: int, max_digits: int, seed: int = 0) -> list[Pair]:
    """``n`` sums ``a + b`` as character tokens: "123+45" -> "168", i.e.
    ``(["1", "2", "3", "+", "4", "5"], ["1", "6", "8"])``.

    Each operand first draws its number of digits uniformly from 1 .. ``max_digits``, then a number
    with that many digits uniformly, so short and long operands are equally common.
    """
    if n < 0 or max_digits < 1:
        raise ValueError(f"addition_task: need n >= 0 and max_digits >= 1, got n={n}, "
                         f"max_digits={max_digits}")
    if max_digits > 18:
        raise ValueError(f"addition_task: max_digits must be at most 18 (int64 operands), "
                         f"got {max_digits}")
    rng = np.random.default_rng(seed)
    digits = rng.integers(1, max_digits + 1, size=(n, 2))
    low = np.where(digits == 1, 0, 10 ** (digits - 1))
    operands = rng.integers(low, 10 ** digits)
    return [(list(str(a)) + ["+"] + list(str(b)), list(str(a + b)))
            for a, b in operands.tolist()]


def sorted_or_not_task(n: int, length: int, alphabet: Sequence[str] = "abcdefghij",
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A classification task: ``n`` sequences of ``length`` symbols, each labelled 1 when it is
    sorted (by the symbols' positions in ``alphabet``) and 0 otherwise. The even-numbered ones
    are :func:`sort_task`'s sorted targets, the odd-numbered ones its random sources (labelled
    by whether they happen to be sorted). Deciding it takes comparing neighbours.

    Returns ``(ids, labels)``: ids (n, 1 + length) int64 ready for a BERT classifier, id 1 (a
    [CLS]) first, then each symbol as 2 + its index in ``alphabet`` (id 0 is left for padding:
    the vocabulary has len(alphabet) + 2 ids); labels (n,) int64."""
    rank = {symbol: index for index, symbol in enumerate(alphabet)}
    pairs = sort_task(n, length, length, alphabet, seed)
    sequences = [target if i % 2 == 0 else source for i, (source, target) in enumerate(pairs)]
    ids = np.array([[1] + [2 + rank[s] for s in sequence] for sequence in sequences],
                   dtype=np.int64).reshape(n, 1 + length)
    labels = np.array([int(sequence == target) for sequence, (_, target) in zip(sequences, pairs)],
                      dtype=np.int64)
    return ids, labels
