"""``examples/elmo.py --smoke`` pretrains a biLM, trains both classifiers, writes its outputs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.sec4


def test_elmo_example_smoke_run(tmp_path):
    out = tmp_path / "elmo"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "elmo.py"), "--smoke",
                           "--out", str(out), "--seed", "1"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test accuracy" in done.stdout and "scalar mix" in done.stdout

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["seed"] == 1
    for key in ("accuracy_plain_embeddings", "accuracy_elmo", "accuracy_majority_word"):
        assert 0.0 <= metrics[key] <= 1.0
    weights = metrics["scalar_mix_weights"]
    assert len(weights) == metrics["config"]["num_layers"] + 1
    assert abs(sum(weights) - 1.0) < 1e-5
    assert metrics["test_examples"] > 0 and metrics["train_examples"] > 0
    for picture in ("loss.png", "scalar_mix.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
