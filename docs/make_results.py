"""Run the examples at their documented full settings and keep what the site shows.

    python docs/make_results.py                     # every example in examples/, one after another
    python docs/make_results.py --only pruning      # just these (the option repeats)

Each example runs as a script, ``python examples/NAME.py --out docs/results/NAME``, so the folder
holds exactly its figures (PNG) and ``metrics.json``: {"example", "command", "commit", "date",
"wall_time_s", "machine", "settings", "metrics"}, where "settings" are the options and settings the
run chose (the example's ``settings.json``) and "metrics" what it measured. Smoke runs never come
here: the tests run ``--smoke`` into temporary folders.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(path.stem for path in (ROOT / "examples").glob("*.py"))
RESULTS = ROOT / "docs" / "results"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="make_results.py", description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this example (repeatable): one of " + ", ".join(EXAMPLES))
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="folder of the results, one subfolder per example (docs/results)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or ()) - set(EXAMPLES))
    if unknown:
        parser.exit(2, f"minitorch-nlp: error: --only {', '.join(unknown)}: no such example in "
                       f"examples/ (one of {', '.join(EXAMPLES)})\n")
    return args


def machine():
    """The processor and the number of cores the run could use, in words."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                  if line.startswith("model name")]
        name = models[0] if models else name
    return f"{name}, {cores} cores, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def commit(name):
    """The checkout's commit, with "+changes" when ``examples/NAME.py`` or the package differ
    from it."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", f"examples/{name}.py",
                            "minitorch_nlp"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def run(name, results):
    """Run ``examples/NAME.py`` at its full settings into ``results/NAME`` (replaced) and write
    its ``metrics.json``; returns that record."""
    target = results / name
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / name
        command = [sys.executable, f"examples/{name}.py", "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        began = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env)
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"minitorch-nlp: error: examples/{name}.py exited "
                             f"{done.returncode}; {target} left as it was")
        chosen = json.loads((out / "settings.json").read_text(encoding="utf-8"))
        measured = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        chosen["options"].pop("out", None)
        record = dict(example=name,
                      command=f"python examples/{name}.py --out docs/results/{name}",
                      commit=commit(name),
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat(
                          timespec="seconds"),
                      wall_time_s=round(wall, 1), machine=machine(), settings=chosen,
                      metrics=measured)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for figure in sorted(out.glob("*.png")):
            shutil.copy2(figure, target / figure.name)
        (target / "metrics.json").write_text(json.dumps(record, indent=1) + "\n",
                                             encoding="utf-8")
    print(f"{name}: {wall:.0f} s, {len(list(target.glob('*.png')))} figures -> {target}")
    return record


def main(argv=None):
    args = parse_args(argv)
    for name in args.only or EXAMPLES:
        run(name, args.results)


if __name__ == "__main__":
    main()
