"""Building a tokenizer from a directory (ours or HuggingFace's) or from a ``state_dict()``.

A HuggingFace tokenizer directory comes in one of two layouts. The "slow" one has the model's
own files: ``vocab.txt`` (WordPiece) or ``vocab.json`` + ``merges.txt`` (byte-level BPE), with
``tokenizer_config.json`` / ``special_tokens_map.json`` for the options and special tokens. The
"fast" one (all that ``transformers`` 5 writes) puts everything in ``tokenizer.json``: the model
(vocabulary, merges), the normalizer (BERT's lower-casing and accent stripping), the
pre-tokenizer and the post-processor (the template). Both are read here; a Unigram
``tokenizer.json`` keeps its normalizer, pre-tokenizer and decoder sections, run by
``hf_pipeline.py``.
"""
from __future__ import annotations

import functools
import os

from .base import (Tokenizer, hf_model_max_length, read_hf_special_tokens, read_json, roles_in,
                   tokens_by_id)
from .bpe import STYLES, ByteLevelBPETokenizer, roberta_template
from .char import FILE_NAME as CHAR_FILE_NAME, CharTokenizer
from .mbart import MBART_LANGUAGE_CODES, SPM_FILE_NAME as MBART_SPM_FILE_NAME, MBartTokenizer
from .unigram import FILE_NAME as UNIGRAM_FILE_NAME, T5_SPECIALS, UnigramTokenizer
from .wordpiece import BERT_SPECIALS, WordPieceTokenizer, bert_template

TOKENIZER_TYPES = {cls.kind: cls for cls in (CharTokenizer, WordPieceTokenizer,
                                             ByteLevelBPETokenizer, UnigramTokenizer,
                                             MBartTokenizer)}


def tokenizer_from_state(state: dict) -> Tokenizer:
    """The tokenizer a ``state_dict()`` describes."""
    state = dict(state)
    kind = state.pop("type", None)
    if kind not in TOKENIZER_TYPES:
        raise ValueError(f"tokenizer_from_state: unknown tokenizer type {kind!r}; the types are "
                         f"{sorted(TOKENIZER_TYPES)}")
    return TOKENIZER_TYPES[kind](**state)


def _template_from_post_processor(processor: dict | None) -> dict | None:
    """Our template for a ``tokenizer.json`` post-processor (None: the class's default)."""
    if processor is None or processor["type"] == "ByteLevel":
        return None
    if processor["type"] == "Sequence":
        found = [_template_from_post_processor(p) for p in processor["processors"]]
        return next((template for template in found if template is not None), None)
    if processor["type"] == "TemplateProcessing":
        def word(piece):  # {"Sequence": {"id": "A", "type_id": 0}} or {"SpecialToken": ...}
            (kind, body), = piece.items()
            name = "$" + body["id"] if kind == "Sequence" else body["id"]
            return f"{name}:{body['type_id']}" if body["type_id"] else name
        return {which: " ".join(map(word, processor[which])) for which in ("single", "pair")}
    if processor["type"] in ("BertProcessing", "RobertaProcessing"):
        make = bert_template if processor["type"] == "BertProcessing" else roberta_template
        return make({"cls": processor["cls"][0], "sep": processor["sep"][0]})
    raise ValueError(f"load_tokenizer: tokenizer.json has a {processor['type']} post-processor, "
                     "which minitorch_nlp does not read")


def _unigram_from_tokenizer_json(directory: str, data: dict, tokens: list[str], common: dict,
                                 specials, config: dict) -> UnigramTokenizer:
    """A Unigram ``tokenizer.json`` (T5, mBART): the pieces' scores, the unk id, byte fallback,
    and the normalizer / pre-tokenizer / decoder sections run as HuggingFace runs them. The added
    tokens are split off first, so they are never pieces; they must be special tokens. An mBART
    directory (``tokenizer_class`` MBartTokenizer) gives an :class:`MBartTokenizer` with the
    language codes of its vocabulary and ``tokenizer_config.json``'s ``src_lang`` /
    ``tgt_lang``."""
    model, added = data["model"], data.get("added_tokens", [])
    plain = [token["content"] for token in added if not token.get("special")]
    if plain:
        raise ValueError(f"load_tokenizer: {directory}/tokenizer.json adds tokens that are not "
                         f"special ({plain[:3]}), which minitorch_nlp does not read")
    scores = dict(map(tuple, model["vocab"]))
    found = specials(T5_SPECIALS)
    roles = dict(found["special_tokens"])
    if model.get("unk_id") is not None:
        roles["unk"] = tokens[model["unk_id"]]
    extras = [token["content"] for token in added
              if token["content"] not in roles.values()] + found["extra_special_tokens"]
    if config.get("tokenizer_class", "").startswith("MBartTokenizer"):
        make = functools.partial(
            MBartTokenizer, src_lang=config.get("src_lang") or "en_XX",
            tgt_lang=config.get("tgt_lang"),
            language_codes=[code for code in MBART_LANGUAGE_CODES if code in tokens])
        common = {key: value for key, value in common.items() if key != "template"}
    else:
        make = UnigramTokenizer
    return make(
        tokens, [None if token in {t["content"] for t in added} else scores.get(token)
                 for token in tokens],
        special_tokens=roles, extra_special_tokens=list(dict.fromkeys(extras)),
        lstrip_tokens=found["lstrip_tokens"], rstrip_tokens=found["rstrip_tokens"],
        byte_fallback=bool(model.get("byte_fallback")),
        hf_pipeline={key: data.get(key) for key in ("normalizer", "pre_tokenizer", "decoder")},
        **common)


def _from_tokenizer_json(directory: str) -> Tokenizer:
    """A WordPiece (BERT normalizer and pre-tokenizer), byte-level BPE or Unigram
    ``tokenizer.json``."""
    data = read_json(os.path.join(directory, "tokenizer.json"))
    config = read_json(os.path.join(directory, "tokenizer_config.json"), {})
    model = data["model"]
    model_vocab = ({piece: index for index, (piece, _) in enumerate(model["vocab"])}
                   if model["type"] == "Unigram" else model["vocab"])
    vocab = {**model_vocab, **{t["content"]: t["id"] for t in data.get("added_tokens", [])}}
    tokens = tokens_by_id(vocab, os.path.join(directory, "tokenizer.json"))
    common = dict(model_max_length=hf_model_max_length(config),
                  template=_template_from_post_processor(data.get("post_processor")))

    def specials(defaults):  # the constructor's special-token arguments
        return read_hf_special_tokens(directory, config, roles_in(defaults, vocab),
                                      data.get("added_tokens", []))._asdict()

    if model["type"] == "Unigram":
        return _unigram_from_tokenizer_json(directory, data, tokens, common, specials, config)
    normalizer, pre = data.get("normalizer") or {}, (data.get("pre_tokenizer") or {}).get("type")
    if (model["type"] == "WordPiece" and pre == "BertPreTokenizer"
            and normalizer.get("type", "BertNormalizer") == "BertNormalizer"):
        return WordPieceTokenizer(
            tokens, do_lower_case=normalizer.get("lowercase", False),
            strip_accents=normalizer.get("strip_accents"),
            tokenize_chinese_chars=normalizer.get("handle_chinese_chars", True),
            max_input_chars_per_word=model.get("max_input_chars_per_word", 100),
            **specials(BERT_SPECIALS),
            **common)
    if model["type"] == "BPE" and pre == "ByteLevel" and not normalizer:
        roberta = (config.get("tokenizer_class", "").startswith("Roberta")
                   or (data.get("post_processor") or {}).get("type") == "RobertaProcessing")
        style = STYLES["roberta" if roberta else "gpt2"]
        return ByteLevelBPETokenizer(
            tokens, [m.split(" ") if isinstance(m, str) else m for m in model["merges"]],
            add_prefix_space=bool(data["pre_tokenizer"].get("add_prefix_space")),
            **specials(style.special_tokens), **common)
    raise ValueError(f"load_tokenizer: {directory}/tokenizer.json holds a {model['type']} model "
                     f"with the {normalizer.get('type')} normalizer and the {pre} pre-tokenizer; "
                     "minitorch_nlp reads WordPiece with BERT's normalizer and pre-tokenizer, "
                     "byte-level BPE (GPT-2, RoBERTa) and Unigram (T5, mBART)")


# What load_tokenizer looks for, in this order: (files that must all be there, what reads them).
DIRECTORY_LAYOUTS = (((CHAR_FILE_NAME,), CharTokenizer.from_pretrained),
                     (("vocab.json", "merges.txt"), ByteLevelBPETokenizer.from_pretrained),
                     (("vocab.txt",), WordPieceTokenizer.from_pretrained),
                     ((UNIGRAM_FILE_NAME,), UnigramTokenizer.from_file),
                     ((MBartTokenizer.file_name,), MBartTokenizer.from_file),
                     (("spiece.model",), UnigramTokenizer.from_pretrained),
                     (("tokenizer.json",), _from_tokenizer_json),
                     ((MBART_SPM_FILE_NAME,), MBartTokenizer.from_pretrained))


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """The tokenizer saved in ``directory`` by ``save`` or by HuggingFace: ``char_tokenizer.json``
    -> :class:`CharTokenizer`; ``vocab.json`` + ``merges.txt`` -> :class:`ByteLevelBPETokenizer`
    (GPT-2's template, or RoBERTa's when ``tokenizer_config.json`` names a Roberta tokenizer);
    ``vocab.txt`` -> :class:`WordPieceTokenizer` (lower-casing and accents as
    ``tokenizer_config.json`` says); ``unigram_tokenizer.json`` or a T5 ``spiece.model`` ->
    :class:`UnigramTokenizer`; otherwise ``tokenizer.json`` (WordPiece, byte-level BPE or
    Unigram); otherwise an mBART ``sentencepiece.bpe.model`` -> :class:`MBartTokenizer`
    (fairseq's ids and the language codes, as HuggingFace's ``MBartTokenizer``)."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"load_tokenizer: {directory!r} is not a directory")
    for names, read in DIRECTORY_LAYOUTS:
        if all(os.path.isfile(os.path.join(directory, name)) for name in names):
            return read(directory)
    wanted = ", ".join(" + ".join(names) for names, _ in DIRECTORY_LAYOUTS)
    raise FileNotFoundError(f"load_tokenizer: {directory!r} holds no tokenizer: looked for "
                            f"{wanted}; found {sorted(os.listdir(directory)) or 'nothing'}")
