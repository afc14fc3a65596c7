"""The T5 text-to-text example runs end to end in ``--smoke`` mode and writes its metrics, the
accuracy per task of the three architectures at equal parameter count, and its pictures
(section V-D)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

ARCHITECTURES = {"encoder-decoder", "prefix-lm", "decoder-only"}


@pytest.mark.sec5
def test_t5_text_to_text_smoke(run_example, tmp_path):
    run_example("t5_text_to_text.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["steps"] == 10
    assert set(metrics["accuracy"]) == ARCHITECTURES == set(metrics["parameters"])
    for by_task in metrics["accuracy"].values():
        assert set(by_task) == {"copy", "reverse", "sort", "add"}
        assert all(0.0 <= a <= 1.0 for a in by_task.values())
    counts = metrics["parameters"].values()
    assert max(counts) / min(counts) < 1.02  # equal parameter count, up to a few norm gains
    for picture in ("loss.png", "accuracy.png"):
        assert (tmp_path / "run" / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.sec5
def test_t5_text_to_text_one_architecture(run_example, tmp_path):
    run_example("t5_text_to_text.py", "--smoke", "--steps", "2", "--architectures", "prefix-lm",
                "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(metrics["accuracy"]) == {"prefix-lm"}
