"""``examples/xlnet_permutation.py --smoke`` pretrains XLNet and BERT, draws the two streams'
masks, fine-tunes all four models on string reversal, writes its outputs."""
import json

import pytest

pytestmark = pytest.mark.sec4


def test_xlnet_permutation_example_smoke_run(tmp_path, run_example):
    out = tmp_path / "xlnet"
    done = run_example("xlnet_permutation.py", "--smoke", "--out", str(out), "--seed", "1")
    assert "sampled order" in done.stdout and "reverse-task accuracy" in done.stdout

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["seed"] == 1
    assert sorted(metrics["order"]) == list(range(8))
    assert metrics["targets"] == metrics["order"][-3:]
    assert set(metrics["reverse_accuracy"]) == {"XLNet", "XLNet (no pretraining)", "BERT",
                                                "BERT (no pretraining)"}
    assert all(0.0 <= a <= 1.0 for a in metrics["reverse_accuracy"].values())
    for picture in ("permutation_masks.png", "pretraining.png", "finetuning.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
