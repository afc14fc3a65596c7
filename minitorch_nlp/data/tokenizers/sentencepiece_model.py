"""Reading SentencePiece's ``.model`` files and running their normalizer, without the package.

A ``.model`` file (T5's ``spiece.model``, mBART's ``sentencepiece.bpe.model``) is a protocol
buffer, ``ModelProto`` of sentencepiece's ``sentencepiece_model.proto``: the pieces (each a string,
a score, and a type: normal, unknown, control, user-defined, unused or byte), the options training
used (``trainer_spec``: the model type, the special ids, byte fallback ...) and the normalizer
(``normalizer_spec``). The protobuf wire format is simple enough to read here (``read_message``):
a message is a run of fields, each a key ``field_number << 3 | wire_type`` followed by a varint, a
little-endian 4- or 8-byte value, or a length-prefixed byte string (strings and nested messages).

The normalizer (``Normalizer``) rewrites the text before segmentation, as sentencepiece's
``normalizer.cc`` does:

* a *compiled character map* (``precompiled_charsmap``) replaces the longest prefix of the rest of
  the text that it knows by its normalized form (for ``nmt_nfkc``: NFKC, plus mapping control
  characters away and odd spaces to a space). It is a Darts-clone double-array trie over UTF-8
  bytes whose leaves give offsets into a blob of NUL-terminated replacement strings;
* ``remove_extra_whitespaces`` drops leading and trailing spaces and squeezes runs of spaces to
  one; ``add_dummy_prefix`` puts a space in front, so that a text's first word is segmented as it
  is mid-sentence; ``escape_whitespaces`` writes each space as ``▁`` (U+2581).
"""
from __future__ import annotations

import re
import struct

from .base import CharMap
from typing import NamedTuple

SPACE_SYMBOL = "\u2581"  # ▁, sentencepiece's visible space
MULTIPLE_SPACES = re.compile(" {2,}")

# sentencepiece_model.proto: ModelProto.SentencePiece.Type and TrainerSpec.ModelType
PIECE_TYPES = {1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused",
               6: "byte"}
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


def _varint(data: bytes, position: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise ValueError(f"{where}: the protobuf ends inside a varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


def read_message(data: bytes, where: str) -> dict[int, list]:
    """The fields of one protobuf message: field number -> its values in order (ints for varints,
    ``bytes`` for the fixed-width and length-delimited ones, which the caller interprets)."""
    fields, position = {}, 0
    while position < len(data):
        key, position = _varint(data, position, where)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(data, position, where)
        elif wire_type in (1, 2, 5):
            if wire_type == 2:
                size, position = _varint(data, position, where)
            else:
                size = 8 if wire_type == 1 else 4
            value, position = data[position:position + size], position + size
            if position > len(data):
                raise ValueError(f"{where}: field {number} runs past the end of the protobuf")
        else:
            raise ValueError(f"{where}: field {number} has wire type {wire_type}, which a "
                             "SentencePiece model never uses (is this a .model file?)")
        fields.setdefault(number, []).append(value)
    return fields


def _last(fields, number, default):
    return fields[number][-1] if number in fields else default


def _signed(value: int) -> int:
    """An int32 written as a varint (negative ones take ten bytes, two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


class Piece(NamedTuple):
    piece: str
    score: float
    type: str  # one of PIECE_TYPES' values


class SentencePieceModel(NamedTuple):
    """What minitorch_nlp uses of a ``ModelProto``."""
    pieces: list[Piece]
    model_type: str
    byte_fallback: bool
    treat_whitespace_as_suffix: bool
    special_ids: dict  # role (unk, bos, eos, pad) -> piece id, for the roles the model has
    normalizer: dict  # the keyword arguments of Normalizer


def read_sentencepiece_model(data: bytes, where: str = "sentencepiece model") -> SentencePieceModel:
    """Parse the bytes of a ``.model`` file."""
    model = read_message(data, where)
    pieces = []
    for raw in model.get(1, []):
        fields = read_message(raw, where)
        code = _last(fields, 3, 1)
        if code not in PIECE_TYPES:
            raise ValueError(f"{where}: piece {len(pieces)} has the unknown type {code}")
        pieces.append(Piece(_last(fields, 1, b"").decode("utf-8"),
                            struct.unpack("<f", _last(fields, 2, b"\0\0\0\0"))[0],
                            PIECE_TYPES[code]))
    if not pieces:
        raise ValueError(f"{where}: the model has no pieces (is this a SentencePiece .model?)")
    trainer = read_message(_last(model, 2, b""), where)
    normalizer = read_message(_last(model, 3, b""), where)
    model_type = _last(trainer, 3, 1)
    return SentencePieceModel(
        pieces=pieces, model_type=MODEL_TYPES.get(model_type, f"type {model_type}"),
        byte_fallback=bool(_last(trainer, 35, 0)),
        treat_whitespace_as_suffix=bool(_last(trainer, 24, 0)),
        special_ids={role: _signed(_last(trainer, number, default)) for role, number, default
                     in (("unk", 40, 0), ("bos", 41, 1), ("eos", 42, 2), ("pad", 43, -1))
                     if _signed(_last(trainer, number, default)) >= 0},
        normalizer=dict(charsmap=_last(normalizer, 2, b""),
                        add_dummy_prefix=bool(_last(normalizer, 3, 1)),
                        remove_extra_whitespaces=bool(_last(normalizer, 4, 1)),
                        escape_whitespaces=bool(_last(normalizer, 5, 1))))


class CharsMap:
    """A compiled character map: ``longest_prefix(data, start)`` gives the longest key of the trie
    that ``data[start:]`` (UTF-8 bytes) begins with (sentencepiece's rule), as ``(its length in
    bytes, the normalized bytes)``, or None; ``first_prefix`` the shortest.

    The blob is ``<trie size: uint32 little-endian><the trie><the replacement strings>``. The trie
    is a Darts-clone double array of uint32 units: a unit holds a label (the byte that leads to it;
    bit 31 set marks a leaf unit, whose low 31 bits are a value), a has-leaf flag (bit 8) and the
    XOR offset to its children (bits 10-31, shifted left by 8 more when bit 9 is set)."""

    def __init__(self, blob: bytes, where: str = "precompiled_charsmap"):
        if len(blob) < 4:
            raise ValueError(f"{where}: {len(blob)} bytes is too short for a compiled charsmap")
        trie_size, = struct.unpack_from("<I", blob)
        if trie_size % 4 or 4 + trie_size > len(blob):
            raise ValueError(f"{where}: the trie size {trie_size} does not fit the "
                             f"{len(blob)}-byte blob")
        self.units = struct.unpack_from(f"<{trie_size // 4}I", blob, 4)
        self.strings = blob[4 + trie_size:]

    def _child(self, position: int, byte: int):
        """(the position below the node at ``position`` along ``byte``, whether a key ends
        there), or None when there is no such child."""
        units = self.units
        position ^= byte
        if position >= len(units) or units[position] & ((1 << 31) | 0xFF) != byte:
            return None
        unit = units[position]
        return position ^ ((unit >> 10) << ((unit & (1 << 9)) >> 6)), (unit >> 8) & 1

    def _walk(self, data: bytes, start: int):
        """(end, position, has a key ending there) for each byte of ``data[start:]`` the trie
        follows."""
        position = (self.units[0] >> 10) << ((self.units[0] & (1 << 9)) >> 6)
        for index in range(start, len(data)):
            child = self._child(position, data[index])
            if child is None:
                return
            position, leaf = child
            yield index + 1, position, leaf

    def prefixes(self, data: bytes, start: int):
        """Every key of the trie that ``data[start:]`` begins with, shortest first, as
        ``(its length in bytes, the normalized bytes)``."""
        for end, position, leaf in self._walk(data, start):
            if leaf:
                offset = self.units[position] & 0x7FFFFFFF
                yield end - start, self.strings[offset:self.strings.index(b"\0", offset)]

    def continues(self, data: bytes, start: int, byte: int) -> bool:
        """Whether a key begins with ``data[start:]`` followed by ``byte``."""
        position = (self.units[0] >> 10) << ((self.units[0] & (1 << 9)) >> 6)
        for index in range(start, len(data) + 1):
            child = self._child(position, data[index] if index < len(data) else byte)
            if child is None:
                return False
            position = child[0]
        return True

    def longest_prefix(self, data: bytes, start: int):
        """The longest key (the last of ``prefixes``, which come shortest first), or None."""
        longest = None
        for key in self.prefixes(data, start):
            longest = key
        return longest

    def first_prefix(self, data: bytes, start: int):
        """The shortest key (HuggingFace's ``Precompiled`` takes it), or None."""
        return next(self.prefixes(data, start), None)


class Normalizer:
    """sentencepiece's text normalization (see the module docstring). ``charsmap``: the compiled
    character map's bytes (empty: no character is rewritten).

    Walking the trie at every character in Python is slow. So the text is mapped one
    space-separated chunk at a time, each chunk's result cached (a text repeats its words), and a
    chunk in which no key goes on from one character into the next (each pair of neighbours is
    looked up once, then cached) is mapped character by character by ``str.translate``. That
    gives the walk's text when no key runs across a space and no replacement holds a space; the
    spaces are then squeezed by string operations. A chunk for which that is not certain (a key
    that goes on with a space after it, a replacement with a space, as NFKC's for odd spaces)
    sends its text through the walk over the whole text."""

    def __init__(self, charsmap: bytes = b"", add_dummy_prefix: bool = True,
                 remove_extra_whitespaces: bool = True, escape_whitespaces: bool = True):
        self.charsmap = CharsMap(charsmap) if charsmap else None
        self.add_dummy_prefix = add_dummy_prefix
        self.remove_extra_whitespaces = remove_extra_whitespaces
        self.escape_whitespaces = escape_whitespaces
        space = self.charsmap and self.charsmap.longest_prefix(b" ", 0)
        self._by_chunk = self.charsmap is None or (
            space in (None, (1, b" ")) and not any(self.charsmap.continues(b" ", 0, byte)
                                                   for byte in range(1, 256)))
        self._chunks = {}  # chunk -> its mapped text, or None when the chunk is not safe alone
        self._char_table = CharMap(self._map_char)
        self._pairs = {}  # two characters -> whether a key goes on from the first into the second

    def _map_char(self, char: str) -> str:
        data = char.encode("utf-8")
        match = self.charsmap.longest_prefix(data, 0)
        return match[1].decode("utf-8") if match and match[0] == len(data) else char

    def _goes_on(self, pair: str) -> bool:
        if pair not in self._pairs:
            self._pairs[pair] = self.charsmap.continues(pair[0].encode("utf-8"), 0,
                                                        pair[1].encode("utf-8")[0])
        return self._pairs[pair]

    def _map_chunk(self, chunk: str) -> str | None:
        joined = [chunk[i:i + 2] for i in range(len(chunk) - 1)] + [chunk[-1:] + " "]
        if any(map(self._goes_on, joined[:-1])):
            mapped = "".join(self._pieces(chunk))
        else:
            mapped = chunk.translate(self._char_table)
        if " " in mapped or (chunk and self._goes_on(joined[-1])):
            return None
        return mapped

    def _mapped(self, text: str) -> str | None:
        """The text with the charsmap applied chunk by chunk, or None where that is not safe."""
        if self.charsmap is None:
            return text
        if not self._by_chunk:
            return None
        chunks, out = self._chunks, []
        for chunk in text.split(" "):
            if chunk not in chunks:
                if len(chunks) >= 100_000:
                    chunks.clear()
                chunks[chunk] = self._map_chunk(chunk)
            mapped = chunks[chunk]
            if mapped is None:
                return None
            out.append(mapped)
        return " ".join(out)

    def _pieces(self, text: str):
        """The text cut into (normalized piece) strings: the charsmap's longest matches, and each
        character it does not know as itself."""
        if self.charsmap is None:
            yield from text
            return
        data, start = text.encode("utf-8"), 0
        while start < len(data):
            match = self.charsmap.longest_prefix(data, start)
            if match is None:
                length = 1
                while start + length < len(data) and data[start + length] & 0xC0 == 0x80:
                    length += 1  # the continuation bytes of this character
                match = (length, data[start:start + length])
            yield match[1].decode("utf-8")
            start += match[0]

    def __call__(self, text: str) -> str:
        mapped = self._mapped(text)
        if mapped is None:
            return self._walk_whole(text)
        if self.remove_extra_whitespaces:
            mapped = MULTIPLE_SPACES.sub(" ", mapped).strip(" ")
        if not mapped:
            return ""
        normalized = " " + mapped if self.add_dummy_prefix else mapped
        return normalized.replace(" ", SPACE_SYMBOL) if self.escape_whitespaces else normalized

    def _walk_whole(self, text: str) -> str:
        """sentencepiece's normalization piece by piece (the charsmap's matches)."""
        pieces = list(self._pieces(text))
        first = 0
        while self.remove_extra_whitespaces and first < len(pieces) and pieces[first] == " ":
            first += 1
        if first == len(pieces):
            return ""
        out = [" "] if self.add_dummy_prefix else []
        previous_space = self.remove_extra_whitespaces
        for piece in pieces[first:]:
            if previous_space:
                piece = piece.lstrip(" ")
            if piece:
                out.append(piece)
                previous_space = piece.endswith(" ") and self.remove_extra_whitespaces
        normalized = "".join(out)
        if self.remove_extra_whitespaces:
            normalized = normalized.rstrip(" ")
        return normalized.replace(" ", SPACE_SYMBOL) if self.escape_whitespaces else normalized
