"""The mBART number-words example runs end to end in ``--smoke`` mode and writes its table and
loss curves (section V-C, eq 30-31)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


@pytest.mark.sec5
@pytest.mark.eq(30, 31)
def test_mbart_numbers_smoke(run_example, tmp_path):
    run_example("mbart_numbers.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True
    assert metrics["texts_per_language"] == {"en": 30, "fr": 30, "de": 30, "es": 6}
    results = metrics["results"]
    assert list(results) == ["eq 30", "as the data", "none"]
    translations = {"de -> en", "fr -> en", "es -> en"}
    assert set(results["none"]) == translations
    for pretrained in ("eq 30", "as the data"):
        assert set(results[pretrained]) == translations | {"es share of pretraining",
                                                           "es denoising"}
    assert all(0.0 <= value <= 1.0 for row in results.values() for value in row.values())
    # eq 30 draws the small language more often than its share of the data does
    assert results["eq 30"]["es share of pretraining"] > results["as the data"][
        "es share of pretraining"]
    assert (tmp_path / "run" / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
