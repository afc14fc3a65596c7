"""``docs/make_results.py`` runs an example at its full settings into a results folder: the
figures and one ``metrics.json`` recording the command, commit, date, wall time, machine,
settings and metrics; an unknown example is a one-line error, exit 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def make_results(*args, cwd):
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return subprocess.run([sys.executable, str(ROOT / "docs" / "make_results.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)})


def test_an_unknown_example_is_a_one_line_error(tmp_path):
    done = make_results("--only", "no_such_example", "--results", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("minitorch-nlp: error: --only no_such_example: no such example")
    assert done.stderr.count("\n") == 1 and not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_full_run_writes_its_figures_and_the_record(tmp_path):
    pytest.importorskip("matplotlib")
    done = make_results("--only", "attention_masks", "--results", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "attention_masks"
    record = json.loads((folder / "metrics.json").read_text())
    assert set(record) == {"example", "command", "commit", "date", "wall_time_s", "machine",
                           "settings", "metrics"}
    assert record["example"] == "attention_masks" and record["wall_time_s"] > 0
    assert record["command"] == "python examples/attention_masks.py --out " \
                                "docs/results/attention_masks"
    assert record["settings"]["options"]["smoke"] is False
    assert record["settings"]["settings"]["cost_lengths"] == [64, 256, 1024, 2048]
    assert record["metrics"]["smoke"] is False
    figures = sorted(path.name for path in folder.glob("*.png"))
    assert figures == sorted(record["metrics"]["pictures"])
    assert not (folder / "settings.json").exists()
