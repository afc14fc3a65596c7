"""The BERT (section IV-C) and RoBERTa (IV-E) examples run end to end in ``--smoke`` mode and write
their metrics and pictures."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.sec4, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_bert_mlm_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    run_example("bert_mlm.py", "--smoke", "--out", str(tmp_path / "run"), "--seed", "1")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["steps"] == 12
    assert len(metrics["history"]["val_mlm"]) == 2 and metrics["final_val_mlm_loss"] > 0
    assert 0.0 <= metrics["final_val_nsp_accuracy"] <= 1.0
    assert set(metrics["fine_tuning_accuracy"]) == {"pretrained", "from scratch"}
    assert all(len(curve) == 3 for curve in metrics["fine_tuning_curves"].values())
    assert metrics["fill_in"] and "[MASK]" in metrics["fill_in"][0]["masked"]
    for name in ("pretraining.png", "fine_tuning.png"):
        assert (tmp_path / "run" / name).read_bytes()[:8] == PNG, name


def test_roberta_masking_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    run_example("roberta_masking.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["epochs"] == 2
    assert len(metrics["curves"]) == 3
    for curve in metrics["curves"].values():
        assert len(curve["validation"]) == 3 and len(curve["train"]) == 2
        assert curve["validation"][-1] < curve["validation"][0]      # it learns something
    assert 0.5 < metrics["fill_ratio"] <= 1.0
    assert (tmp_path / "run" / "masking.png").read_bytes()[:8] == PNG
