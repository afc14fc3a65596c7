"""``examples/rnn_attention.py --smoke``: trains Bahdanau and Luong models for a few steps and
writes the alignment heat maps, the loss curves and the metrics."""
import json

import pytest

pytestmark = pytest.mark.sec3


def test_rnn_attention_example_smoke_run(tmp_path, run_example):
    out = tmp_path / "rnn_attention"
    done = run_example("rnn_attention.py", "--smoke", "--out", str(out), "--seed", "1")

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["smoke"] is True and metrics["config"]["seed"] == 1
    assert set(metrics["models"]) == {"bahdanau", "luong-general"}
    for name, result in metrics["models"].items():
        assert name in done.stdout
        assert 0.0 <= result["exact_match_greedy"] <= 1.0
        assert 0.0 <= result["exact_match_beam4"] <= 1.0
        assert len(result["loss_history"]) == metrics["config"]["steps"]
        assert result["final_loss"] < result["first_loss"]
        assert (out / f"alignments_{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "losses.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
