"""Whether operations record a graph: ``no_grad()`` / ``enable_grad()`` (context managers and
decorators).

The mode belongs to the thread, as in PyTorch: a ``no_grad`` block in a background thread (an
index refresh encoding passages while training goes on) does not stop the training thread from
recording its graph. A new thread starts with recording on.
"""
from __future__ import annotations

import functools
import threading


class _ThreadMode(threading.local):
    enabled = True


_mode = _ThreadMode()


def is_grad_enabled() -> bool:
    return _mode.enabled


def set_grad_enabled(mode: bool) -> None:
    _mode.enabled = bool(mode)


class _GradMode:
    mode = True

    def __enter__(self):
        self._previous = _mode.enabled
        _mode.enabled = self.mode

    def __exit__(self, *exc):
        _mode.enabled = self._previous

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
