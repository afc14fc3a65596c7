"""The retrieval example (section VII) runs end to end in ``--smoke`` mode and writes its metrics
and picture."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.sec7, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_retrieval_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    run_example("retrieval.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["passages"] == 11
    assert set(metrics["recall_held_out"]) == {"BM25", "DPR", "ORQA (ICT)", "REALM"}
    for recall in metrics["recall_held_out"].values():
        values = list(recall.values())
        assert values == sorted(values) and all(0 <= v <= 1 for v in values)
    assert metrics["recall_held_out"]["BM25"]["1"] > 0.5      # names are rare words
    assert set(metrics["exact_match"]["train"]) == {"ORQA", "REALM", "RAG-Token",
                                                    "RAG-Sequence (thorough)",
                                                    "RAG-Sequence (fast)"}
    assert set(metrics["two_hop_both_found"]) == {"GoldEn (2 hops)", "BM25 top 2", "DPR top 2"}
    assert metrics["dpr_loss"]["last"] < metrics["dpr_loss"]["first"]
    assert metrics["realm_index_refreshes"] >= 1
    assert (tmp_path / "run" / "recall.png").read_bytes()[:8] == PNG
