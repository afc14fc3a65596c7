"""``examples/long_attention.py --smoke`` draws what each efficient core attends, measures its
cost against n and trains each pattern on the long-range retrieval task; the task itself
separates a pattern that reaches the first token from one that cannot."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from minitorch_nlp import scripting

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
    assert set(summary["slopes"]) == {"full (causal)", "banded w=256", "BigBird b=64",
                                      "strided l=sqrt(n)", "LSH chunks of 64", "Linformer k=64",
                                      "Performer m=64 (causal)"}
    for by_length in summary["scaling"].values():
        assert set(by_length) == {"128", "256", "512"}
    assert summary["skipped"] == []
    memory = {name: slopes["memory"] for name, slopes in summary["slopes"].items()}
    # BigBird's 7 blocks of 64 cover most of n <= 512 keys, so its memory is linear only beyond
    for name in ("banded w=256", "LSH chunks of 64", "Linformer k=64", "Performer m=64 (causal)"):
        assert memory[name] < 1.3, name
    assert "forward + backward, ms" in done.stdout and "slope" in done.stdout
    accuracy = summary["long_range_accuracy"]
    assert set(accuracy) == {"full", "sliding window w=8", "strided l=sqrt(n)",
                             "BigBird b=16 (global block 0)", "LSH chunks of 32",
                             "Linformer k=16", "Performer m=32"}
    for by_length in accuracy.values():
        assert set(by_length) == {"32", "64"}
        assert all(0.0 <= value <= 1.0 for value in by_length.values())
    assert "retrieval accuracy on 512 fresh sequences" in done.stdout


def load_example():
    return scripting.definitions(Path(__file__).resolve().parent.parent / "examples"
                                 / "long_attention.py")


def test_the_retrieval_data_plants_the_answer_first_and_the_query_last():
    example = load_example()
    ids, values = example.retrieval_batch(np.random.default_rng(0), 64, 40)
    assert ids.shape == (64, 40) and values.shape == (64,)
    assert (ids[:, 0] == values).all() and (ids[:, -1] == example.QUERY).all()
    assert ((values >= 0) & (values < example.VALUES)).all()
    assert len(set(values.tolist())) > 1
    fillers = ids[:, 1:-1]
    assert ((fillers >= example.VALUES) & (fillers < example.QUERY)).all()
    assert len(np.unique(fillers)) == example.FILLERS
    again, _ = example.retrieval_batch(np.random.default_rng(0), 64, 40)
    assert (again == ids).all()


def test_the_long_range_task_needs_a_pattern_that_reaches_back():
    """At n = 24, 30 steps: full attention retrieves the first token (0.98 today), a sliding
    window of 8 reaches 16 positions back in two layers, not position 0, and stays near chance
    (1/8; 0.12 today)."""
    example = load_example()
    patterns = example.task_patterns(24, 16, 0)
    full = example.retrieval_accuracy(*patterns["full"], 24, 30, 2, 0)
    window = example.retrieval_accuracy(*patterns["sliding window w=8"], 24, 30, 2, 0)
    assert full > 0.9 and window < 0.3, (full, window)


def test_the_scaling_skips_full_attention_above_full_up_to(capsys):
    example = load_example()
    cfg = dict(lengths=[64, 128, 256], head_dim=8, full_up_to=128)
    results, skipped = example.scaling(cfg, 0)
    assert set(results) == set(example.cores(64, 8, 0))
    for name, by_length in results.items():
        assert set(by_length) == ({64, 128} if name == example.FULL else {64, 128, 256}), name
        assert all(value["seconds"] > 0 and value["peak_mb"] > 0 for value in by_length.values())
    assert skipped == [(example.FULL, 256)]
    assert "full (causal) skipped at n = 256" in capsys.readouterr().out
