"""``examples/long_attention.py --smoke`` draws what each efficient core attends and measures
its cost against n."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.sec9, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_long_attention_example_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    done = run_example("long_attention.py", "--smoke", "--out", str(out), "--seed", "1")
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["smoke"] is True and summary["seed"] == 1
    for name in summary["pictures"]:
        assert (out / name).read_bytes()[:8] == PNG, name
    fractions = summary["attended_fraction"]
    assert fractions["strided, per head (l = 4): head 1"] < fractions["strided, merged (l = 4)"]
    assert all(0.0 < value < 0.6 for value in fractions.values())
    assert set(summary["slopes"]) == {"full (causal)", "strided l=sqrt(n)", "LSH chunks of 64",
                                      "Linformer k=64", "Performer m=64 (causal)"}
    memory = {name: slopes["memory"] for name, slopes in summary["slopes"].items()}
    assert memory["full (causal)"] > 1.7                   # n x n probabilities
    for name in ("LSH chunks of 64", "Linformer k=64", "Performer m=64 (causal)"):
        assert memory[name] < 1.3, name
    assert "time slope" in done.stdout
