"""How many threads the CPU backends use: ``set_num_threads(n)``.

NumPy's matrix products run in OpenBLAS, whose threads busy-wait for work after each call. On a
small or busy machine, with small matrices, two of them spinning against each other (or against
Numba's threads) make every product many times slower than one thread would; the training
command therefore runs on one thread unless told otherwise. ``OPENBLAS_NUM_THREADS`` only works
before NumPy is imported; this sets the count at run time, through OpenBLAS's C API.

How long they busy-wait is OpenBLAS's ``OPENBLAS_THREAD_TIMEOUT``: 2^28 clock cycles, about 0.1 s,
unless set. Every element-wise kernel of the numba backend, attention's blocks on Python threads
and any other library's threads (PyTorch's, in a benchmark) start within that time of a product
and share the cores with a thread that only spins. Importing this module therefore shortens the
wait to ``BLAS_SPIN_EXPONENT`` (2^12 cycles, about 2 microseconds), unless the variable is set:
on 2 cores the MiniLM embeddings of ``benchmarks/inference.py`` took 4.9 s with the default and
4.2 s so, GPT-2 generation 1.78 and 1.68 s.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import os
import threading
from pathlib import Path

import numpy as np

__all__ = ["set_num_threads"]

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = tuple(name.replace("_set_", "_get_") for name in _SETTERS)


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


def _loaded_openblas():
    """A ctypes handle on each OpenBLAS library loaded in this process."""
    return [ctypes.CDLL(path) for path in _openblas_libraries()]


# OpenBLAS clamps the exponent to 4 .. 30. Products in quick succession (generation's one-row
# products, a layer's four linear maps) were measured no slower at 12 than with the default.
BLAS_SPIN_EXPONENT = 12
_SPIN_CONTROLS = ("openblas_read_env", "blas_thread_shutdown_")


def shorten_blas_spin(exponent=BLAS_SPIN_EXPONENT):
    """Make OpenBLAS's idle threads sleep after 2^``exponent`` cycles instead of 2^28, unless
    ``OPENBLAS_THREAD_TIMEOUT`` is set (then that choice stands). OpenBLAS reads the variable
    when it loads and applies it when it starts its threads: this sets it for the moment of a
    re-read (``openblas_read_env``) and stops the threads (``blas_thread_shutdown_``); the next
    product starts them again with the new wait. No other thread may be inside a product
    meanwhile: importing the package calls it once. Returns the paths of the libraries changed."""
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return []
    changed = []
    for library in _loaded_openblas():
        if not all(hasattr(library, name) for name in _SPIN_CONTROLS):
            continue
        os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(exponent)
        try:
            library.openblas_read_env()
        finally:
            del os.environ["OPENBLAS_THREAD_TIMEOUT"]
        library.blas_thread_shutdown_()
        changed.append(library._name)
    return changed


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
    for library in _loaded_openblas():
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


@functools.cache
def _blas_thread_controls():
    """(set, get) of the thread count of each OpenBLAS library loaded when first asked."""
    controls = []
    for library in _loaded_openblas():
        names = [(setter, getter) for setter, getter in zip(_SETTERS, _GETTERS)
                 if hasattr(library, setter) and hasattr(library, getter)]
        if names:
            setter, getter = names[0]
            controls.append((getattr(library, setter), getattr(library, getter)))
    return tuple(controls)


@functools.cache
def _executor(threads, process):
    """The pool of ``threads`` threads that ``in_threads`` shares its tasks with, in the process
    ``process`` (a forked child has none of its parent's threads, so it gets a pool of its
    own)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=threads,
                                                 thread_name_prefix="minitorch-nlp")


def blas_threads():
    """How many threads OpenBLAS uses now (the most any loaded copy has; 1 if none answers)."""
    counts = [getter() for _, getter in _blas_thread_controls()]
    return max(counts, default=1)


# Handing tasks to the pool costs ~50 us each: less work than this (about one unit per element)
# stays on the calling thread.
_THREADED_WORK = 1 << 18


def task_threads(available, work, tasks):
    """How many of ``available`` threads ``in_threads`` should spread ``tasks`` independent tasks
    of ``work`` elements in all over: at most one per task, and 1 when there is too little
    work to be worth handing over, or when the caller is itself a task (the pool's threads are
    busy with its siblings, and waiting for them there could wait for ever)."""
    threads = min(available, tasks)
    return threads if threads > 1 and work >= _THREADED_WORK and not inside_a_task() else 1


_inside = threading.local()


def inside_a_task():
    """Whether the calling thread is running a task of ``in_threads``: its kernels should run
    on it alone, the other threads being busy with the other tasks."""
    return getattr(_inside, "task", False)


def in_threads(tasks, threads):
    """Run the independent callables ``tasks`` on ``threads`` Python threads, the calling thread
    one of them, each task with OpenBLAS on one thread; with ``threads`` 1, one after the other
    on the calling thread.

    For work made of stacks of small products and a kernel per block (attention's heads):
    NumPy calls OpenBLAS once per small product and such stacks run on one BLAS thread
    (``one_blas_thread``), so without this they leave the other cores idle. NumPy's products and
    copies and the numba kernels (compiled ``nogil``) release the GIL, so the tasks run side by
    side. Each thread takes the next task not yet taken until none is left, the calling thread
    too: rather than wait idle for the pool, it runs tasks on its own core (handing two no-op
    tasks to two pool threads and waiting for them took 93 us on 2 cores, and the numpy
    backend's GPT step of ``benchmarks/backends.py`` went from 121-124 to 114-116 ms at two
    threads). A task's error is raised once every thread has stopped."""
    if threads == 1:
        for task in tasks:
            task()
        return
    pending = iter(tasks)   # each ``next`` happens under the GIL: no task is taken twice

    def take_tasks():
        caller_was_inside = inside_a_task()
        _inside.task = True
        try:
            with one_blas_thread():
                for task in pending:
                    task()
        finally:
            _inside.task = caller_was_inside

    pool = _executor(threads - 1, os.getpid())
    helpers = [pool.submit(take_tasks) for _ in range(min(threads, len(tasks)) - 1)]
    try:
        take_tasks()
    finally:
        concurrent.futures.wait(helpers)
    for helper in helpers:
        helper.result()


_ONE_THREAD_LOCK = threading.Lock()
_one_thread = {"users": 0, "restore": ()}


@contextlib.contextmanager
def one_blas_thread():
    """Run the body with OpenBLAS on one thread, then give back the count it had.

    For stacks of small matrix products (attention's per-head products): NumPy calls OpenBLAS
    once per product, and with more than one thread each call hands work to the other threads
    and waits for them. When another process holds the other cores, every wait lasts until the
    scheduler runs the helper thread again; on 2 busy cores a (64, 128, 32) @ (64, 32, 128)
    stack took 26x as long on 2 threads as on one. Nested and concurrent uses count: the last
    one out restores."""
    with _ONE_THREAD_LOCK:
        if _one_thread["users"] == 0:
            restore = tuple((setter, getter()) for setter, getter in _blas_thread_controls())
            restore = tuple((setter, count) for setter, count in restore if count != 1)
            for setter, _ in restore:
                setter(ctypes.c_int(1))
            _one_thread["restore"] = restore
        _one_thread["users"] += 1
    try:
        yield
    finally:
        with _ONE_THREAD_LOCK:
            _one_thread["users"] -= 1
            if _one_thread["users"] == 0:
                for setter, count in _one_thread["restore"]:
                    setter(ctypes.c_int(count))


shorten_blas_spin()
