"""A training run's checkpoint: ``checkpoint.npz`` in the run's folder, a ``save``/``load`` file
(see ``io.checkpoint``) whose ``format`` entry marks it as a run of ``minitorch-nlp train``,
``demo``, ``distill`` or ``compress``. ``training.LanguageModelRun`` writes and resumes it; the
command line, ``inference`` and ``compress`` find and read it here."""
from __future__ import annotations

import os

from .checkpoint import load
from .sizes import check_sizes

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
    _check_against_weights(path, state)
    return state


def _check_against_weights(path, state):
    """The header's settings and step must fit the weights the file stores (``io.sizes``)."""
    config, model = state.get("config"), state.get("model")
    if not isinstance(config, dict) or not isinstance(model, dict) or not model:
        raise ValueError(f"{path}: the checkpoint has no settings or no weights; the file is "
                         "damaged")
    check_sizes(path, config, {name: tuple(array.shape) for name, array in model.items()})
    step, steps = state.get("step"), config.get("steps")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 \
            or (isinstance(steps, int) and step > steps):
        raise ValueError(f"{path}: step = {step!r} is not a step of a {steps}-step run; the "
                         "file is damaged")
