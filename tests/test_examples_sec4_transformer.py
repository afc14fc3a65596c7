"""The Transformer translation example (section IV-A) runs end to end in ``--smoke`` mode and writes
its metrics and pictures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from minitorch_nlp import scripting

pytestmark = pytest.mark.sec4

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "transformer_translation.py"


def load_example():
    return scripting.definitions(EXAMPLE)


def test_smoke_run_writes_metrics_and_pictures(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    out = tmp_path / "run"
    run_example("transformer_translation.py", "--smoke", "--out", str(out), "--seed", "1")
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["smoke"] is True and saved["steps"] == 20
    assert 0.0 <= saved["test_exact_match_greedy"] <= 1.0
    assert 0.0 <= saved["test_exact_match_beam4"] <= 1.0
    assert saved["test_numbers"] == 50 and len(saved["validation_curve"]) == 2
    for name in ("loss.png", "attention_encoder.png", "attention_decoder.png",
                 "attention_cross.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_held_out_numbers_never_train(tmp_path):
    example = load_example()
    cfg = example.SETTINGS["smoke"]
    train, validation, test, vocab = example.build_data(cfg, "en", "fr", seed=0)
    assert not set(train.tolist()) & set(test.tolist())
    assert not set(train.tolist()) & set(validation.tolist())
    for number in (0, 71, 80, 80_000, 999_999, 21_001):
        for lang in ("en", "fr"):
            assert vocab.unk_id not in vocab.encode(example.number_tokens(number, lang))
