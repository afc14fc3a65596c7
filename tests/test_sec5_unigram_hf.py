"""HuggingFace's Unigram tokenizer files: ``tokenizer.json`` (T5's and mBART's layouts) read by
``load_tokenizer`` give the ids of HuggingFace's fast tokenizer; an mBART directory with
``sentencepiece.bpe.model`` gives fairseq's ids with the language codes (``MBartTokenizer``); the
errors for what is not read. Fixtures: ``tests/fixtures/hf/tokenizers/{t5,t5-hub,mbart,
mbart-spm}/``, made by
``tests/fixtures/hf/make_unigram_tokenizer_fixtures.py`` with ``expected.json`` holding
HuggingFace's ids."""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitorch_nlp.data.tokenizers import (MBartTokenizer, UnigramTokenizer, load_tokenizer,
                                           tokenizer_from_state)
from minitorch_nlp.data.tokenizers.hf_pipeline import _Precompiled
from minitorch_nlp.data.tokenizers.mbart import MBART_LANGUAGE_CODES

pytestmark = pytest.mark.sec5

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf" / "tokenizers"
JSON_LAYOUTS = ("t5", "t5-hub", "mbart")


def expected(name):
    return json.loads((FIXTURES / name / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", JSON_LAYOUTS)
def test_tokenizer_json_gives_huggingfaces_ids_and_text(name):
    tok, want = load_tokenizer(FIXTURES / name), expected(name)
    assert isinstance(tok, UnigramTokenizer)
    got = [tok.encode(text) for text in want["texts"]]
    wrong = [(text, ids, ours) for text, ids, ours in zip(want["texts"], want["ids"], got)
             if ids != ours]
    assert not wrong, f"{len(wrong)} of {len(got)} texts differ, first {wrong[0]}"
    decoded = [tok.decode(tok.encode(text, add_special_tokens=False))
               for text in want["texts"][:len(want["decoded"])]]
    assert decoded == want["decoded"]


def test_the_layouts_special_tokens_and_templates_are_read():
    t5, mbart = load_tokenizer(FIXTURES / "t5"), load_tokenizer(FIXTURES / "mbart")
    assert (t5.pad_token_id, t5.eos_token_id, t5.unk_token_id) == (0, 1, 2)
    assert t5.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_2>"]) == [len(t5) - 1,
                                                                         len(t5) - 3]
    assert t5.template["single"] == "$A </s>"
    assert (mbart.bos_token_id, mbart.pad_token_id, mbart.eos_token_id, mbart.unk_token_id) == (
        0, 1, 2, 3)
    assert mbart.template["single"] == "$A </s> en_XX"
    assert isinstance(mbart, MBartTokenizer) and (mbart.src_lang, mbart.tgt_lang) == ("en_XX",
                                                                                      "ro_RO")
    assert mbart.encode_target("x")[-2:] == [2, mbart.convert_tokens_to_ids("ro_RO")]
    assert mbart.mask_token == "<mask>" and mbart.id_to_token[-1] == "<mask>"
    assert mbart.tokenize("hello <mask> x") == (mbart.tokenize("hello") + ["<mask>"]
                                                + mbart.tokenize("x"))


@pytest.mark.parametrize("scheme", ["first", "never"])
def test_metaspace_prepend_schemes_match_huggingface(tmp_path, scheme):
    shutil.copytree(FIXTURES / "t5-hub", tmp_path / "tok")
    path = tmp_path / "tok" / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["pre_tokenizer"]["prepend_scheme"] = scheme
    path.write_text(json.dumps(data), encoding="utf-8")
    tok, want = load_tokenizer(tmp_path / "tok"), expected("t5-hub")
    texts = want["texts"][len(want["decoded"]):]
    assert [tok.encode(text) for text in texts] == want["prepend_schemes"][scheme]


@pytest.mark.parametrize("name", JSON_LAYOUTS)
def test_save_and_state_keep_the_pipeline(tmp_path, name):
    tok = load_tokenizer(FIXTURES / name)
    tok.save(tmp_path)
    again, rebuilt = load_tokenizer(tmp_path), tokenizer_from_state(tok.state_dict())
    texts = expected(name)["texts"]
    assert [again.encode(t) for t in texts] == [rebuilt.encode(t) for t in texts] == [
        tok.encode(t) for t in texts]


def test_sampling_runs_the_pipeline_and_keeps_special_tokens():
    tok = load_tokenizer(FIXTURES / "t5-hub")
    text = "the   quick brown  fox</s> jumps  "
    best = tok.tokenize(text)
    samples = [tok.sample(text, alpha=0.2, rng=seed) for seed in range(20)]
    assert all("".join(cut) == "".join(best) and "</s>" in cut for cut in samples)
    assert any(cut != best for cut in samples)
    assert tok.sample(text, alpha=1e6, rng=0) == best


def _edited(tmp_path, edit):
    shutil.copytree(FIXTURES / "t5-hub", tmp_path / "tok", dirs_exist_ok=True)
    path = tmp_path / "tok" / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    return tmp_path / "tok"


@pytest.mark.parametrize("section, value, message", [
    ("normalizer", {"type": "BertNormalizer"}, "'BertNormalizer' normalizer"),
    ("normalizer", {"type": "Sequence", "normalizers": [{"type": "StripAccents"}]},
     "'StripAccents' normalizer"),
    ("pre_tokenizer", {"type": "ByteLevel"}, "'ByteLevel' pre_tokenizer"),
    ("pre_tokenizer", {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"},
     "prepend_scheme is 'sometimes'"),
    ("pre_tokenizer", {"type": "Metaspace", "replacement": "__"}, "one character"),
    ("decoder", {"type": "WordPiece"}, "decoder is WordPiece, which"),
    ("decoder", None, "decoder is None, which"),
    ("decoder", {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Strip"}]},
     "decoder is ByteFallback \\+ Strip, which"),
    ("normalizer", {"type": "Replace", "pattern": {"Regex": "(?<x"}, "content": ""},
     "not a regular expression"),
])
def test_unknown_components_are_refused_by_name(tmp_path, section, value, message):
    directory = _edited(tmp_path, lambda data: data.update({section: value}))
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        load_tokenizer(directory)


def test_added_tokens_that_are_not_special_are_refused(tmp_path):
    def edit(data):
        data["added_tokens"][-1]["special"] = False
    with pytest.raises(ValueError, match="not special.*<extra_id_0>"):
        load_tokenizer(_edited(tmp_path, edit))


def test_hf_pipeline_with_another_section_is_refused():
    with pytest.raises(ValueError, match="hf_pipeline holds \\['model'\\]"):
        UnigramTokenizer(["a", "b"], [-1.0, -2.0], hf_pipeline={"model": {}})


# ---- mBART's sentencepiece.bpe.model: fairseq's ids and the language codes -----------------------
MBART_SPM = FIXTURES / "mbart-spm"


def test_mbart_directory_gives_sentencepiece_ids_with_fairseqs_offset():
    spm = pytest.importorskip("sentencepiece")
    tok = load_tokenizer(MBART_SPM)
    assert isinstance(tok, MBartTokenizer)
    model = spm.SentencePieceProcessor(model_file=str(MBART_SPM / "sentencepiece.bpe.model"))
    texts = [text for text in expected("mbart-spm")["texts"] if "<" not in text]
    en = tok.convert_tokens_to_ids("en_XX")
    # HuggingFace's MBartTokenizer (transformers 4): spm id + 1, sentencepiece's unk 0 -> 3
    assert [tok.encode(text) for text in texts] == [
        [index + 1 if index else 3 for index in model.encode(text)] + [2, en] for text in texts]


def test_mbart_directory_matches_transformers_on_the_corpus():
    """transformers 5 rebuilds the tokenizer without sentencepiece's normalizer, so only text
    that normalization leaves alone (the corpus lines) is compared."""
    tok, want = load_tokenizer(MBART_SPM), expected("mbart-spm")
    lines = len(want["decoded"])
    assert [tok.encode(text) for text in want["texts"][:lines]] == want["ids"][:lines]
    assert tok.tgt_lang == "ro_RO"
    assert [tok.encode_target(text) for text in want["target_texts"]] == want["target_ids"]


def test_mbart_layout_special_tokens_and_language_codes():
    tok = load_tokenizer(MBART_SPM)
    assert tok.id_to_token[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert tok.id_to_token[-26:] == [*MBART_LANGUAGE_CODES, "<mask>"]
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id,
            tok.mask_token_id) == (0, 1, 2, 3, len(tok) - 1)
    assert tok.tokenize("a <mask> b") == tok.tokenize("a") + ["<mask>"] + tok.tokenize("b")
    ids = tok.encode("hello world", "again")
    assert ids[-2:] == [2, tok.convert_tokens_to_ids("en_XX")]
    assert tok.decode(ids, skip_special_tokens=True) == "hello world again"
    tok.src_lang = "de_DE"
    assert tok.encode("x")[-1] == tok.convert_tokens_to_ids("de_DE")
    assert tok.template == {"single": "$A </s> de_DE", "pair": "$A $B </s> de_DE"}


def test_mbart_save_and_state_round_trip(tmp_path):
    tok = load_tokenizer(MBART_SPM)
    tok.src_lang = "fr_XX"
    tok.save(tmp_path)
    again, rebuilt = load_tokenizer(tmp_path), tokenizer_from_state(tok.state_dict())
    texts = expected("mbart-spm")["texts"]
    for other in (again, rebuilt):
        assert isinstance(other, MBartTokenizer)
        assert (other.src_lang, other.tgt_lang) == ("fr_XX", "ro_RO")
        assert [other.encode(t) for t in texts] == [tok.encode(t) for t in texts]


def test_mbart_errors_name_the_language_code_and_the_file(tmp_path):
    tok = load_tokenizer(MBART_SPM)
    with pytest.raises(ValueError, match="src_lang 'xx_XX' is not a language code.*en_XX"):
        tok.src_lang = "xx_XX"
    assert tok.src_lang == "en_XX" and tok.encode("x")[-1] == tok.convert_tokens_to_ids("en_XX")
    tok.tgt_lang = None
    with pytest.raises(ValueError, match="encode_target: set tgt_lang first"):
        tok.encode_target("x")
    tok.tgt_lang = "qq_QQ"
    with pytest.raises(ValueError, match="src_lang 'qq_QQ' is not a language code"):
        tok.encode_target("x")
    (tmp_path / "t5").mkdir()
    shutil.copy(FIXTURES.parent.parent / "sentencepiece" / "spiece.model",
                tmp_path / "t5" / "sentencepiece.bpe.model")
    with pytest.raises(ValueError, match="starts with \\['<pad>', '</s>', '<unk>'\\]"):
        load_tokenizer(tmp_path / "t5")
    shutil.copytree(MBART_SPM, tmp_path / "xlmr")
    (tmp_path / "xlmr" / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "XLMRobertaTokenizer"}))
    with pytest.raises(ValueError, match="XLMRobertaTokenizer sentencepiece.bpe.model"):
        load_tokenizer(tmp_path / "xlmr")


@given(text=st.text(alphabet=st.sampled_from(list("ab e\u0301\u0308\u200d😀ﬁ①Ｈ\t")), max_size=20))
def test_the_chunked_precompiled_normalizer_equals_the_whole_text_mapping(text):
    """Precompiled maps space-separated chunks (cached); it must give what the mapping of the
    whole text gives, also where a combining mark or a joiner meets a space."""
    data = json.loads((FIXTURES / "t5" / "tokenizer.json").read_text(encoding="utf-8"))
    normalizer = _Precompiled(base64.b64decode(data["normalizer"]["precompiled_charsmap"]))
    assert normalizer(text) == normalizer._whole(text)
