"""The Megatron-BERT depth example (section IV-E) runs end to end in ``--smoke`` mode and writes
its metrics and picture."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.sec4, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_megatron_depth_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    run_example("megatron_depth.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["steps"] == 6
    assert set(metrics["validation_loss"]) == {"post-LN (BERT)", "pre-LN (Megatron-BERT)"}
    for by_depth in metrics["validation_loss"].values():
        assert set(by_depth) == {"1", "2"} and all(0 < loss < 10 for loss in by_depth.values())
    # the two orders hold the same number of parameters at each depth
    sizes = metrics["parameters"]
    assert sizes["post-LN (BERT)"] == sizes["pre-LN (Megatron-BERT)"]
    assert (tmp_path / "run" / "depth.png").read_bytes()[:8] == PNG
