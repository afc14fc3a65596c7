"""Learning a subword vocabulary by merging pairs of symbols: shared by BPE and WordPiece training.

Both start from words split into their smallest symbols (bytes for byte-level BPE, characters for
WordPiece) and repeatedly fuse the best adjacent pair of symbols into a new symbol, until the
vocabulary has the size asked for. "Best" is one of two scores:

* ``"frequency"``: the most frequent pair, ``score(a, b) = count(ab)``. This is BPE (Sennrich et
  al., 2016), and what HuggingFace's ``tokenizers`` uses for WordPiece too;
* ``"likelihood"``: the pair whose parts are most often seen *together* rather than apart,
  ``score(a, b) = count(ab) / (count(a) * count(b))``, HuggingFace's course's likelihood-free
  stand-in for the original WordPiece (Schuster & Nakajima, 2012), which picks the merge that most
  raises the likelihood of a language model trained on the corpus.

The text is never re-scanned: it is summarised once as ``{word: count}``, every pair's count is
kept up to date as words change, and each merge only revisits the words that hold the merged pair
(``where``). A heap gives the best pair; entries whose score went stale are skipped when they
surface (every change of score pushes a fresh entry), so a merge costs about the number of words it
touches, not the size of the corpus.
"""
from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator


def texts_between(text: str | Iterable[str], special_tokens: Iterable[str]) -> Iterator[str]:
    """The pieces of ``text`` (a str or an iterable of str) between the special tokens, which
    training must not learn from (they are whole tokens already)."""
    chunks = [text] if isinstance(text, str) else text
    longest_first = sorted(special_tokens, key=len, reverse=True)
    if not longest_first:
        yield from chunks
        return
    split = re.compile("|".join(map(re.escape, longest_first)))
    for chunk in chunks:
        yield from split.split(chunk)


def _merge_word(word: list[str], first: str, second: str, merged: str) -> list[str]:
    """``word`` with each ``first second``, left to right, replaced by ``merged``."""
    new, position = [], 0
    while position < len(word):
        if word[position] == first and word[position + 1:position + 2] == [second]:
            new.append(merged)
            position += 2
        else:
            new.append(word[position])
            position += 1
    return new


def learn_merges(word_counts: dict[tuple[str, ...], int], num_new_symbols: int, *,
                 join: Callable[[str, str], str], score: str = "frequency",
                 min_frequency: int = 2) -> list[tuple[str, str]]:
    """The merges, in order, that create ``num_new_symbols`` new symbols (fewer when no pair is
    seen ``min_frequency`` times any more).

    ``word_counts`` maps each word, as a tuple of its initial symbols, to its count; ``join(a, b)``
    is the symbol a merge of ``a`` and ``b`` makes; ``score`` is ``"frequency"`` or
    ``"likelihood"`` (see the module docstring). Ties go to the alphabetically smallest pair, so
    the result does not depend on the order of the words.
    """
    if score not in ("frequency", "likelihood"):
        raise ValueError(f"learn_merges: score must be 'frequency' or 'likelihood', got {score!r}")
    words, counts = [list(word) for word in word_counts], list(word_counts.values())
    pair_count, symbol_count = Counter(), Counter()
    where = defaultdict(set)     # pair -> the words (indices) that may hold it
    pairs_of = defaultdict(set)  # symbol -> the pairs it is part of
    changed = set()              # the pairs whose score changed in this merge

    def add(pair, count):
        pair_count[pair] += count
        if pair_count[pair]:
            pairs_of[pair[0]].add(pair)
            pairs_of[pair[1]].add(pair)
        else:
            del pair_count[pair]
            pairs_of[pair[0]].discard(pair)
            pairs_of[pair[1]].discard(pair)
        changed.add(pair)

    def value(pair):
        if score == "frequency":
            return pair_count[pair]
        return pair_count[pair] / (symbol_count[pair[0]] * symbol_count[pair[1]])

    for index, (word, count) in enumerate(zip(words, counts)):
        for symbol in word:
            symbol_count[symbol] += count
        for pair in zip(word, word[1:]):
            add(pair, count)
            where[pair].add(index)
    heap = [(-value(pair), pair) for pair in pair_count]
    heapq.heapify(heap)
    merges, known = [], set(symbol_count)
    made = 0
    while made < num_new_symbols and heap:
        stored, pair = heapq.heappop(heap)
        if pair not in pair_count or -stored != value(pair) or pair_count[pair] < min_frequency:
            continue  # stale (a fresher entry exists, or the pair is gone) or too rare
        first, second = pair
        merged = join(first, second)
        merges.append(pair)
        made += merged not in known
        known.add(merged)
        changed.clear()
        delta = Counter()  # pair -> change of its count
        for index in where.pop(pair):
            word, count = words[index], counts[index]
            new = _merge_word(word, first, second, merged)
            if len(new) == len(word):
                continue
            for old_pair in zip(word, word[1:]):
                delta[old_pair] -= count
            for new_pair in zip(new, new[1:]):
                delta[new_pair] += count
                where[new_pair].add(index)
            fused = count * (len(word) - len(new))
            symbol_count[first] -= fused
            symbol_count[second] -= fused
            symbol_count[merged] += fused
            words[index] = new
        for changed_pair, change in delta.items():
            if change:
                add(changed_pair, change)
        if score == "likelihood":  # count(first) and count(second) fell: their pairs' scores rose
            changed |= pairs_of[first] | pairs_of[second]
        for changed_pair in changed:
            if changed_pair in pair_count:
                heapq.heappush(heap, (-value(changed_pair), changed_pair))
    return merges
