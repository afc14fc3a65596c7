"""``examples/char_transformer_xl.py --smoke`` trains Transformer-XL and its memoryless twin,
measures bits per character by evaluation memory and the evaluation speed, writes its outputs."""
import json

import pytest

pytestmark = pytest.mark.sec8


def test_char_transformer_xl_example_smoke_run(tmp_path, run_example):
    out = tmp_path / "xl"
    done = run_example("char_transformer_xl.py", "--smoke", "--out", str(out), "--seed", "1")
    assert "bits per character by evaluation memory" in done.stdout and "ms/char" in done.stdout

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["seed"] == 1
    assert set(metrics["bits_per_character"]) == {"XL", "no memory"}
    for row in metrics["bits_per_character"].values():
        assert set(row) == {"0", "8", "16"} and all(0 < bits < 10 for bits in row.values())
    for speed in metrics["eval_speed"].values():
        assert speed["sliding_window_ms"] > 0 and speed["memory_ms"] > 0
    for picture in ("loss.png", "bpc_by_memory.png", "eval_speed.png"):
        assert (out / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
