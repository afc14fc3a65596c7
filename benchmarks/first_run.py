"""The first run of a fresh install: ``minitorch-nlp demo --smoke`` with nothing compiled yet.

    python benchmarks/first_run.py [--repeats 2] [--threads 1] [--json PATH]

Each round runs, each in a new process with empty caches:

* ``first``: the numba backend (the command line's default) with an empty Numba cache
  (``NUMBA_CACHE_DIR``) and no Python bytecode (``PYTHONPYCACHEPREFIX``), as after
  ``pip install``: the process compiles every kernel the demo calls;
* ``second``: the same command again on the caches the first one filled, as every later run;
* ``numpy``: ``--backend numpy``, which compiles nothing: the peer, the time of the work itself.

Reported: each process's wall time (medians over the rounds) and first / numpy. The smoke run is
a tiny model for a few steps, so nearly all of the first process's time beyond the numpy
backend's is compilation.

Target (issue 40): the first process under 30 s on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 30.0


def _demo_seconds(out, caches, threads, backend=None):
    """Wall seconds of one ``demo --smoke`` process writing to ``out`` with the Numba and
    bytecode caches under ``caches``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(caches / "numba"),
               PYTHONPYCACHEPREFIX=str(caches / "pyc"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "minitorch_nlp", "demo", "--smoke", "--overwrite",
               "--out", str(out), "--threads", str(threads)]
    if backend:
        command += ["--backend", backend]
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def one_round(threads):
    """{"first", "second", "numpy"}: seconds of each process, on fresh caches."""
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        first = _demo_seconds(work / "run", work / "caches", threads)
        second = _demo_seconds(work / "run", work / "caches", threads)
        numpy = _demo_seconds(work / "run", work / "numpy-caches", threads, backend="numpy")
    return {"first": first, "second": second, "numpy": numpy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="rounds (%(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="--threads of the demo")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    rounds = []
    for index in range(args.repeats):
        rounds.append(one_round(args.threads))
        print(f"round {index + 1}: " + ", ".join(f"{name} {seconds:.1f} s"
                                                 for name, seconds in rounds[-1].items()),
              flush=True)
    median = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    print(f"\nminitorch-nlp demo --smoke --threads {args.threads}, medians of {len(rounds)} "
          f"rounds on {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}):")
    print(f"  first process (empty caches)   {median['first']:6.1f} s")
    print(f"  second process                 {median['second']:6.1f} s")
    print(f"  --backend numpy (no compiling) {median['numpy']:6.1f} s")
    verdict = "met" if median["first"] < TARGET_S else "MISSED"
    print(f"target first process < {TARGET_S:.0f} s: {median['first']:.1f} s  {verdict}")
    if args.json:
        write_results(args.json, [
            {"path": "first `demo --smoke` of a fresh install (empty Numba cache)",
             "threads": args.threads, "against": "--backend numpy (no compilation)",
             "ratio": statistics.median(r["first"] / r["numpy"] for r in rounds),
             "rounds": len(rounds),
             "median_ms": {"ours": median["first"] * 1e3, "numpy": median["numpy"] * 1e3},
             "second_process_ms": median["second"] * 1e3},
        ], sys.argv)


if __name__ == "__main__":
    main()
