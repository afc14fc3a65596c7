"""What the project's tests and its users share.

* :mod:`~minitorch_nlp.testing.gradcheck`: finite-difference checks of gradients
  (``gradcheck``, ``gradgradcheck``) for anyone who writes a ``Function``;
* ``reference``: the paper's equations written a second way, in HIPS ``autograd.numpy``;
* ``strategies``: hypothesis strategies for arrays, masks and token batches;
* :func:`check_equation`: property-test an implementation of a numbered equation against the
  reference (``minitorch-nlp check 12 mypackage.module:function`` on the command line);
* ``course``: a student workspace of stubs, graded by ``check_equation``.

``reference``, ``strategies``, ``check_equation`` and ``course`` need the ``test`` extra (HIPS
autograd and hypothesis); they are imported on first use, so ``import minitorch_nlp.testing``
works without it.
"""
from __future__ import annotations

import importlib

from .gradcheck import GradcheckError, gradcheck, gradgradcheck

__all__ = ["EquationMismatch", "GradcheckError", "TaskNotDone", "check_equation", "gradcheck",
           "gradgradcheck", "specs"]

_LAZY = {"check_equation": "check", "EquationMismatch": "check", "TaskNotDone": "check",
         "specs": "check"}


def import_extra(submodule: str):
    """Import ``minitorch_nlp.testing.<submodule>``, saying which extra to install when HIPS
    autograd or hypothesis is missing."""
    try:
        return importlib.import_module(f".{submodule}", __name__)
    except ImportError as error:
        raise ImportError(f"minitorch_nlp.testing.{submodule} needs HIPS autograd and "
                          f"hypothesis: pip install 'minitorch-nlp[test]' ({error})") from error


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_extra(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
