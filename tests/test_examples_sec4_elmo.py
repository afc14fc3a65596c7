"""``examples/elmo.py --smoke`` pretrains a biLM, trains both classifiers, writes its outputs."""
import json

import pytest

pytestmark = pytest.mark.sec4


def test_elmo_example_smoke_run(tmp_path, run_example):
    out = tmp_path / "elmo"
    done = run_example("elmo.py", "--smoke", "--out", str(out), "--seed", "1")
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
