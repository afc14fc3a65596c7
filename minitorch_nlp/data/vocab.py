"""A token <-> id table with the special tokens a sequence-to-sequence model needs."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

DEFAULT_SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class Vocab:
    """Maps tokens (strings) to ids and back.

    The specials come first, so with the default specials ``<pad>`` is 0, ``<bos>`` 1, ``<eos>`` 2
    and ``<unk>`` 3; the other tokens follow in the order given (repeats and specials dropped).
    ``pad_id`` / ``bos_id`` / ``eos_id`` / ``unk_id`` are the ids of ``<pad>``, ``<bos>``,
    ``<eos>``, ``<unk>``, or None when ``specials`` leaves one out. Encoding a token the table
    does not hold gives ``unk_id`` (an error when there is no ``<unk>``).

    >>> vocab = Vocab(["a", "b"])
    >>> vocab.encode(["b", "a", "z"])
    [5, 4, 3]
    >>> vocab.decode([1, 5, 4, 2, 0])
    ['b', 'a']
    """

    def __init__(self, tokens: Iterable[str], specials: Sequence[str] = DEFAULT_SPECIALS):
        self.specials = tuple(specials)
        if len(set(self.specials)) != len(self.specials):
            raise ValueError(f"Vocab: specials {self.specials} hold a token twice")
        self.itos: list[str] = list(self.specials)
        self.stoi: dict[str, int] = {token: index for index, token in enumerate(self.itos)}
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"Vocab: tokens must be str, got {type(token).__name__} {token!r}")
            if token not in self.stoi:
                self.stoi[token] = len(self.itos)
                self.itos.append(token)
        self.pad_id = self.stoi.get("<pad>")
        self.bos_id = self.stoi.get("<bos>")
        self.eos_id = self.stoi.get("<eos>")
        self.unk_id = self.stoi.get("<unk>")

    @classmethod
    def build(cls, sequences: Iterable[Iterable[str]], min_count: int = 1,
              specials: Sequence[str] = DEFAULT_SPECIALS) -> Vocab:
        """The vocabulary of the tokens seen at least ``min_count`` times in ``sequences``, most
        frequent first (ties in alphabetical order, so the ids do not depend on input order)."""
        if isinstance(sequences, str):
            raise TypeError("Vocab.build: pass sequences of tokens (e.g. a list of lists of str), "
                            "not one string")
        counts = Counter(token for sequence in sequences for token in sequence)
        kept = sorted((token for token, count in counts.items() if count >= min_count),
                      key=lambda token: (-counts[token], token))
        return cls(kept, specials=specials)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and (self.itos, self.specials) == (other.itos,
                                                                          other.specials)

    def __repr__(self) -> str:
        preview = ", ".join(repr(token) for token in self.itos[:8])
        more = ", ..." if len(self.itos) > 8 else ""
        return f"Vocab(size={len(self)}, [{preview}{more}])"

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """The ids of ``tokens``; an unknown token becomes ``unk_id``. No <bos>/<eos> is added."""
        if isinstance(tokens, str):
            raise TypeError(f"Vocab.encode: pass a list of tokens, not the string {tokens!r} "
                            "(split it first, e.g. list(text) or text.split())")
        ids = []
        for token in tokens:
            index = self.stoi.get(token, self.unk_id)
            if index is None:
                raise ValueError(f"Vocab.encode: token {token!r} is not in the vocabulary and "
                                 "the vocabulary has no '<unk>'")
            ids.append(index)
        return ids

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> list[str]:
        """The tokens of ``ids`` (ints or an integer array).

        With ``strip_special`` (the default) decoding stops at the first ``<eos>`` and drops
        ``<pad>`` and ``<bos>``, which turns a model's padded output into its answer; ``<unk>``
        is kept, since it stands for a real token.
        """
        tokens = []
        for index in ids:
            index = int(index)
            if not 0 <= index < len(self.itos):
                raise ValueError(f"Vocab.decode: id {index} is outside the vocabulary "
                                 f"(ids 0..{len(self.itos) - 1})")
            if strip_special:
                if index == self.eos_id:
                    break
                if index in (self.pad_id, self.bos_id):
                    continue
            tokens.append(self.itos[index])
        return tokens

    def state_dict(self) -> dict:
        """A JSON-able description: ``Vocab.from_state_dict(v.state_dict()) == v``."""
        return {"tokens": list(self.itos[len(self.specials):]), "specials": list(self.specials)}

    @classmethod
    def from_state_dict(cls, state: dict) -> Vocab:
        return cls(state["tokens"], specials=state["specials"])
