"""``examples/long_attention.py --smoke`` draws what each efficient core attends, measures its
cost against n and trains each pattern on the long-range retrieval task; the task itself
separates a pattern that reaches the first token from one that cannot."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.sec9, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_long_attention_example_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    done = run_example("long_attention.py", "--smoke", "--out", str(out), "--seed", "1",
                       timeout=300)
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
    accuracy = summary["long_range_accuracy"]
    assert set(accuracy) == {"full", "sliding window w=2", "strided l=sqrt(n)",
                             "BigBird (global block 0)", "LSH 2 buckets", "Linformer k=8",
                             "Performer m=32"}
    for by_length in accuracy.values():
        assert set(by_length) == {"8", "16"}
        assert all(0.0 <= value <= 1.0 for value in by_length.values())
    assert "acc at n=16" in done.stdout


def load_example():
    path = Path(__file__).resolve().parent.parent / "examples" / "long_attention.py"
    spec = importlib.util.spec_from_file_location("long_attention_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_long_range_task_needs_a_pattern_that_reaches_back():
    """At n = 16, 20 steps: full attention retrieves the first token (1.0 today), a sliding
    window of 2 cannot reach it in two layers and stays near chance (1/8; 0.11 today)."""
    example = load_example()
    ids, values = example.retrieval_batch(np.random.default_rng(0), 4, 16)
    assert (ids[:, 0] == values).all() and (ids[:, -1] == example.QUERY).all()
    assert ((ids[:, 1:-1] >= example.VALUES) & (ids[:, 1:-1] < example.QUERY)).all()
    patterns = example.task_patterns(16, 16, 0)
    full = example.retrieval_accuracy(*patterns["full"], 16, 20, 2, 0)
    window = example.retrieval_accuracy(*patterns["sliding window w=2"], 16, 20, 2, 0)
    assert full > 0.9 and window < 0.3, (full, window)
