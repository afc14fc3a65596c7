"""Byte-level byte-pair encoding (BPE), the tokenizer of GPT-2 and RoBERTa.

BPE (Sennrich, Haddow & Birch, 2016, "Neural Machine Translation of Rare Words with Subword
Units", adapting Gage's 1994 compression scheme) starts from single symbols and learns *merges*:
the most frequent adjacent pair of symbols in the corpus becomes a new symbol, again and again,
until the vocabulary is as big as wanted. Frequent words end up as one token, rare words as a few
pieces, and nothing is ever out of vocabulary.

GPT-2 (Radford et al., 2019, "Language Models are Unsupervised Multitask Learners") runs BPE on
*bytes*: the 256 byte values are the starting symbols, so every string, in every script, with
emojis and control characters, encodes, and decoding gives back exactly the text that went in. Two
details make it work:

* ``bytes_to_unicode`` gives each byte a printable character (a space becomes ``Ġ``, a newline
  ``Ċ``), so that tokens are readable strings in ``vocab.json`` and ``merges.txt``;
* the text is first cut into *pre-tokens* with GPT-2's pattern
  ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
  (contractions, letter runs, digit runs and other symbols, each with at most one leading space,
  and runs of whitespace), and merges never cross a pre-token, so "dog." and "dog!" share "dog".
  Python's ``re`` has no ``\\p{L}`` (letters) or ``\\p{N}`` (numbers), so the character classes
  are built once from ``unicodedata``; ``\\s`` is Unicode's White_Space set, as in the ``regex``
  module GPT-2 used.

To encode a pre-token, apply the learned merges in the order they were learned (lowest rank
first) until none applies; the result is cached per pre-token (``WordCache``).
"""
from __future__ import annotations

import functools
import os
import re
from collections import Counter
from typing import NamedTuple
from collections.abc import Callable, Iterable, Sequence

from .base import (PLAIN_TEMPLATE, Tokenizer, WordCache, char_class, hf_model_max_length,
                   read_hf_special_tokens, read_json, roles_in, tokens_by_id, write_json,
                   write_text)
from .training import learn_merges, texts_between

# Unicode's White_Space property, which ``\s`` means in GPT-2's pattern (str.isspace() differs).
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
CONTRACTIONS = "'s|'t|'re|'ve|'m|'ll|'d"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> character table: printable Latin-1 bytes stand for themselves, the others
    (control characters, space, ...) for the characters from U+0100 on, in byte order. The dict's
    order is GPT-2's vocabulary order for the 256 byte tokens."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in printable}
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + len(table) - len(printable))
    return table


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {char: byte for byte, char in BYTE_TO_CHAR.items()}
LATIN1_TO_CHAR = str.maketrans({chr(byte): char for byte, char in BYTE_TO_CHAR.items()})


@functools.cache
def gpt2_pattern() -> re.Pattern:
    """GPT-2's pre-tokenisation pattern for Python's ``re`` (built on first use)."""
    letter, number, space = char_class("L"), char_class("N"), WHITESPACE
    return re.compile(rf"{CONTRACTIONS}| ?[{letter}]+| ?[{number}]+| ?[^{space}{letter}{number}]+"
                      rf"|[{space}]+(?![^{space}])|[{space}]+")


def pretokenize(text: str) -> list[str]:
    """GPT-2's pre-tokens of ``text``; they concatenate back to ``text``."""
    return gpt2_pattern().findall(text)


def _byte_chars(text: str) -> str:
    """The UTF-8 bytes of ``text``, one ``bytes_to_unicode`` character each (Latin-1 reads each
    byte as the character with that code)."""
    return text.encode("utf-8").decode("latin-1").translate(LATIN1_TO_CHAR)


def gpt2_template(special_tokens: dict) -> dict:
    """GPT-2 adds no special tokens; the second segment of a pair has token type 1."""
    return dict(PLAIN_TEMPLATE)


def roberta_template(special_tokens: dict) -> dict | None:
    """RoBERTa: ``<s> A </s>`` and ``<s> A </s> </s> B </s>``, token types all 0 (None without
    cls and sep tokens)."""
    cls, sep = special_tokens.get("cls"), special_tokens.get("sep")
    if cls is None or sep is None:
        return None
    return {"single": f"{cls} $A {sep}", "pair": f"{cls} $A {sep} {sep} $B {sep}"}


class Style(NamedTuple):
    """A model family's special tokens, template and HuggingFace tokenizer class."""
    special_tokens: dict
    template: Callable[[dict], dict | None]
    hf_class: str


STYLES = {
    "gpt2": Style({"bos": "<|endoftext|>", "eos": "<|endoftext|>", "unk": "<|endoftext|>"},
                  gpt2_template, "GPT2Tokenizer"),
    "roberta": Style({"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "cls": "<s>",
                      "sep": "</s>", "mask": "<mask>"}, roberta_template, "RobertaTokenizer"),
}


class ByteLevelBPETokenizer(Tokenizer):
    """Byte-level BPE over ``vocab`` (tokens in id order, written with ``bytes_to_unicode``
    characters) and ``merges`` (pairs of tokens, in the order they were learned).

    ``special_tokens`` and ``template`` default to GPT-2's (``<|endoftext|>``, no special token
    added); ``ByteLevelBPETokenizer.train(..., style="roberta")`` or a RoBERTa directory give
    RoBERTa's. ``decode(encode(text)) == text`` for every string, unless ``add_prefix_space``:
    then each stretch of text between special tokens that does not start with a space gets one
    (as HuggingFace's byte-level pre-tokenizer does), so that a first word is encoded as it is
    mid-sentence (``Ġworld``, not ``world``); RoBERTa's token-classification fine-tuning on
    pre-split words uses it, and ``decode`` keeps the added space.
    """

    kind = "bpe"

    def __init__(self, vocab: Sequence[str], merges: Iterable[Sequence[str]], *,
                 special_tokens: dict[str, str] | None = None,
                 extra_special_tokens: Iterable[str] = (), template: dict | None = None,
                 model_max_length: int | None = None, lstrip_tokens: Iterable[str] = (),
                 rstrip_tokens: Iterable[str] = (), add_prefix_space: bool = False):
        special_tokens = STYLES["gpt2"].special_tokens if special_tokens is None else special_tokens
        super().__init__(vocab, special_tokens=special_tokens,
                         extra_special_tokens=extra_special_tokens,
                         template=template or gpt2_template(special_tokens),
                         model_max_length=model_max_length, lstrip_tokens=lstrip_tokens,
                         rstrip_tokens=rstrip_tokens)
        self.merges = [tuple(pair) for pair in merges]
        self.add_prefix_space = bool(add_prefix_space)
        for first, second in self.merges:
            if first + second not in self.vocab:
                raise ValueError(f"{self.name}: merge {first!r} + {second!r} makes "
                                 f"{first + second!r}, which is not in the vocabulary")
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        # A character outside the byte table (as in "<mask>" or "[CLS]") stands for itself.
        self._token_bytes = [b"".join(bytes([CHAR_TO_BYTE[c]]) if c in CHAR_TO_BYTE
                                      else c.encode("utf-8") for c in token)
                             for token in self.id_to_token]
        self._pieces = WordCache(lambda pretoken: self._bpe(_byte_chars(pretoken)))

    @classmethod
    def train(cls, text: str | Iterable[str], vocab_size: int, *, style: str = "gpt2",
              special_tokens: dict[str, str] | None = None, min_frequency: int = 2,
              template: dict | None = None,
              model_max_length: int | None = None) -> ByteLevelBPETokenizer:
        """Learn a vocabulary of ``vocab_size`` tokens from ``text`` (a str or an iterable of
        str): the special tokens, the 256 bytes, then one token per merge (fewer when no pair is
        seen ``min_frequency`` times any more). ``style`` picks the default special tokens and
        template: ``"gpt2"`` or ``"roberta"``."""
        if style not in STYLES:
            raise ValueError(f"ByteLevelBPETokenizer.train: style must be one of {list(STYLES)}, "
                             f"got {style!r}")
        special_tokens = STYLES[style].special_tokens if special_tokens is None else special_tokens
        template = template or STYLES[style].template(special_tokens)
        if template is None:
            raise ValueError(f"ByteLevelBPETokenizer.train: style={style!r} needs cls and sep "
                             f"tokens, got special_tokens={special_tokens}")
        specials = list(dict.fromkeys(special_tokens.values()))
        alphabet = list(BYTE_TO_CHAR.values())
        if vocab_size < len(specials) + len(alphabet):
            raise ValueError(f"ByteLevelBPETokenizer.train: vocab_size={vocab_size} is too small "
                             f"for the 256 bytes and {len(specials)} special tokens")
        options = dict(special_tokens=special_tokens, template=template,
                       model_max_length=model_max_length)
        cls(specials + alphabet, [], **options)  # check the options before the long part
        words = Counter(_byte_chars(word) for piece in texts_between(text, specials)
                        for word in pretokenize(piece))
        merges = learn_merges({tuple(word): count for word, count in words.items()},
                              vocab_size - len(specials) - len(alphabet), join=str.__add__,
                              min_frequency=min_frequency)
        return cls(list(dict.fromkeys(specials + alphabet + [a + b for a, b in merges])), merges,
                   **options)

    def _bpe(self, word: str) -> list[str]:
        """Apply the merges to one pre-token, lowest rank first: each step merges every
        occurrence of the best-ranked adjacent pair, left to right (as GPT-2's encoder)."""
        parts, ranks, unranked = list(word), self.ranks, len(self.ranks)
        while len(parts) > 1:
            pair_ranks = [ranks.get(pair, unranked) for pair in zip(parts, parts[1:])]
            best = min(pair_ranks)
            if best == unranked:
                break
            merged, index = [], 0
            while index < len(parts):
                if index + 1 < len(parts) and pair_ranks[index] == best:
                    merged.append(parts[index] + parts[index + 1])
                    index += 2
                else:
                    merged.append(parts[index])
                    index += 1
            parts = merged
        return parts

    def _tokenize(self, text: str) -> list[str]:
        if self.add_prefix_space and not text.startswith(" "):
            text = " " + text
        return [token for word in pretokenize(text) for token in self._pieces[word]]

    def _decode(self, ids: list[int]) -> str:
        return b"".join(self._token_bytes[index] for index in ids).decode("utf-8", "replace")

    def _options(self) -> dict:
        return {"merges": [list(pair) for pair in self.merges],
                "add_prefix_space": self.add_prefix_space}

    def save(self, directory: str | os.PathLike) -> None:
        """HuggingFace's layout: ``vocab.json``, ``merges.txt``, ``tokenizer_config.json`` and
        ``special_tokens_map.json`` (``GPT2Tokenizer`` / ``RobertaTokenizer`` read them)."""
        os.makedirs(directory, exist_ok=True)
        style = STYLES["roberta" if self.template == roberta_template(self.special_tokens)
                       else "gpt2"]
        write_json(os.path.join(directory, "vocab.json"), self.vocab)
        write_text(os.path.join(directory, "merges.txt"),
                   "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in self.merges))
        write_json(os.path.join(directory, "tokenizer_config.json"), {
            **self._hf_config(style.hf_class, style.template(self.special_tokens)),
            "add_prefix_space": self.add_prefix_space})
        write_json(os.path.join(directory, "special_tokens_map.json"), self._special_tokens_map())

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> ByteLevelBPETokenizer:
        """Read a HuggingFace directory holding ``vocab.json`` and ``merges.txt``. The template is
        RoBERTa's when ``tokenizer_config.json`` names a Roberta tokenizer (or, with no config,
        when the vocabulary has ``<s>`` and ``</s>``), else GPT-2's."""
        directory = os.fspath(directory)
        config = read_json(os.path.join(directory, "tokenizer_config.json"), {})
        vocab = read_json(os.path.join(directory, "vocab.json"))
        with open(os.path.join(directory, "merges.txt"), encoding="utf-8") as file:
            merges = [line.split(" ") for line in file.read().split("\n")
                      if line and not line.startswith("#version")]
        bad = next((pair for pair in merges if len(pair) != 2), None)
        if bad is not None:
            raise ValueError(f"ByteLevelBPETokenizer: merges.txt line {' '.join(bad)!r} is not "
                             "two tokens separated by one space")
        named = config.get("tokenizer_class") or ""
        style = STYLES["roberta" if named.startswith("Roberta")
                       or (not named and {"<s>", "</s>"} <= vocab.keys()) else "gpt2"]
        found = read_hf_special_tokens(directory, config, roles_in(style.special_tokens, vocab))
        return cls(tokens_by_id(vocab, os.path.join(directory, "vocab.json")), merges,
                   **found._asdict(),
                   template=config.get("template") or style.template(found.special_tokens),
                   add_prefix_space=bool(config.get("add_prefix_space")),
                   model_max_length=hf_model_max_length(config))
