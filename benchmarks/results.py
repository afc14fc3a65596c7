"""``--json PATH`` of the benchmark scripts: their figures with what produced them.

The file holds ``{"command", "commit", "date", "machine", "figures"}``: the command line, the
git commit of the working tree (with ``+dirty`` when it has changes), the UTC time, the machine
(processor, cores, load average at the end) and the script's list of figures. Each figure is a
dict with at least

* ``path``: what was measured, in words (sizes, and which backend is ours where it matters);
* ``threads``: the thread count both sides were given (``None`` where the script sets none);
* ``against``: the peer;
* ``ratio``: our time / the peer's (the median of the per-round ratios where the script
  interleaves rounds; below 1: ours is faster);
* ``rounds``: how many rounds were timed;
* ``median_ms``: each runner's median time; ours are the runners named ``ours...`` (the first is
  the one ``ratio`` is of), the peer is the one other runner.

Scripts add keys of their own (sizes, losses, the clock); the docs show the scalar ones beside
the path. ``docs/backends.md`` shows every file in ``benchmarks/results/`` (``read_results``): a
table row and a chart bar per figure.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
RECORD_KEYS = ("command", "commit", "date", "machine", "figures")
MACHINE_KEYS = ("cores", "load_average")
FIGURE_KEYS = ("path", "threads", "against", "ratio", "rounds", "median_ms")


def _commit():
    """The checkout's commit, ``+dirty`` when a tracked file other than the results files
    differs from it (a run of several scripts rewrites ``benchmarks/results/`` as it goes, which
    changes nothing that is measured)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"], check=True,
                               capture_output=True, text=True).stdout.strip()
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


def read_results(path):
    """The record of one results file, checked: a ``ValueError`` naming the file and what is
    missing when it is not one that ``write_results`` writes."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable JSON results file ({error})") from None
    missing = [key for key in RECORD_KEYS if not isinstance(record, dict) or key not in record]
    if missing:
        raise ValueError(f"{path}: a results file needs the keys {', '.join(RECORD_KEYS)}; "
                         f"{', '.join(missing)} missing")
    missing = [key for key in MACHINE_KEYS if not isinstance(record["machine"], dict)
               or key not in record["machine"]]
    if missing:
        raise ValueError(f"{path}: machine needs {', '.join(MACHINE_KEYS)}; "
                         f"{', '.join(missing)} missing")
    load = record["machine"]["load_average"]
    if not isinstance(load, list) or not all(isinstance(value, (int, float)) for value in load):
        raise ValueError(f"{path}: machine.load_average must be a list of numbers, not {load!r}")
    if not isinstance(record["figures"], list) or not record["figures"]:
        raise ValueError(f"{path}: no figures (figures must be a non-empty list)")
    for index, figure in enumerate(record["figures"]):
        missing = [key for key in FIGURE_KEYS if not isinstance(figure, dict) or key not in figure]
        if missing:
            raise ValueError(f"{path}: figure {index} needs the keys {', '.join(FIGURE_KEYS)}; "
                             f"{', '.join(missing)} missing")
        where = f"{path}: figure {index} ({figure['path']})"
        ours, peers = split_runners(figure["median_ms"])
        if not ours or len(peers) != 1:
            raise ValueError(f"{where}: median_ms needs runners named 'ours...' and one peer, "
                             f"not {list(figure['median_ms'])}")
        numbers = [figure["ratio"], *figure["median_ms"].values()]
        if not all(isinstance(value, (int, float)) for value in numbers):
            raise ValueError(f"{where}: ratio and median_ms must be numbers, not {numbers}")
        if figure["threads"] is not None and not isinstance(figure["threads"], int):
            raise ValueError(f"{where}: threads must be a count or null, not "
                             f"{figure['threads']!r}")
    return record


def split_runners(median_ms):
    """(our runners' names, the other runners' names) of a figure's ``median_ms``."""
    names = list(median_ms) if isinstance(median_ms, dict) else []
    return ([name for name in names if name.startswith("ours")],
            [name for name in names if not name.startswith("ours")])


def figure_times(figure):
    """(our median ms, the peer's median ms) of a checked figure: the first runner named
    ``ours...``, and the one other runner."""
    ours, peers = split_runners(figure["median_ms"])
    return figure["median_ms"][ours[0]], figure["median_ms"][peers[0]]


def measurement(figure):
    """A figure's ``path`` with the scalar keys a script added (``tokens 4096``) in brackets."""
    extra = [f"{key.replace('_', ' ')} {value:.4g}" if isinstance(value, float) else
             f"{key.replace('_', ' ')} {value}" for key, value in figure.items()
             if key not in FIGURE_KEYS and isinstance(value, (int, float, str))]
    return figure["path"] + (f" ({', '.join(extra)})" if extra else "")


def all_results(directory=RESULTS):
    """path -> checked record of every ``*.json`` in ``directory``, sorted by name; a
    ``ValueError`` when there is none."""
    paths = sorted(Path(directory).glob("*.json"))
    if not paths:
        raise ValueError(f"{directory}: no results files (*.json)")
    return {path: read_results(path) for path in paths}


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
