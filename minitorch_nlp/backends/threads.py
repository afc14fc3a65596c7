"""How many threads the CPU backends use: ``set_num_threads(n)``.

NumPy's matrix products run in OpenBLAS, whose threads busy-wait for work after each call. On a
small or busy machine, with small matrices, two of them spinning against each other (or against
Numba's threads) make every product many times slower than one thread would; the training
command therefore runs on one thread unless told otherwise. ``OPENBLAS_NUM_THREADS`` only works
before NumPy is imported; this sets the count at run time, through OpenBLAS's C API.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

__all__ = ["set_num_threads"]

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")


def _openblas_libraries():
    """The OpenBLAS libraries loaded in this process (NumPy's, SciPy's ...)."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        pass
    if not paths:
        bundled = Path(np.__file__).parent.parent / "numpy.libs"
        paths = {str(p) for p in bundled.glob("*openblas*")}
    return sorted(paths)


def choose_numba_threading_layer():
    """Select Numba's ``workqueue`` threading layer unless the user chose one (see
    ``numba_kernels``: OpenMP threads spinning against OpenBLAS's slow both down). It only takes
    effect before Numba starts its threads, which ``numba.set_num_threads`` does: call this
    first."""
    import numba

    if numba.config.THREADING_LAYER == "default":
        numba.config.THREADING_LAYER = "workqueue"


def set_num_threads(threads):
    """Give ``threads`` threads to OpenBLAS and to Numba's parallel kernels; returns the names of
    the libraries that took the setting."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"set_num_threads: threads must be a positive int, got {threads!r}")
    done = []
    for path in _openblas_libraries():
        library = ctypes.CDLL(path)
        setter = next((name for name in _SETTERS if hasattr(library, name)), None)
        if setter is not None:
            getattr(library, setter)(ctypes.c_int(threads))
            done.append("OpenBLAS")
    try:
        import numba
    except ImportError:
        return done
    choose_numba_threading_layer()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return done + [f"numba ({numba.config.THREADING_LAYER} layer)"]
