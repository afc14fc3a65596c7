"""Whether operations record a graph: ``no_grad()`` / ``enable_grad()`` (context managers and decorators)."""
from __future__ import annotations

import functools

_enabled = True


def is_grad_enabled() -> bool:
    return _enabled


def set_grad_enabled(mode: bool) -> None:
    global _enabled
    _enabled = bool(mode)


class _GradMode:
    mode = True

    def __enter__(self):
        global _enabled
        self._previous = _enabled
        _enabled = self.mode

    def __exit__(self, *exc):
        global _enabled
        _enabled = self._previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Operations inside do not record a graph (inference, optimizer updates)."""

    mode = False


class enable_grad(_GradMode):
    """Re-enable recording inside a ``no_grad`` block."""

    mode = True
