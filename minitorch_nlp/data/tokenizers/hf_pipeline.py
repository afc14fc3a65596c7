"""The text pipeline of a HuggingFace ``tokenizer.json`` with a Unigram model (T5, mBART).

HuggingFace's ``tokenizers`` does not run sentencepiece's normalizer; it rebuilds it from parts,
each a section of ``tokenizer.json``, and the parts do not behave exactly as sentencepiece does
(trailing spaces give a ``▁`` token, every whitespace character splits words, ...). So that the
ids are HuggingFace's, this module runs the parts themselves:

* ``normalizer``: ``Precompiled`` (sentencepiece's compiled character map, applied HuggingFace's
  way: per grapheme cluster shorter than 6 UTF-8 bytes, the *shortest* key the cluster starts
  with replaces the whole cluster; otherwise character by character), ``Replace`` (a string or a
  regular expression), ``Strip``, ``Lowercase``, ``NFC`` / ``NFD`` / ``NFKC`` / ``NFKD`` and a
  ``Sequence`` of these;
* ``pre_tokenizer``: ``WhitespaceSplit`` (cut at every Unicode whitespace character, which is
  dropped) and ``Metaspace`` (each space becomes the replacement character ``▁``; one goes in
  front of each word (``prepend_scheme`` "always"), of the text's first word only ("first") or
  never; with ``split`` the text is cut before each ``▁``), or a ``Sequence`` of these;
* ``decoder``: ``Metaspace`` (``▁`` reads as a space; the leading one is dropped unless
  ``prepend_scheme`` is "never"), alone or in a ``Sequence`` with ``ByteFallback`` and ``Fuse``.

Anything else is refused, naming the component, rather than tokenized differently. Grapheme
clusters are approximated as a character with the combining marks (categories M*), zero-width
joiners and the characters joined after them, which covers the accents and emoji sequences
normalization tables hold; Python has no full UAX #29 segmentation.
"""
from __future__ import annotations

import base64
import functools
import re
import unicodedata

from .base import CharMap, char_class
from .sentencepiece_model import CharsMap

# Rust's char::is_whitespace (Unicode White_Space), which WhitespaceSplit cuts at.
WHITESPACE = re.compile("[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f"
                        "\u3000]+")
ZERO_WIDTH_JOINER = "\u200d"
PREPEND_SCHEMES = ("always", "first", "never")


@functools.cache
def _joiners() -> re.Pattern:
    """The characters that join the one before them into a cluster."""
    return re.compile(f"[{char_class('M')}{ZERO_WIDTH_JOINER}]")


def _joins_before(char: str) -> bool:
    """Whether ``char`` joins the cluster of the character before it."""
    return unicodedata.category(char)[0] == "M" or char == ZERO_WIDTH_JOINER


def _graphemes(text: str) -> list[str]:
    """``text`` cut into (approximate) grapheme clusters; see the module docstring."""
    clusters = []
    for char in text:
        if clusters and (_joins_before(char) or clusters[-1].endswith(ZERO_WIDTH_JOINER)
                         or (clusters[-1] == "\r" and char == "\n")):
            clusters[-1] += char
        else:
            clusters.append(char)
    return clusters


def _unknown(section: str, spec: dict, known, where: str) -> ValueError:
    return ValueError(f"{where}: tokenizer.json has a {spec.get('type')!r} {section}, which "
                      f"minitorch_nlp does not read (it reads {', '.join(known)})")


class _Precompiled:
    """HuggingFace's ``Precompiled`` normalizer. The text is mapped one space-separated chunk at a
    time, each chunk's result cached, and a chunk of one-character clusters (no combining mark,
    joiner or CR LF) by ``str.translate``; a chunk that would join the space before it into a
    grapheme cluster (it starts with a combining mark) or the space after it (it ends with a
    zero-width joiner) sends its text through the mapping of the whole text."""

    def __init__(self, charsmap: bytes):
        self.charsmap = CharsMap(charsmap)
        self.space = self._first(" ") or " "
        self._chunks = {}
        self._char_table = CharMap(lambda char: self._first(char) or char)

    def _first(self, text: str) -> str | None:
        found = self.charsmap.first_prefix(text.encode("utf-8"), 0)
        return None if found is None else found[1].decode("utf-8")

    def __call__(self, text: str) -> str:
        chunks, out = text.split(" "), []
        for index, chunk in enumerate(chunks):
            if (index and chunk and _joins_before(chunk[0])) or chunk.endswith(ZERO_WIDTH_JOINER):
                return self._whole(text)
            if chunk not in self._chunks:
                if len(self._chunks) >= 100_000:
                    self._chunks.clear()
                self._chunks[chunk] = (self._whole(chunk) if "\r\n" in chunk
                                       or _joiners().search(chunk)
                                       else chunk.translate(self._char_table))
            out.append(self._chunks[chunk])
        return self.space.join(out)

    def _whole(self, text: str) -> str:
        out = []
        for cluster in _graphemes(text):
            whole = self._first(cluster) if len(cluster.encode("utf-8")) < 6 else None
            if whole is not None:
                out.append(whole)
            else:
                out.extend(self._first(char) or char for char in cluster)
        return "".join(out)


def _pattern(spec: dict, where: str) -> re.Pattern:
    (kind, body), = spec["pattern"].items()
    if kind == "String":
        return re.compile(re.escape(body))
    try:
        return re.compile(body)
    except re.error as error:
        raise ValueError(f"{where}: tokenizer.json's Replace pattern {body!r} is not a regular "
                         f"expression Python reads ({error})") from None


NORMALIZERS = ("Precompiled", "Replace", "Strip", "Lowercase", "NFC", "NFD", "NFKC", "NFKD",
               "Sequence")


def _normalizer(spec: dict | None, where: str):
    """A function str -> str for a ``normalizer`` section (None: the identity)."""
    if spec is None:
        return lambda text: text
    kind = spec.get("type")
    if kind == "Sequence":
        steps = [_normalizer(part, where) for part in spec["normalizers"]]

        def run(text):
            for step in steps:
                text = step(text)
            return text
        return run
    if kind == "Precompiled":
        return _Precompiled(base64.b64decode(spec["precompiled_charsmap"]))
    if kind == "Replace":
        pattern, content = _pattern(spec, where), spec["content"]
        return lambda text: pattern.sub(lambda _: content, text)
    if kind == "Strip":
        left, right = spec.get("strip_left", True), spec.get("strip_right", True)

        def strip(text):
            text = text.lstrip() if left else text
            return text.rstrip() if right else text
        return strip
    if kind == "Lowercase":
        return str.lower
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return lambda text: unicodedata.normalize(kind, text)
    raise _unknown("normalizer", spec, NORMALIZERS, where)


class _Metaspace:
    def __init__(self, spec: dict, where: str):
        self.replacement = spec.get("replacement", "\u2581")
        if len(self.replacement) != 1:
            raise ValueError(f"{where}: tokenizer.json's Metaspace replacement must be one "
                             f"character, got {self.replacement!r}")
        scheme = spec.get("prepend_scheme")
        if scheme is None:  # files written before prepend_scheme
            scheme = "always" if spec.get("add_prefix_space", True) else "never"
        if scheme not in PREPEND_SCHEMES:
            raise ValueError(f"{where}: tokenizer.json's Metaspace prepend_scheme is {scheme!r}; "
                             f"minitorch_nlp reads {', '.join(PREPEND_SCHEMES)}")
        self.prepend_scheme, self.split = scheme, spec.get("split", True)
        self.cut = re.compile(f"(?={re.escape(self.replacement)})")

    def __call__(self, words: list[str], first: bool) -> tuple[list[str], bool]:
        out = []
        for index, word in enumerate(words):
            word = word.replace(" ", self.replacement)
            if ((self.prepend_scheme == "always" or (self.prepend_scheme == "first" and first
                                                      and index == 0))
                    and not word.startswith(self.replacement)):
                word = self.replacement + word
            out += [piece for piece in self.cut.split(word) if piece] if self.split else [word]
        return out, first


def _whitespace_split(words: list[str], first: bool) -> tuple[list[str], bool]:
    starts_with_space = bool(words) and WHITESPACE.match(words[0]) is not None
    return [w for word in words for w in WHITESPACE.split(word) if w], first and not \
        starts_with_space


PRE_TOKENIZERS = ("WhitespaceSplit", "Metaspace", "Sequence")


def _pre_tokenizer(spec: dict | None, where: str) -> list:
    """The steps of a ``pre_tokenizer`` section, each (words, first) -> (words, first): ``first``
    says that the first word starts the input (at offset 0)."""
    if spec is None:
        return []
    kind = spec.get("type")
    if kind == "Sequence":
        return [step for part in spec["pretokenizers"] for step in _pre_tokenizer(part, where)]
    if kind == "WhitespaceSplit":
        return [_whitespace_split]
    if kind == "Metaspace":
        return [_Metaspace(spec, where)]
    raise _unknown("pre_tokenizer", spec, PRE_TOKENIZERS, where)


DECODER_PARTS = ("Metaspace", "ByteFallback", "Fuse")


def _decoder(spec: dict | None, where: str) -> _Metaspace:
    """The Metaspace step of a ``decoder`` section (ByteFallback and Fuse beside it are what our
    decoding does anyway)."""
    parts = spec["decoders"] if spec and spec.get("type") == "Sequence" else [spec or {}]
    kinds = [part.get("type") for part in parts]
    if kinds.count("Metaspace") != 1 or not set(kinds) <= set(DECODER_PARTS):
        raise ValueError(f"{where}: tokenizer.json's decoder is {' + '.join(map(str, kinds))}, "
                         "which minitorch_nlp does not read (it reads a Metaspace decoder, alone "
                         "or in a Sequence with ByteFallback and Fuse)")
    return _Metaspace(parts[kinds.index("Metaspace")], where)


class HFPipeline:
    """A ``tokenizer.json``'s ``normalizer``, ``pre_tokenizer`` and ``decoder`` sections (``spec``
    holds the three, as in the file): ``words(text, first)`` gives the words the model segments
    (``first``: the text starts the input, for ``prepend_scheme`` "first"); ``replacement`` and
    ``strips_prefix`` say how decoding reads the pieces."""

    def __init__(self, spec: dict, where: str):
        unknown = sorted(set(spec) - {"normalizer", "pre_tokenizer", "decoder"})
        if unknown:
            raise ValueError(f"{where}: hf_pipeline holds {unknown}; it takes the normalizer, "
                             "pre_tokenizer and decoder sections of a tokenizer.json")
        self.spec = {key: spec.get(key) for key in ("normalizer", "pre_tokenizer", "decoder")}
        self.normalize = _normalizer(spec.get("normalizer"), where)
        self.steps = _pre_tokenizer(spec.get("pre_tokenizer"), where)
        decoder = _decoder(spec.get("decoder"), where)
        self.replacement = decoder.replacement
        self.strips_prefix = decoder.prepend_scheme != "never"

    def words(self, text: str, first: bool = True) -> list[str]:
        words = [self.normalize(text)]
        for step in self.steps:
            words, first = step(words, first)
        return [word for word in words if word]
