"""``examples/char_transformer_xl.py --smoke`` trains Transformer-XL and the deep character
Transformer with its auxiliary losses, measures bits per character by evaluation memory (XL) and
context (vanilla) and the evaluation speed, writes its outputs."""
import json

import pytest

pytestmark = pytest.mark.sec8


def test_char_transformer_xl_example_smoke_run(tmp_path, run_example):
    out = tmp_path / "xl"
    done = run_example("char_transformer_xl.py", "--smoke", "--out", str(out), "--seed", "1")
    assert "XL: bits per character by evaluation memory" in done.stdout
    assert "vanilla + auxiliary losses: bits per character by context" in done.stdout
    assert "ms/char" in done.stdout

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["seed"] == 1
    bpc = metrics["bits_per_character"]
    assert set(bpc["XL by evaluation memory"]) == {"0", "8", "16"}
    assert set(bpc["vanilla + auxiliary losses by context"]) == {"4", "8"}
    for row in bpc.values():
        assert all(0 < bits < 10 for bits in row.values())
    assert set(metrics["final_training_loss"]) == {"XL", "vanilla + auxiliary losses"}
    for speed in metrics["eval_speed"].values():
        assert speed["sliding_window_ms"] > 0 and speed["memory_ms"] > 0
    for picture in ("loss.png", "bpc_by_context.png", "eval_speed.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
