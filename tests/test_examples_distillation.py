"""The knowledge-distillation example (section VI-A) runs end to end in ``--smoke`` mode and
writes its table, its loss curves and its picture."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.sec6, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_distillation_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    run_example("distillation.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True
    table = metrics["table"]
    assert list(table) == ["teacher", "DistilBERT", "DistilBERT, random init", "TinyBERT",
                           "MobileBERT"]
    assert table["teacher"]["size"] == 1.0 and table["teacher"]["relative_accuracy"] == 1.0
    for name, row in table.items():
        assert 0.0 <= row["accuracy"] <= 1.0 and row["ms_per_batch"] > 0, name
        assert len(metrics["curves"][name]) == (15 if name == "teacher" else 10), name
    for name in ("DistilBERT", "TinyBERT", "MobileBERT"):
        assert table[name]["parameters"] < table["teacher"]["parameters"], name
    assert table["DistilBERT"]["parameters"] == table["DistilBERT, random init"]["parameters"]
    assert (tmp_path / "run" / "distillation.png").read_bytes()[:8] == PNG
