"""A training run's checkpoint: ``checkpoint.npz`` in the run's folder, a ``save``/``load`` file
(see ``io.checkpoint``) whose ``format`` entry marks it as a run of ``minitorch-nlp train``,
``demo``, ``distill`` or ``compress``. ``training.LanguageModelRun`` writes and resumes it; the
command line, ``inference`` and ``compress`` find and read it here."""
from __future__ import annotations

import os

from .checkpoint import load

__all__ = ["CHECKPOINT_NAME", "FORMAT", "checkpoint_file", "read_checkpoint"]

CHECKPOINT_NAME = "checkpoint.npz"
FORMAT = "minitorch-nlp-language-model"


def checkpoint_file(path):
    """The checkpoint file that ``path`` (the file, or the run directory holding it) names."""
    path = os.fspath(path)
    return os.path.join(path, CHECKPOINT_NAME) if os.path.isdir(path) else path


def read_checkpoint(path):
    """The state saved by ``LanguageModelRun.save`` at ``path`` (file or run directory)."""
    path = checkpoint_file(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}; train one with `minitorch-nlp train` "
                                "or `minitorch-nlp demo`")
    state = load(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a language-model checkpoint written by "
                         "minitorch-nlp train/demo")
    return state
