"""What the command-line tests share: a small text to train on, the options of a tiny run, and
the check that a command fails with one line naming what to change. The ``text_file`` fixture
(that text in a file) is in ``conftest.py``."""
from __future__ import annotations

from minitorch_nlp import cli

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
