"""What every tokenizer shares: the vocabulary, special tokens, and turning texts into model inputs.

A tokenizer does two jobs. The first is its algorithm, different in each subclass: cutting a text
into tokens (``_tokenize``) and gluing tokens back into text (``_decode``). The second is the same
for all of them and lives here:

* ids <-> tokens, with ``[UNK]`` (or a clear error) for a token the vocabulary lacks;
* special tokens (``[CLS]``, ``<|endoftext|>`` ...) found in the text first and kept whole, so
  that no algorithm ever splits, lower-cases or merges them; some absorb the spaces next to them
  (HuggingFace's ``lstrip`` / ``rstrip``: RoBERTa's ``<mask>`` takes the space before it, so
  ``"is <mask>"`` gives ``Ġis <mask>``, not ``Ġis Ġ <mask>``);
* the *template* that frames one or two segments with special tokens. It uses HuggingFace's
  ``TemplateProcessing`` notation: ``$A`` and ``$B`` stand for the two segments, any other word is
  a special token, and a ``:n`` suffix gives the token-type id of that piece (0 when absent)::

      BERT     single "[CLS] $A [SEP]"     pair "[CLS] $A [SEP] $B:1 [SEP]:1"
      RoBERTa  single "<s> $A </s>"        pair "<s> $A </s> </s> $B </s>"
      GPT-2    single "$A"                 pair "$A $B:1"

* truncation (pairs: longest first, as HuggingFace), padding, attention masks (1 on real tokens),
  token-type ids and the special-tokens mask (1 on special tokens, which BERT's masked-language-
  model collator must never mask).

``tok(texts, ...)`` returns a :class:`BatchEncoding`, a dict of lists (or int64 arrays with
``return_tensors="np"``) that also reads as attributes: ``model(**tok(texts, padding=True,
return_tensors="np"))`` works as in HuggingFace.
"""
from __future__ import annotations

import functools
import json
import os
import re
import sys
import unicodedata
from collections import Counter
from typing import NamedTuple
from collections.abc import Iterable, Sequence

import numpy as np

from ...io.files import atomic_write

SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")
TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second")
PADDING_STRATEGIES = ("longest", "max_length")
PLAIN_TEMPLATE = {"single": "$A", "pair": "$A $B:1"}  # no special token added
WORD_CACHE_SIZE = 100_000


class BatchEncoding(dict):
    """Model inputs by name (``input_ids``, ``attention_mask``, ...): a dict that also reads as
    attributes (``enc.input_ids``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"BatchEncoding has no {name!r}; it holds "
                                 f"{sorted(self)}") from None


class _Role:
    """The ``pad_token`` ... ``eos_token`` attributes (settable: ``tok.pad_token = tok.eos_token``)
    and their read-only ``*_token_id`` twins; None when the tokenizer has no token in that role."""

    def __init__(self, role, as_id=False):
        self.role, self.as_id = role, as_id

    def __get__(self, tok, owner=None):
        if tok is None:
            return self
        token = tok.special_tokens.get(self.role)
        return tok.vocab[token] if self.as_id and token is not None else token

    def __set__(self, tok, token):
        if self.as_id:
            raise AttributeError(f"{type(tok).__name__}: set {self.role}_token (a token string), "
                                 f"not {self.role}_token_id")
        tok.set_special_tokens({**tok.special_tokens, self.role: token})


class Tokenizer:
    """The shared machinery; subclasses define ``_tokenize(text) -> tokens`` (for text that holds
    no special token), ``_decode(ids) -> str``, ``_options()`` (their constructor arguments besides
    the ones below) and ``save``.

    ``vocab`` lists the tokens in id order. ``special_tokens`` (default none) maps roles
    (``pad``, ``unk``, ``cls``, ``sep``, ``mask``, ``bos``, ``eos``) to tokens of the vocabulary;
    one token may play several roles (GPT-2's ``<|endoftext|>`` is bos, eos and unk).
    ``extra_special_tokens`` are kept whole and marked special without a role. ``template`` is
    ``{"single": ..., "pair": ...}`` (see the module docstring; by default no special token is
    added). ``model_max_length`` is the ``max_length`` used when truncation or
    ``padding="max_length"`` needs one and the call gives none. ``lstrip_tokens`` /
    ``rstrip_tokens`` are special tokens that take the whitespace on their left / right with them
    (it is dropped from the text around them).
    """

    kind = ""  # the "type" of state_dict(), one per subclass
    model_input_names = ("input_ids", "attention_mask")  # what a call returns by default

    pad_token, unk_token, cls_token, sep_token, mask_token, bos_token, eos_token = (
        _Role(role) for role in SPECIAL_ROLES)
    (pad_token_id, unk_token_id, cls_token_id, sep_token_id, mask_token_id, bos_token_id,
     eos_token_id) = (_Role(role, as_id=True) for role in SPECIAL_ROLES)

    def __init__(self, vocab: Sequence[str], *, special_tokens: dict[str, str] | None = None,
                 extra_special_tokens: Iterable[str] = (), template: dict[str, str] | None = None,
                 model_max_length: int | None = None, lstrip_tokens: Iterable[str] = (),
                 rstrip_tokens: Iterable[str] = ()):
        self.id_to_token = list(vocab)
        self.vocab = {token: index for index, token in enumerate(self.id_to_token)}
        if len(self.vocab) != len(self.id_to_token):
            twice = next(t for t, n in Counter(self.id_to_token).items() if n > 1)
            raise ValueError(f"{self.name}: the vocabulary holds {twice!r} twice")
        self.model_max_length = model_max_length
        self.template = dict(template or PLAIN_TEMPLATE)
        self.extra_special_tokens = ()
        self.set_special_tokens(special_tokens or {}, extra_special_tokens)
        self.lstrip_tokens, self.rstrip_tokens = tuple(lstrip_tokens), tuple(rstrip_tokens)
        for what, tokens in (("lstrip_tokens", self.lstrip_tokens),
                             ("rstrip_tokens", self.rstrip_tokens)):
            stray = [token for token in tokens if token not in self.all_special_tokens]
            if stray:
                raise ValueError(f"{self.name}: {what} must be special tokens; {stray} are not "
                                 f"(the special tokens are {self.all_special_tokens})")

    @property
    def name(self) -> str:
        return type(self).__name__

    def __len__(self) -> int:
        return len(self.id_to_token)

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    def __repr__(self) -> str:
        return f"{self.name}(vocab_size={len(self)}, special_tokens={self.special_tokens})"

    # ---- special tokens and the template -------------------------------------------------------
    def set_special_tokens(self, special_tokens: dict[str, str],
                           extra_special_tokens: Iterable[str] | None = None) -> None:
        """Replace the role -> token map (a role given None is dropped) and, when given, the extra
        special tokens. Every token must be in the vocabulary, and the template may only use
        special tokens; on an error nothing changes."""
        roles = {role: token for role, token in special_tokens.items() if token is not None}
        for role in roles:
            if role not in SPECIAL_ROLES:
                raise ValueError(f"{self.name}: unknown special-token role {role!r}; the roles "
                                 f"are {', '.join(SPECIAL_ROLES)}")
        extras = tuple(self.extra_special_tokens if extra_special_tokens is None
                       else extra_special_tokens)
        for token in (*roles.values(), *extras):
            if token not in self.vocab:
                raise ValueError(f"{self.name}: special token {token!r} is not in the vocabulary")
        specials = list(dict.fromkeys([roles[r] for r in SPECIAL_ROLES if r in roles] + [*extras]))
        templates = {"single": self._parse_template("single", ("$A",), specials),
                     "pair": self._parse_template("pair", ("$A", "$B"), specials)}
        self.special_tokens, self.extra_special_tokens = roles, extras
        self.all_special_tokens, self._templates = specials, templates
        self.all_special_ids = [self.vocab[token] for token in specials]
        longest_first = sorted(specials, key=len, reverse=True)
        self._special_split = (re.compile("(" + "|".join(map(re.escape, longest_first)) + ")")
                               if longest_first else None)

    def _parse_template(self, which, segments, specials):
        """``"[CLS] $A [SEP] $B:1 [SEP]:1"`` -> ``[("[CLS]", 0), ("$A", 0), ..., ("[SEP]", 1)]``."""
        text = self.template.get(which)
        if not isinstance(text, str):
            raise ValueError(f"{self.name}: template needs a {which!r} string, got {self.template}")
        pieces = []
        for word in text.split():
            piece, colon, type_id = word.rpartition(":")
            if not (colon and type_id.isdigit()):
                piece, type_id = word, "0"
            if not piece.startswith("$") and piece not in specials:
                raise ValueError(f"{self.name}: the {which} template {text!r} uses {piece!r}, "
                                 f"which is not a special token ({specials})")
            pieces.append((piece, int(type_id)))
        if sorted(p for p, _ in pieces if p.startswith("$")) != list(segments):
            raise ValueError(f"{self.name}: the {which} template {text!r} must hold "
                             f"{' and '.join(segments)} once each (and no other $ piece)")
        return pieces

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """How many special tokens the template adds to one segment (or to a pair)."""
        return sum(not piece.startswith("$") for piece, _ in self._templates["pair" if pair else
                                                                            "single"])

    # ---- text <-> tokens <-> ids ---------------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text``: special tokens found in it are kept whole, the text between
        them goes through the tokenizer's algorithm (less the whitespace that an ``lstrip`` /
        ``rstrip`` token next to it takes)."""
        return self._tokenize_around_specials(text, self._tokenize, "tokenize")

    def _tokenize_around_specials(self, text: str, algorithm, where: str) -> list[str]:
        """``tokenize`` with ``algorithm`` in place of ``_tokenize`` (a Unigram tokenizer's
        sampled segmentation uses it)."""
        if not isinstance(text, str):
            raise TypeError(f"{self.name}.{where}: expected a str, got {type(text).__name__}")
        pieces = self._special_split.split(text) if self._special_split else [text]
        tokens = []
        for index, piece in enumerate(pieces):  # re.split puts the specials at odd indices
            if index % 2:
                tokens.append(piece)
                continue
            if index and pieces[index - 1] in self.rstrip_tokens:
                piece = piece.lstrip()
            if index + 1 < len(pieces) and pieces[index + 1] in self.lstrip_tokens:
                piece = piece.rstrip()
            if piece:
                tokens.extend(algorithm(piece))
        return tokens

    def _tokenize(self, text: str) -> list[str]:
        raise TypeError(f"{self.name} must define _tokenize(text)")

    def _decode(self, ids: list[int]) -> str:
        raise TypeError(f"{self.name} must define _decode(ids)")

    def _token_id(self, token: str) -> int:
        index = self.vocab.get(token, self.unk_token_id)
        if index is None:
            raise ValueError(f"{self.name}: token {token!r} is not in the vocabulary and there is "
                             "no unk token to stand for it")
        return index

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """The id of a token, or the ids of a list of tokens (the unk id for unknown ones)."""
        if isinstance(tokens, str):
            return self._token_id(tokens)
        vocab, unk_id = self.vocab, self.unk_token_id
        ids = [vocab.get(token, unk_id) for token in tokens]
        if unk_id is None and None in ids:
            self._token_id(tokens[ids.index(None)])  # raises, naming the token
        return ids

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        """The token of an id, or the tokens of a sequence of ids."""
        if isinstance(ids, (int, np.integer)):
            return self.id_to_token[self._check_ids([ids], "convert_ids_to_tokens")[0]]
        ids = self._check_ids(ids, "convert_ids_to_tokens")
        special = set(self.all_special_ids) if skip_special_tokens else ()
        return [self.id_to_token[index] for index in ids if index not in special]

    def _check_ids(self, ids, where: str) -> list[int]:
        """``ids`` (a list, a 1-D integer array or tensor) as a list of ints in the vocabulary."""
        array = np.asarray(ids)
        if array.size == 0:
            return []
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"{self.name}.{where}: expected a 1-D sequence of integer ids, got "
                             f"shape {array.shape} dtype {array.dtype}")
        outside = array[(array < 0) | (array >= len(self))]
        if outside.size:
            raise ValueError(f"{self.name}.{where}: id {int(outside[0])} is outside the vocabulary "
                             f"(ids 0..{len(self) - 1})")
        return array.tolist()

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (a list, a 1-D integer array or tensor)."""
        ids = self._check_ids(ids, "decode")
        if skip_special_tokens:
            special = set(self.all_special_ids)
            ids = [index for index in ids if index not in special]
        return self._decode(ids)

    def batch_decode(self, sequences, skip_special_tokens: bool = False) -> list[str]:
        """``decode`` of each row of ``sequences``."""
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    # ---- model inputs --------------------------------------------------------------------------
    def encode(self, text: str, text_pair: str | None = None, add_special_tokens: bool = True,
               truncation: bool | str = False, max_length: int | None = None) -> list[int]:
        """The ids of ``text`` (framed with ``text_pair`` by the template when
        ``add_special_tokens``), truncated to ``max_length`` when ``truncation`` says so."""
        strategy = self._truncation(truncation)
        return self._encode_one(text, text_pair, add_special_tokens, strategy,
                                self._max_length(max_length, bool(strategy)))["input_ids"]

    def __call__(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None, *,
                 add_special_tokens: bool = True, padding: bool | str = False,
                 truncation: bool | str = False, max_length: int | None = None,
                 padding_side: str = "right", return_tensors: str | None = None,
                 return_token_type_ids: bool | None = None,
                 return_special_tokens_mask: bool = False) -> BatchEncoding:
        """Encode one text (or pair) or a batch of them into model inputs.

        ``padding``: False (none), True or ``"longest"`` (to the longest in the batch), or
        ``"max_length"``; ``padding_side`` ``"right"`` or ``"left"`` (for batched generation).
        ``truncation``: False, True or ``"longest_first"`` (the longer segment of a pair is cut
        first, see ``_truncate``), ``"only_first"``, ``"only_second"``. ``max_length`` counts the
        special tokens; it defaults to ``model_max_length``. ``return_tensors="np"`` gives (B, T)
        int64 arrays (a single text gives B = 1), None lists (a single text: one list).

        ``input_ids`` and ``attention_mask`` (1 on real tokens) always come back,
        ``token_type_ids`` when the tokenizer's model takes them (BERT) or when asked for, and
        ``special_tokens_mask`` (1 on special tokens) when asked for. Padding is ``pad_token_id``
        in the ids, 0 in the attention mask and token types, 1 in the special-tokens mask.
        """
        single = isinstance(text, str)
        texts = self._strings(text, "text")
        pairs = [None] * len(texts) if text_pair is None else self._strings(text_pair, "text_pair")
        if text_pair is not None and (single != isinstance(text_pair, str)
                                      or len(pairs) != len(texts)):
            raise ValueError(f"{self.name}: text_pair must match text (a str for a str, a list "
                             f"of the same length for a list); got {len(texts)} texts and "
                             f"{len(pairs)} pairs")
        if padding not in (False, True, *PADDING_STRATEGIES):
            raise ValueError(f"{self.name}: padding must be False, True, 'longest' or "
                             f"'max_length', got {padding!r}")
        if padding_side not in ("right", "left"):
            raise ValueError(f"{self.name}: padding_side must be 'right' or 'left', "
                             f"got {padding_side!r}")
        if return_tensors not in (None, "np"):
            raise ValueError(f"{self.name}: return_tensors must be None or 'np', "
                             f"got {return_tensors!r}")
        if padding and self.pad_token is None:
            raise ValueError(f"{self.name}: padding needs a pad token and this tokenizer has none; "
                             "set one, e.g. tok.pad_token = tok.eos_token")
        strategy = self._truncation(truncation)
        length = self._max_length(max_length, bool(strategy) or padding == "max_length")
        rows = [self._encode_one(a, b, add_special_tokens, strategy, length)
                for a, b in zip(texts, pairs)]
        names = ["input_ids", "attention_mask"]
        if return_token_type_ids or (return_token_type_ids is None
                                     and "token_type_ids" in self.model_input_names):
            names.insert(1, "token_type_ids")
        if return_special_tokens_mask:
            names.append("special_tokens_mask")
        if padding:
            width = (length if padding == "max_length"
                     else max((len(row["input_ids"]) for row in rows), default=0))
            fill = {"input_ids": self.pad_token_id, "attention_mask": 0, "token_type_ids": 0,
                    "special_tokens_mask": 1}
            for row in rows:
                extra = max(width - len(row["input_ids"]), 0)
                for key in names:
                    row[key] = (row[key] + [fill[key]] * extra if padding_side == "right"
                                else [fill[key]] * extra + row[key])
        out = BatchEncoding({key: [row[key] for row in rows] for key in names})
        if return_tensors == "np":
            widths = sorted({len(ids) for ids in out["input_ids"]})
            if len(widths) > 1:
                raise ValueError(f"{self.name}: return_tensors='np' needs sequences of one length, "
                                 f"got lengths {widths[0]}..{widths[-1]}; pass padding=True (and "
                                 "truncation=True with padding='max_length')")
            shape = (len(rows), widths[0] if rows else 0)
            return BatchEncoding({key: np.asarray(value, dtype=np.int64).reshape(shape)
                                  for key, value in out.items()})
        return BatchEncoding({key: value[0] for key, value in out.items()}) if single else out

    def _strings(self, given, name: str) -> list[str]:
        """``given`` (a str, or a list or tuple of str) as a list."""
        items = [given] if isinstance(given, str) else given
        if not isinstance(items, (list, tuple)) or not all(isinstance(t, str) for t in items):
            raise TypeError(f"{self.name}: {name} must be a str or a list of str, "
                            f"got {given!r:.80}")
        return list(items)

    def _truncation(self, truncation) -> str | None:
        if truncation is False or truncation is None:
            return None
        if truncation is True:
            return "longest_first"
        if truncation not in TRUNCATION_STRATEGIES:
            raise ValueError(f"{self.name}: truncation must be False, True or one of "
                             f"{TRUNCATION_STRATEGIES}, got {truncation!r}")
        return truncation

    def _max_length(self, max_length, needed: bool) -> int | None:
        max_length = self.model_max_length if max_length is None else max_length
        if needed and max_length is None:
            raise ValueError(f"{self.name}: truncation or padding='max_length' needs max_length "
                             "(this tokenizer has no model_max_length)")
        if max_length is not None and (not isinstance(max_length, (int, np.integer))
                                       or max_length < 1):
            raise ValueError(f"{self.name}: max_length must be a positive int, got {max_length!r}")
        return max_length

    def _encode_one(self, text, text_pair, add_special_tokens, truncation, max_length) -> dict:
        """One example: ``input_ids``, ``token_type_ids``, ``special_tokens_mask``,
        ``attention_mask`` as lists."""
        ids_a = self.convert_tokens_to_ids(self.tokenize(text))
        ids_b = None if text_pair is None else self.convert_tokens_to_ids(self.tokenize(text_pair))
        if truncation:
            added = self.num_special_tokens_to_add(ids_b is not None) if add_special_tokens else 0
            if max_length < added:
                raise ValueError(f"{self.name}: max_length={max_length} is too small for the "
                                 f"{added} special tokens the template adds")
            ids_a, ids_b = self._truncate(ids_a, ids_b, max_length - added, truncation)
        row = {"input_ids": [], "token_type_ids": [], "special_tokens_mask": []}
        for piece, type_id in self._templates["single" if ids_b is None else "pair"]:
            if piece.startswith("$"):
                ids, special = (ids_a if piece == "$A" else ids_b), 0
            elif add_special_tokens:
                ids, special = [self.vocab[piece]], 1
            else:
                continue
            row["input_ids"] += ids
            row["token_type_ids"] += [type_id] * len(ids)
            row["special_tokens_mask"] += [special] * len(ids)
        row["attention_mask"] = [1] * len(row["input_ids"])
        return row

    def _truncate(self, ids_a, ids_b, budget, strategy):
        """Cut tokens off the ends of the segments so that they fit in ``budget`` tokens.
        ``longest_first`` cuts the longer segment down to what the shorter one leaves, and when
        that is not enough, keeps ``budget // 2`` tokens of the shorter and the rest of the longer
        (the first counts as the shorter on a tie), as HuggingFace's ``tokenizers``."""
        excess = len(ids_a) + len(ids_b or ()) - budget
        if excess <= 0:
            return ids_a, ids_b
        if ids_b is None:
            if strategy == "only_second":
                raise ValueError(f"{self.name}: truncation='only_second' needs text pairs")
            return ids_a[:budget], None
        if strategy == "longest_first":
            a_shorter = len(ids_a) <= len(ids_b)
            keep = min(len(ids_a) if a_shorter else len(ids_b), budget // 2)
            cut_a, cut_b = ((len(ids_a) - keep, len(ids_b) - budget + keep) if a_shorter
                            else (len(ids_a) - budget + keep, len(ids_b) - keep))
        else:
            cut_a, cut_b = (excess, 0) if strategy == "only_first" else (0, excess)
            if max(cut_a - len(ids_a), cut_b - len(ids_b)) > 0:
                raise ValueError(f"{self.name}: truncation={strategy!r} cannot fit the pair in "
                                 f"{budget} tokens: it would have to remove {excess} tokens from "
                                 f"a segment of {len(ids_a) if cut_a else len(ids_b)}")
        return ids_a[:len(ids_a) - cut_a], ids_b[:len(ids_b) - cut_b]

    # ---- saving --------------------------------------------------------------------------------
    def _options(self) -> dict:
        """The subclass's own constructor arguments, JSON-able (besides the shared ones)."""
        return {}

    def state_dict(self) -> dict:
        """A JSON-able description: ``tokenizer_from_state(tok.state_dict())`` rebuilds ``tok``
        (a training checkpoint can embed it)."""
        return {"type": self.kind, "vocab": list(self.id_to_token),
                "special_tokens": dict(self.special_tokens),
                "extra_special_tokens": list(self.extra_special_tokens),
                "template": dict(self.template), "model_max_length": self.model_max_length,
                "lstrip_tokens": list(self.lstrip_tokens),
                "rstrip_tokens": list(self.rstrip_tokens), **self._options()}

    def save(self, directory: str | os.PathLike) -> None:
        raise TypeError(f"{self.name} must define save(directory)")

    def _save_state(self, directory: str | os.PathLike, file_name: str) -> None:
        """Write the ``state_dict()`` as ``file_name`` (a tokenizer HuggingFace has no files
        for)."""
        os.makedirs(directory, exist_ok=True)
        write_json(os.path.join(directory, file_name), self.state_dict())

    @classmethod
    def _from_state_file(cls, directory: str | os.PathLike, file_name: str) -> Tokenizer:
        """The tokenizer ``_save_state`` wrote."""
        state = dict(read_json(os.path.join(os.fspath(directory), file_name)))
        if state.pop("type", None) != cls.kind:
            raise ValueError(f"{cls.__name__}: {file_name} in {os.fspath(directory)} does not "
                             f"hold a {cls.kind} tokenizer")
        return cls(**state)

    def _hf_config(self, tokenizer_class: str, default_template: dict) -> dict:
        """The special-token and length fields of HuggingFace's ``tokenizer_config.json``; our
        template too when it is not the one the class implies."""
        config = {"tokenizer_class": tokenizer_class, **self._special_tokens_map()}
        if self.model_max_length is not None:
            config["model_max_length"] = self.model_max_length
        if self.template != default_template:
            config["template"] = dict(self.template)
        return config

    def _special_tokens_map(self) -> dict:
        """HuggingFace's ``special_tokens_map.json``: a token that takes whitespace with it is
        written as an ``AddedToken`` dict, which says so."""
        def entry(token):
            if token not in self.lstrip_tokens and token not in self.rstrip_tokens:
                return token
            return {"content": token, "lstrip": token in self.lstrip_tokens,
                    "rstrip": token in self.rstrip_tokens, "normalized": False,
                    "single_word": False}

        roles = {f"{role}_token": entry(token) for role, token in self.special_tokens.items()}
        if self.extra_special_tokens:
            roles["additional_special_tokens"] = [entry(t) for t in self.extra_special_tokens]
        return roles


@functools.cache
def _category_initials() -> str:
    """The first letter of every code point's Unicode general category, in one string."""
    return "".join(unicodedata.category(chr(code))[0] for code in range(sys.maxunicode + 1))


def char_class(initial: str) -> str:
    """The body of a regex character class (``a-zA-Z...``) of the code points whose general
    category starts with ``initial`` (``L`` letters, ``N`` numbers, ``P`` punctuation): Python's
    ``re`` has no ``\\p{L}``. Built from ``unicodedata`` on first use (~0.3 s)."""
    return "".join(re.escape(chr(run.start())) + (f"-{re.escape(chr(run.end() - 1))}"
                                                   if run.end() - 1 > run.start() else "")
                   for run in re.finditer(f"{initial}+", _category_initials()))


class CharMap(dict):
    """A ``str.translate`` table that asks ``rule(char)`` (a replacement string) the first time
    it meets each character: one pass in C over the text instead of a Python loop."""

    def __init__(self, rule):
        super().__init__()
        self.rule = rule

    def __missing__(self, code):
        self[code] = value = self.rule(chr(code))
        return value


class WordCache(dict):
    """``split(word)`` for each word, computed the first time the word is met: a text repeats its
    words, and the tokenizer's algorithm (WordPiece's longest matches, BPE's merges) is the slow
    part of encoding. Holds at most ``WORD_CACHE_SIZE`` words, then starts over. The cached lists
    are shared: read them, never change them."""

    def __init__(self, split):
        super().__init__()
        self.split = split

    def __missing__(self, word):
        if len(self) >= WORD_CACHE_SIZE:
            self.clear()
        self[word] = pieces = self.split(word)
        return pieces


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` as UTF-8, atomically (a reader sees the old file or the whole new one)."""
    atomic_write(os.fspath(path), lambda file: file.write(text.encode("utf-8")))


def write_json(path: str | os.PathLike, obj) -> None:
    write_text(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def read_json(path: str | os.PathLike, default=None):
    """The JSON object in ``path``, or ``default`` when there is no such file."""
    if not os.path.isfile(path):
        return default
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def tokens_by_id(vocab: dict[str, int], where: str) -> list[str]:
    """The tokens of a token -> id map (``vocab.json``), in id order; the ids must be 0..n-1."""
    tokens = sorted(vocab, key=vocab.__getitem__)
    if [vocab[token] for token in tokens] != list(range(len(tokens))):
        raise ValueError(f"the token ids in {where} must be 0..{len(tokens) - 1}, each once")
    return tokens


def roles_in(roles: dict[str, str], vocab) -> dict[str, str]:
    """The roles whose token is in ``vocab`` (a family's default special tokens, for a vocabulary
    that may lack some)."""
    return {role: token for role, token in roles.items() if token in vocab}


class HFSpecialTokens(NamedTuple):
    """What a HuggingFace directory says of its special tokens (the keyword arguments of a
    tokenizer's constructor of the same names)."""
    special_tokens: dict
    extra_special_tokens: list
    lstrip_tokens: list
    rstrip_tokens: list


def read_hf_special_tokens(directory: str | os.PathLike, config: dict,
                           default_roles: dict[str, str],
                           added_tokens: list | None = None) -> HFSpecialTokens:
    """The special tokens of ``special_tokens_map.json`` and ``tokenizer_config.json`` (plain
    strings or HuggingFace ``AddedToken`` dicts, ``{"content": ...}``; ``default_roles`` when they
    name none), and which of them take the whitespace beside them: the ``lstrip`` / ``rstrip`` of
    those dicts, of ``tokenizer_config``'s ``added_tokens_decoder`` and of ``tokenizer.json``'s
    ``added_tokens`` (the hub's roberta-base says it only there; pass them as ``added_tokens``
    when the file is read already)."""
    merged = {**read_json(os.path.join(directory, "special_tokens_map.json"), {}), **config}
    content = lambda token: token["content"] if isinstance(token, dict) else token  # noqa: E731
    roles = {role: content(merged[f"{role}_token"]) for role in SPECIAL_ROLES
             if merged.get(f"{role}_token") is not None} or dict(default_roles)
    extras = merged.get("additional_special_tokens") or merged.get("extra_special_tokens") or []
    if added_tokens is None:
        added_tokens = read_json(os.path.join(directory, "tokenizer.json"), {}).get("added_tokens")
    added = [*(added_tokens or []),
             *(config.get("added_tokens_decoder") or {}).values(),
             *(merged.get(f"{role}_token") for role in SPECIAL_ROLES), *extras]
    flags = {entry["content"]: entry for entry in added if isinstance(entry, dict)}
    specials = set(roles.values()) | {content(token) for token in extras}
    return HFSpecialTokens(roles, [content(token) for token in extras],
                           *([token for token, entry in flags.items()
                              if entry.get(side) and token in specials]
                             for side in ("lstrip", "rstrip")))


def hf_model_max_length(config: dict) -> int | None:
    """HuggingFace writes a huge number (1e30) for "no limit"."""
    length = config.get("model_max_length")
    return int(length) if length is not None and length < 1e12 else None
