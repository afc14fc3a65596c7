"""The ELECTRA vs BERT example (section IX-D) runs end to end in ``--smoke`` mode and writes its
metrics and picture."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.sec9, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_electra_vs_bert_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    run_example("electra_vs_bert.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["bert_steps"] == 6
    assert set(metrics["results"]) == {"BERT (masked LM)", "ELECTRA (discriminator)"}
    for points in metrics["results"].values():
        assert len(points) == 2 and all(0.0 <= p["accuracy"] <= 1.0 for p in points)
        # the last snapshot of each run spends the budget (ELECTRA's step count is rounded)
        assert abs(points[-1]["flops"] - metrics["flops_budget"]) <= 0.25 * metrics["flops_budget"]
    assert (tmp_path / "run" / "electra_vs_bert.png").read_bytes()[:8] == PNG
