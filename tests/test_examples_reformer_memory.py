"""``examples/reformer_memory.py --smoke`` traces the peak memory of forward + backward against
depth for reversible Reformer blocks, recomputed and recorded."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.sec9, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.eq(104)
@pytest.mark.eq(105)
def test_reformer_memory_example_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    done = run_example("reformer_memory.py", "--smoke", "--out", str(out), "--seed", "1")
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["smoke"] is True and summary["seed"] == 1
    assert (out / "memory.png").read_bytes()[:8] == PNG
    growth = summary["growth"]
    assert set(growth) == {"reversible (recomputed)", "ordinary (recorded)"}
    # from 1 to 8 blocks: about 1.7x with recomputation, 5.6x recorded
    assert growth["reversible (recomputed)"] < 2.5 < growth["ordinary (recorded)"]
    assert summary["slopes"]["reversible (recomputed)"]["memory"] < 0.5
    assert summary["slopes"]["ordinary (recorded)"]["memory"] > 0.7
    assert "memory grows" in done.stdout
