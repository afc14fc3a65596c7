"""``examples/attention_masks.py --smoke`` draws every mask pattern and counts what each costs."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.sec8, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_attention_masks_example_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    done = run_example("attention_masks.py", "--smoke", "--out", str(out), "--seed", "2")
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["smoke"] is True and summary["seed"] == 2
    assert len(summary["pictures"]) == 18
    for name in summary["pictures"]:
        assert (out / name).read_bytes()[:8] == PNG, name
    fractions = summary["allowed_fraction"]
    assert fractions["causal"] == pytest.approx(36 / 64)           # n(n+1)/2 of n^2, n = 8
    assert fractions["permutation_query"] < fractions["permutation_content"]
    assert all(0.0 < value <= 1.0 for value in fractions.values())
    cost = summary["cost"]
    assert cost["full"]["64"]["pairs"] == 64 * 64
    for sparse in ("sliding window w=8", "strided l=sqrt(n)", "fixed l=sqrt(n), c=1"):
        assert cost[sparse]["64"]["pairs"] < cost["causal"]["64"]["pairs"], sparse
    assert cost["BigBird b=8, r=1"]["64"]["pairs"] < cost["full"]["64"]["pairs"]
    assert cost["strided l=sqrt(n)"]["64"]["max_keys_per_query"] <= 8 + 1 + 8
    assert "pairs at n=64" in done.stdout
    assert np.isclose(cost["causal"]["16"]["pairs"], 16 * 17 / 2)
