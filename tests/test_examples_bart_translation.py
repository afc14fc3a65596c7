"""The BART translation-recipe example runs end to end in ``--smoke`` mode and writes its table
(exact match after stage 1 and at the end, against one stage and from scratch) and pictures
(section V-B, figure 12)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


@pytest.mark.sec5
def test_bart_translation_smoke(run_example, tmp_path):
    run_example("bart_translation.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True
    results = metrics["results"]
    assert list(results) == ["two stages", "pretrained, one stage", "from scratch"]
    assert 0.0 <= results["two stages"]["after stage 1"] <= 1.0
    assert results["from scratch"]["after stage 1"] is None
    assert all(0.0 <= row["final"] <= 1.0 for row in results.values())
    for picture in ("loss.png", "exact_match.png"):
        assert (tmp_path / "run" / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.sec5
def test_bart_translation_stage_steps_and_their_error(run_example, tmp_path):
    run_example("bart_translation.py", "--smoke", "--stages", "2", "1", "--out",
                str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (metrics["config"]["stage1"], metrics["config"]["stage2"]) == (2, 1)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "examples" / "bart_translation.py"),
                           "--smoke", "--stages", "0", "2"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 2
    assert "--stages must be two positive step counts, got [0, 2]" in done.stderr
