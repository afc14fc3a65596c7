"""WordPiece, the tokenizer of BERT, with BERT's basic tokenization in front of it.

WordPiece comes from speech recognition (Schuster & Nakajima, 2012, "Japanese and Korean Voice
Search") and reached NLP with Google's translation system (Wu et al., 2016, "Google's Neural
Machine Translation System") and then BERT (Devlin et al., 2019). A word is cut into the longest
vocabulary entries that fit, left to right; pieces after the first carry the prefix ``##``, so
"unaffable" becomes ``un ##aff ##able`` and the decoder knows where words end. A word that cannot
be covered, or is longer than ``max_input_chars_per_word`` (100), becomes ``[UNK]``.

Before that, BERT's *basic tokenization* cuts the text into words: drop NUL, U+FFFD and control
characters, turn every whitespace into a space, put spaces around CJK ideographs (Chinese is not
written with spaces), NFC-normalise, split on whitespace, lower-case and strip accents (NFD, then
drop the combining marks, category Mn) for uncased models, and make every punctuation character a
word of its own. Punctuation is Unicode's P* categories plus all non-alphanumeric printable ASCII
(``$``, ``+``, ``<``, ``^``, ``|`` ... are symbols for Unicode, punctuation for BERT). This
reproduces HuggingFace's ``BertTokenizer`` exactly (the tests check it on the real vocabulary of
all-MiniLM-L6-v2).

``WordPieceTokenizer.train`` learns a vocabulary from a corpus by merging pairs of pieces (see
``training.py``): the alphabet of the corpus (each character, and ``##c`` for each character seen
inside a word) plus one token per merge. Google never published its trainer, which picks the merge
that most raises a language model's likelihood. HuggingFace's ``tokenizers`` trains WordPiece with
its BPE trainer (the most frequent pair, ``score="frequency"``, the default here); HuggingFace's
course describes the score ``count(ab) / (count(a) * count(b))`` (``score="likelihood"``). On the
built-in corpus with 1000 tokens the latter spends the vocabulary on rare words built letter by
letter ("localh", "localho", "localhos", "localhost") and its encoding of the corpus is 2.5 times
longer: the ratio favours pairs whose parts are rare.
"""
from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from .base import (CharMap, Tokenizer, WordCache, char_class, hf_model_max_length,
                   read_hf_special_tokens, read_json, roles_in, write_json, write_text)
from .training import learn_merges, texts_between

BERT_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
# CJK Unified Ideographs and their extensions, and the compatibility ideographs (as BERT).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
            (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def bert_template(special_tokens: dict) -> dict | None:
    """``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``, with token type 1 on ``B [SEP]`` (None
    without cls and sep tokens)."""
    cls, sep = special_tokens.get("cls"), special_tokens.get("sep")
    if cls is None or sep is None:
        return None
    return {"single": f"{cls} $A {sep}", "pair": f"{cls} $A {sep} $B:1 {sep}:1"}


def join_pieces(first: str, second: str) -> str:
    """The piece that merging two pieces makes: ``"un" + "##aff" -> "unaff"``."""
    return first + second.removeprefix("##")


def _cleaned(char: str, split_cjk: bool) -> str:
    """What BERT's cleaning makes of one character: NUL, U+FFFD and control characters go,
    whitespace becomes a space, CJK ideographs get spaces around them."""
    category = unicodedata.category(char)
    if char in "\x00\ufffd" or (category[0] == "C" and char not in "\t\n\r"):
        return ""
    if char in "\t\n\r" or category == "Zs":
        return " "
    if split_cjk and any(lo <= ord(char) <= hi for lo, hi in CJK_RANGES):
        return f" {char} "
    return char


CLEAN = {split_cjk: CharMap(functools.partial(_cleaned, split_cjk=split_cjk))
         for split_cjk in (False, True)}
DROP_MARKS = CharMap(lambda char: "" if unicodedata.category(char) == "Mn" else char)


@functools.cache
def _words_and_punctuation() -> re.Pattern:
    """A punctuation character, or a run of characters that are neither punctuation nor
    whitespace. BERT's punctuation: Unicode's P* and all non-alphanumeric printable ASCII."""
    punctuation = re.escape("".join(chr(code) for code in range(33, 127)
                                    if not chr(code).isalnum())) + char_class("P")
    return re.compile(rf"[{punctuation}]|[^{punctuation}\s]+")


def basic_tokenize(text: str, *, do_lower_case: bool = True, strip_accents: bool | None = None,
                   tokenize_chinese_chars: bool = True) -> list[str]:
    """BERT's words of ``text`` (see the module docstring). ``strip_accents=None`` strips them
    exactly when lower-casing, as the original BERT. HuggingFace's ``BertTokenizer`` does each
    step word by word; on the whole text they give the same words, faster."""
    text = unicodedata.normalize("NFC", text.translate(CLEAN[tokenize_chinese_chars]))
    if do_lower_case:
        text = text.lower()
    if strip_accents or (strip_accents is None and do_lower_case):
        text = unicodedata.normalize("NFD", text).translate(DROP_MARKS)
    return _words_and_punctuation().findall(text)


class WordPieceTokenizer(Tokenizer):
    """BERT's tokenizer over ``vocab`` (tokens in id order, continuation pieces prefixed ``##``).

    ``do_lower_case``, ``strip_accents`` and ``tokenize_chinese_chars`` configure the basic
    tokenization; ``clean_up_tokenization_spaces`` makes ``decode`` write "a, b." rather than
    "a , b ."; the special tokens default to BERT's ``[PAD] [UNK] [CLS] [SEP] [MASK]`` and the
    template to ``[CLS] A [SEP] B [SEP]``.
    """

    kind = "wordpiece"
    model_input_names = ("input_ids", "token_type_ids", "attention_mask")

    def __init__(self, vocab: Sequence[str], *, do_lower_case: bool = True,
                 strip_accents: bool | None = None, tokenize_chinese_chars: bool = True,
                 max_input_chars_per_word: int = 100, clean_up_tokenization_spaces: bool = True,
                 special_tokens: dict[str, str] | None = None,
                 extra_special_tokens: Iterable[str] = (), template: dict | None = None,
                 model_max_length: int | None = None, lstrip_tokens: Iterable[str] = (),
                 rstrip_tokens: Iterable[str] = ()):
        special_tokens = BERT_SPECIALS if special_tokens is None else special_tokens
        template = template or bert_template(special_tokens)
        if template is None:
            raise ValueError(f"WordPieceTokenizer: BERT's template needs cls and sep tokens; got "
                             f"special_tokens={special_tokens} and no template")
        super().__init__(vocab, special_tokens=special_tokens,
                         extra_special_tokens=extra_special_tokens, template=template,
                         model_max_length=model_max_length, lstrip_tokens=lstrip_tokens,
                         rstrip_tokens=rstrip_tokens)
        self.do_lower_case, self.strip_accents = do_lower_case, strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.max_input_chars_per_word = max_input_chars_per_word
        self.clean_up_tokenization_spaces = clean_up_tokenization_spaces
        self._longest = max((len(token.removeprefix("##")) for token in self.id_to_token),
                            default=0)
        self._pieces = WordCache(self._wordpiece)

    @classmethod
    def train(cls, text: str | Iterable[str], vocab_size: int, *, do_lower_case: bool = True,
              strip_accents: bool | None = None, tokenize_chinese_chars: bool = True,
              special_tokens: dict[str, str] | None = None, score: str = "frequency",
              min_frequency: int = 2, template: dict | None = None,
              model_max_length: int | None = None) -> WordPieceTokenizer:
        """Learn a vocabulary of ``vocab_size`` tokens from ``text`` (a str or an iterable of
        str): the special tokens, the alphabet, then one token per merge (fewer when no pair is
        seen ``min_frequency`` times any more). ``score`` is ``"frequency"`` or ``"likelihood"``
        (see the module docstring)."""
        special_tokens = BERT_SPECIALS if special_tokens is None else special_tokens
        specials = list(dict.fromkeys(special_tokens.values()))
        basic = dict(do_lower_case=do_lower_case, strip_accents=strip_accents,
                     tokenize_chinese_chars=tokenize_chinese_chars)
        options = dict(basic, special_tokens=special_tokens, template=template,
                       model_max_length=model_max_length)
        cls(specials, **options)  # check the options before the long part
        words = Counter(word for piece in texts_between(text, specials)
                        for word in basic_tokenize(piece, **basic))
        alphabet = (sorted({char for word in words for char in word})
                    + sorted({"##" + char for word in words for char in word[1:]}))
        if vocab_size < len(specials) + len(alphabet):
            raise ValueError(f"WordPieceTokenizer.train: vocab_size={vocab_size} is too small for "
                             f"the {len(specials)} special tokens and the corpus's alphabet of "
                             f"{len(alphabet)} pieces")
        merges = learn_merges({(word[0], *("##" + c for c in word[1:])): count
                               for word, count in words.items()},
                              vocab_size - len(specials) - len(alphabet), join=join_pieces,
                              score=score, min_frequency=min_frequency)
        return cls(list(dict.fromkeys(specials + alphabet
                                      + [join_pieces(a, b) for a, b in merges])), **options)

    def _wordpiece(self, word: str) -> list[str] | None:
        """Greedy longest-match-first: the longest vocabulary entry that starts the rest of the
        word, ``##``-prefixed after the first piece; None (the word is unknown) if one position
        has none, or the word is longer than ``max_input_chars_per_word``."""
        if len(word) > self.max_input_chars_per_word:
            return None
        pieces, start = [], 0
        while start < len(word):
            for end in range(min(len(word), start + self._longest), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
            else:
                return None
            pieces.append(piece)
            start = end
        return pieces

    def _tokenize(self, text: str) -> list[str]:
        tokens = []
        for word in basic_tokenize(text, do_lower_case=self.do_lower_case,
                                   strip_accents=self.strip_accents,
                                   tokenize_chinese_chars=self.tokenize_chinese_chars):
            pieces = self._pieces[word]
            if pieces is None:  # unknown: unk, or (no unk) the word, whose id lookup names it
                tokens.append(self.unk_token or word)
            else:
                tokens.extend(pieces)
        return tokens

    def _decode(self, ids: list[int]) -> str:
        text = " ".join(self.id_to_token[index] for index in ids).replace(" ##", "").strip()
        if self.clean_up_tokenization_spaces:
            for spaced, tight in CLEAN_UP:
                text = text.replace(spaced, tight)
        return text

    def _options(self) -> dict:
        return {"do_lower_case": self.do_lower_case, "strip_accents": self.strip_accents,
                "tokenize_chinese_chars": self.tokenize_chinese_chars,
                "max_input_chars_per_word": self.max_input_chars_per_word,
                "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces}

    def save(self, directory: str | os.PathLike) -> None:
        """HuggingFace's layout: ``vocab.txt``, ``tokenizer_config.json`` and
        ``special_tokens_map.json`` (``BertTokenizer`` reads them)."""
        os.makedirs(directory, exist_ok=True)
        write_text(os.path.join(directory, "vocab.txt"),
                   "".join(token + "\n" for token in self.id_to_token))
        config = self._hf_config("BertTokenizer", bert_template(self.special_tokens))
        write_json(os.path.join(directory, "tokenizer_config.json"), {**config, **self._options()})
        write_json(os.path.join(directory, "special_tokens_map.json"), self._special_tokens_map())

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> WordPieceTokenizer:
        """Read a HuggingFace BERT directory: ``vocab.txt`` and, when present,
        ``tokenizer_config.json`` (``do_lower_case``, ``strip_accents``,
        ``tokenize_chinese_chars``, special tokens, ``model_max_length``) and
        ``special_tokens_map.json``."""
        directory = os.fspath(directory)
        with open(os.path.join(directory, "vocab.txt"), encoding="utf-8") as file:
            vocab = file.read().removesuffix("\n").split("\n")
        config = read_json(os.path.join(directory, "tokenizer_config.json"), {})
        if config.get("do_basic_tokenize") is False:
            raise ValueError(f"WordPieceTokenizer: {directory} asks for do_basic_tokenize=False; "
                             "this tokenizer always runs BERT's basic tokenization")
        found = read_hf_special_tokens(directory, config, roles_in(BERT_SPECIALS, vocab))
        options = {key: config[key] for key in ("do_lower_case", "strip_accents",
                                                "tokenize_chinese_chars",
                                                "max_input_chars_per_word",
                                                "clean_up_tokenization_spaces")
                   if config.get(key) is not None}
        return cls(vocab, **found._asdict(), template=config.get("template"),
                   model_max_length=hf_model_max_length(config), **options)
