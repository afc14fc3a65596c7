"""What the command-line tests share: a small text to train on, the options of a tiny run, the
check that a command fails with one line naming what to change, and running a command line as
the ``minitorch-nlp`` console script would (``console_script``, ``run_printed``). The
``text_file`` fixture (that text in a file) is in ``conftest.py``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from minitorch_nlp import cli

ROOT = Path(__file__).resolve().parent.parent

TEXT = ("the quick brown fox jumps over the lazy dog. " * 40
        + "a stitch in time saves nine. " * 40)
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
        "--batch-size", "4", "--eval-every", "3", "--backend", "numpy", "--no-progress"]


def fails(capsys, argv, status=2):
    """The one error line of ``argv``, after checking its exit status and that it is one line
    (what was printed before the command is dropped)."""
    capsys.readouterr()
    assert cli.main([str(a) for a in argv]) == status
    err = capsys.readouterr().err
    assert err.startswith("minitorch-nlp: error: ") and err.count("\n") == 1, err
    return err


def console_script(directory: Path) -> Path:
    """A launcher like the ``minitorch-nlp`` console script that pip writes: run as a file, it
    puts its own folder on ``sys.path``, not the working directory."""
    launcher = directory / "bin" / "minitorch-nlp"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text("import sys\nfrom minitorch_nlp.cli import main\nsys.exit(main())\n")
    return launcher


def run_printed(command: str, cwd: Path, launcher: Path) -> subprocess.CompletedProcess:
    """Run a ``minitorch-nlp ...`` command line as printed, from ``cwd``."""
    words = command.split()
    assert words[0] == "minitorch-nlp"
    return subprocess.run([sys.executable, str(launcher), *words[1:]], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
