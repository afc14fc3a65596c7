"""Backend selection: ``set_backend(name)``, ``with backend(name):`` and ``MINITORCH_NLP_BACKEND``.

New tensors are created on the current backend; an operation runs on the backend of its inputs,
and inputs from two different backends are refused (move one with ``Tensor.to(name)``).
A backend plugs in with ``register_backend(name, factory)``; the factory is called once, on first
use, and may raise ``RuntimeError`` explaining what to install when it cannot run here.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable

from . import memory  # noqa: F401 - importing it keeps freed memory for the next arrays
from .base import Backend
from .numpy_backend import NumpyBackend

_FACTORIES: dict[str, Callable[[], Backend]] = {"numpy": NumpyBackend}
_INSTANCES: dict[str, Backend] = {}
_current: Backend | None = None

ENV_VAR = "MINITORCH_NLP_BACKEND"


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make ``name`` selectable; ``factory()`` builds the backend on first use."""
    _FACTORIES[name] = factory


def available_backends() -> list[str]:
    """Names that ``set_backend`` accepts (some may still fail to start on this machine)."""
    return sorted(_FACTORIES)


def get_backend(name: str | Backend | None = None) -> Backend:
    """The backend called ``name``, or the current one when ``name`` is None."""
    if name is None:
        global _current
        if _current is None:
            _current = get_backend(os.environ.get(ENV_VAR, "numpy"))
        return _current
    if not isinstance(name, str):
        return name
    if name not in _INSTANCES:
        if name not in _FACTORIES:
            raise ValueError(
                f"unknown backend {name!r}: choose one of {available_backends()}")
        _INSTANCES[name] = _FACTORIES[name]()
    return _INSTANCES[name]


def set_backend(name: str | Backend) -> Backend:
    """Make ``name`` the backend for new tensors; returns it."""
    global _current
    _current = get_backend(name)
    return _current


@contextlib.contextmanager
def backend(name: str | Backend):
    """``with backend("numba"): ...`` creates tensors on that backend inside the block."""
    global _current
    previous = get_backend()
    _current = get_backend(name)
    try:
        yield _current
    finally:
        _current = previous


register_backend(
    "numba", lambda: importlib.import_module(".numba_backend", __name__).NumbaBackend())
register_backend("cupy", lambda: importlib.import_module(".cupy_backend", __name__).CupyBackend())

__all__ = ["Backend", "NumpyBackend", "available_backends", "backend", "get_backend",
           "register_backend", "set_backend"]
