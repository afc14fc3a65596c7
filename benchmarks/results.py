"""``--json PATH`` of the benchmark scripts: their figures with what produced them.

The file holds ``{"command", "commit", "date", "machine", "figures"}``: the command line, the
git commit of the working tree (with ``+dirty`` when it has changes), the UTC time, the machine
(processor, cores, load average at the end) and the script's list of figures, each a dict whose
``ratio`` is ours / theirs (below 1: ours is faster). The docs chart the files kept in
``benchmarks/results/``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path


def _commit():
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], check=True, capture_output=True,
                               text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def write_results(path, figures, argv):
    """Write ``figures`` (a list of dicts) and the run's provenance to ``path`` as JSON."""
    record = {
        "command": " ".join(["python"] + list(argv)),
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"processor": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "load_average": os.getloadavg()},
        "figures": figures,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"figures written to {path}")


def comparison_parser(description, families, *, repeats, budget):
    """The options of a script that compares families with HuggingFace's: ``--only FAMILY``,
    ``--threads``, ``--repeats``, ``--budget`` (seconds per measurement) and ``--json``; the
    script adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--only", choices=sorted(families))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--budget", type=float, default=budget,
                        help="seconds per measurement")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    return parser
