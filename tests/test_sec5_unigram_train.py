"""``minitorch-nlp train NAME --tokenizer unigram``: a Unigram-LM tokenizer trained on the run's
text (with the special tokens a byte-level BPE gets for the family), kept in the checkpoint, and
the run resumes exactly; a bad ``--tokenizer`` is one error line."""
from __future__ import annotations

import numpy as np
import pytest

from minitorch_nlp import checks, cli, inference, training
from minitorch_nlp.data.tokenizers import UnigramTokenizer

pytestmark = pytest.mark.sec5

TEXT = ("the quick brown fox jumps over the lazy dog. " * 30
        + "a stitch in time saves nine. " * 30)
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "12",
        "--batch-size", "2", "--steps", "4", "--warmup-steps", "1", "--eval-every", "2",
        "--tokenizer", "unigram", "--vocab-size", "60", "--backend", "numpy", "--no-progress"]


def test_train_bert_with_unigram_resumes_exactly(tmp_path):
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT, encoding="utf-8")
    common = ["train", "bert", "--text", str(text_file), *TINY]
    assert cli.main([*common, "--out", str(tmp_path / "once")]) == 0
    assert cli.main([*common, "--out", str(tmp_path / "twice"), "--stop-at", "2"]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "twice"), "--no-progress"]) == 0
    once = training.read_checkpoint(tmp_path / "once")
    twice = training.read_checkpoint(tmp_path / "twice")
    for name in once["model"]:
        np.testing.assert_array_equal(once["model"][name], twice["model"][name], err_msg=name)
    _, tokenizer, _ = inference.load_for_inference(tmp_path / "once")
    assert isinstance(tokenizer, UnigramTokenizer) and len(tokenizer) <= 60
    assert tokenizer.state_dict() == inference.load_for_inference(
        tmp_path / "twice")[1].state_dict()
    # a masked LM needs the mask, cls and sep tokens: RoBERTa's set, as a bpe run gets
    assert {"mask", "cls", "sep", "pad"} <= set(tokenizer.special_tokens)
    assert tokenizer.template["single"] == "<s> $A </s>"
    assert tokenizer.decode(tokenizer.encode("the lazy dog."),
                            skip_special_tokens=True) == "the lazy dog."


def test_a_gpt_run_gets_gpt2s_special_token():
    config = training.TrainConfig(model="gpt", tokenizer="unigram", vocab_size=60, n_layer=1,
                                  n_head=2, n_embd=16, block_size=12, batch_size=2, steps=2,
                                  backend="numpy")
    tokenizer = training.LanguageModelRun(config, text=TEXT).tokenizer
    assert isinstance(tokenizer, UnigramTokenizer)
    assert tokenizer.special_tokens == {"bos": "<|endoftext|>", "eos": "<|endoftext|>",
                                        "unk": "<|endoftext|>"}
    assert tokenizer.encode("the lazy dog.") == tokenizer.encode("the lazy dog.",
                                                                 add_special_tokens=False)


def test_a_bad_tokenizer_is_one_error_line(capsys):
    assert cli.main(["train", "gpt", "--tokenizer", "sentencepiece"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("minitorch-nlp: error: ")
    assert "--tokenizer" in err and "'unigram'" in err and "'sentencepiece'" in err
    with pytest.raises(checks.SettingError, match="tokenizer must be one of char, bpe, "
                                                    "wordpiece, unigram, got 'spm'"):
        training.TrainConfig(model="gpt", tokenizer="spm")
