"""The character-level tokenizer: one token per Unicode character.

The simplest tokenizer there is, and the one of Karpathy's char-RNN and nanoGPT's Shakespeare
demo: the vocabulary is the set of characters of a training text, a text becomes the list of its
characters, and decoding joins them. Nothing is ever split badly, but sequences are long and the
model must learn spelling. A character the vocabulary lacks becomes the unk token, or is an error
when there is none.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

from .base import Tokenizer
from .training import texts_between

CHAR_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}
FILE_NAME = "char_tokenizer.json"


class CharTokenizer(Tokenizer):
    """One token per character of ``vocab`` (tokens in id order; special tokens may be longer).

    ``special_tokens`` default to none; ``CharTokenizer.train`` gives ``<pad> <unk> <bos>
    <eos>``. The template defaults to adding no special token (``"$A"``); pass e.g.
    ``{"single": "<bos> $A <eos>", "pair": "<bos> $A <eos> $B:1 <eos>:1"}`` for framed sequences.
    """

    kind = "char"

    @classmethod
    def train(cls, text: str | Iterable[str], *, special_tokens: dict[str, str] | None = None,
              template: dict | None = None,
              model_max_length: int | None = None) -> CharTokenizer:
        """The special tokens (default ``<pad> <unk> <bos> <eos>``; ``{}`` for none), then the
        characters of ``text`` (a str or an iterable of str) in code-point order."""
        special_tokens = CHAR_SPECIALS if special_tokens is None else special_tokens
        specials = list(dict.fromkeys(special_tokens.values()))
        chars = sorted({char for piece in texts_between(text, specials) for char in piece})
        return cls(list(dict.fromkeys(specials + chars)), special_tokens=special_tokens,
                   template=template, model_max_length=model_max_length)

    def _tokenize(self, text: str) -> list[str]:
        return list(text)

    def _decode(self, ids: list[int]) -> str:
        return "".join(self.id_to_token[index] for index in ids)

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``char_tokenizer.json``: the ``state_dict()``."""
        self._save_state(directory, FILE_NAME)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> CharTokenizer:
        return cls._from_state_file(directory, FILE_NAME)
