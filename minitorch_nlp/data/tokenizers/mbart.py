"""mBART's tokenizer: a SentencePiece Unigram model with fairseq's ids and language codes.

mBART (Liu et al. 2020) was trained with fairseq, whose dictionary numbers the tokens differently
from the sentencepiece model it wraps (``sentencepiece.bpe.model``, a Unigram model despite its
name). fairseq puts ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3 first; sentencepiece has
``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, so every other piece moves up by one. After the pieces come the
25 language codes (``en_XX``, ``ro_RO`` ...), then ``<mask>``. A text ends with ``</s>`` and its
language's code; the decoder starts from the target language's code. HuggingFace's
``MBartTokenizer`` keeps this layout, and so does :class:`MBartTokenizer` here.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from .base import hf_model_max_length, read_hf_special_tokens, read_json
from .unigram import UnigramTokenizer

SPM_FILE_NAME = "sentencepiece.bpe.model"
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
SPM_SPECIALS = ("<unk>", "<s>", "</s>")  # sentencepiece's first three pieces
MBART_LANGUAGE_CODES = ("ar_AR", "cs_CZ", "de_DE", "en_XX", "es_XX", "et_EE", "fi_FI", "fr_XX",
                        "gu_IN", "hi_IN", "it_IT", "ja_XX", "kk_KZ", "ko_KR", "lt_LT", "lv_LV",
                        "my_MM", "ne_NP", "nl_XX", "ro_RO", "ru_RU", "si_LK", "tr_TR", "vi_VN",
                        "zh_CN")
MBART_SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "cls": "<s>",
                  "sep": "</s>", "mask": "<mask>"}


class MBartTokenizer(UnigramTokenizer):
    """A :class:`UnigramTokenizer` with mBART's language codes: ``language_codes`` are special
    tokens of the vocabulary; ``src_lang`` (settable) puts ``</s> src_lang`` after each source
    text (``$A </s> en_XX``; a pair: ``$A $B </s> en_XX``), ``encode_target`` puts
    ``</s> tgt_lang`` after a target text. The other arguments are :class:`UnigramTokenizer`'s
    (its ``template`` is made from ``src_lang``)."""

    kind = "mbart"
    file_name = "mbart_tokenizer.json"

    def __init__(self, vocab: Sequence[str], scores, *, language_codes: Sequence[str],
                 src_lang: str = "en_XX", tgt_lang: str | None = None, **options):
        self.language_codes = tuple(language_codes)
        options["template"] = self._template(src_lang, "src_lang")
        super().__init__(vocab, scores, **options)
        missing = [code for code in self.language_codes if code not in self.all_special_tokens]
        if missing:
            raise ValueError(f"{self.name}: the language codes {missing} must be special tokens "
                             "of the vocabulary")
        self._src_lang = src_lang
        self.tgt_lang = tgt_lang

    def _template(self, code: str, what: str) -> dict:
        if code not in self.language_codes:
            raise ValueError(f"{type(self).__name__}: {what} {code!r} is not a language code of "
                             f"this tokenizer; they are {', '.join(self.language_codes)}")
        return {"single": f"$A </s> {code}", "pair": f"$A $B </s> {code}"}

    @property
    def src_lang(self) -> str:
        return self._src_lang

    @src_lang.setter
    def src_lang(self, code: str) -> None:
        self.template = self._template(code, "src_lang")
        self.set_special_tokens(self.special_tokens)  # parses the new template
        self._src_lang = code

    def encode_target(self, text: str, **options) -> list[int]:
        """The ids of a target text: ``text </s> tgt_lang`` (HuggingFace's ``text_target``);
        ``options`` go to ``encode``."""
        if self.tgt_lang is None:
            raise ValueError(f"{self.name}.encode_target: set tgt_lang first (one of "
                             f"{', '.join(self.language_codes)})")
        source = self._src_lang
        self.src_lang = self.tgt_lang
        try:
            return self.encode(text, **options)
        finally:
            self.src_lang = source

    def _options(self) -> dict:
        return {**super()._options(), "language_codes": list(self.language_codes),
                "src_lang": self._src_lang, "tgt_lang": self.tgt_lang}

    def state_dict(self) -> dict:
        state = super().state_dict()
        del state["template"]  # made from src_lang
        return state

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> MBartTokenizer:
        """A HuggingFace mBART directory with ``sentencepiece.bpe.model``: fairseq's ids (see the
        module docstring), the language codes, ``<mask>`` last (taking the space before it),
        ``tokenizer_config.json``'s ``src_lang`` (default en_XX) and ``tgt_lang``."""
        directory = os.fspath(directory)
        path = os.path.join(directory, SPM_FILE_NAME)
        config = read_json(os.path.join(directory, "tokenizer_config.json"), {})
        if not config.get("tokenizer_class", "MBartTokenizer").startswith("MBartTokenizer"):
            raise ValueError(f"{cls.__name__}: {directory} holds a {config['tokenizer_class']} "
                             f"{SPM_FILE_NAME}; minitorch_nlp reads mBART's (MBartTokenizer)")
        spm = UnigramTokenizer.from_sentencepiece(path, special_tokens={})
        if tuple(spm.id_to_token[:3]) != SPM_SPECIALS:
            raise ValueError(f"{cls.__name__}: {path} starts with {spm.id_to_token[:3]}, not "
                             f"sentencepiece's {list(SPM_SPECIALS)} that fairseq's ids assume")
        codes = list(MBART_LANGUAGE_CODES)
        vocab = [*FAIRSEQ_SPECIALS, *spm.id_to_token[3:], *codes, "<mask>"]
        state = spm.state_dict()
        found = read_hf_special_tokens(directory, config, MBART_SPECIALS)
        extras = [code for code in codes if code not in found.special_tokens.values()]
        return cls(vocab, [None] * 4 + state["scores"][3:] + [None] * (len(codes) + 1),
                   language_codes=codes, src_lang=config.get("src_lang") or "en_XX",
                   tgt_lang=config.get("tgt_lang"), special_tokens=found.special_tokens,
                   extra_special_tokens=extras + [t for t in found.extra_special_tokens
                                                  if t not in extras],
                   lstrip_tokens=list(dict.fromkeys([*found.lstrip_tokens, "<mask>"])),
                   rstrip_tokens=found.rstrip_tokens,
                   model_max_length=hf_model_max_length(config),
                   **{key: state[key] for key in ("byte_fallback", "charsmap", "add_dummy_prefix",
                                                  "remove_extra_whitespaces",
                                                  "escape_whitespaces")})
