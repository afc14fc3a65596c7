"""GShard's expert parallelism (Lepikhin et al., 2020, section 3.2): the E experts of a
mixture-of-experts layer split over the ranks, each rank holding E / N of them, while the
tokens stay data-parallel (each rank routes its own tokens, a group of GShard's).

After the gate (eq 32) each rank has a buffer of C slots per expert, (E, C, d_model). An
all-to-all sends rank j the buffers of the experts it holds, from every rank; it runs its
experts (eq 33) on N x C tokens each, and a second all-to-all -- the same exchange -- brings
every output back to the rank of its token, which combines them (eq 34). The autograd
all-to-all's backward is the reverse exchange, so the experts' gradients collect every rank's
tokens. The gate's weights are replicated: average their gradients over the ranks as data
parallelism does (``DataParallel`` on the rest of the model; see ``ExpertParallelMoE``).
"""
from __future__ import annotations

import numpy as np

from ..nn import Experts
from ..nn.moe import MixtureOfExperts
from .collectives import all_to_all
from .tensor_parallel import _rows, _set, _share

__all__ = ["ExpertParallelMoE"]


class ExpertParallelMoE(MixtureOfExperts):
    """``nn.MixtureOfExperts`` with its ``num_experts`` experts split over ``comm``'s ranks
    (rank r holds experts r E / N ... (r + 1) E / N - 1, in ``experts``); the gate, routing,
    capacity and auxiliary loss are the layer's, on this rank's tokens. The other arguments are
    ``MixtureOfExperts``'s.

    The gate's gradient is this rank's share: all-reduce it (or wrap the model's other
    parameters in ``DataParallel``); the experts' gradients are complete on their rank."""

    def __init__(self, d_model, d_ff, num_experts, comm, **options):
        super().__init__(d_model, d_ff, num_experts, **options)
        self.comm = comm
        self.experts = Experts(_share(num_experts, comm, "num_experts", "ExpertParallelMoE"),
                               d_model, d_ff)

    @classmethod
    def from_dense(cls, layer, comm):
        """This rank's experts (and a copy of the gate) of a ``MixtureOfExperts``."""
        shard = cls(layer.d_model, layer.experts.d_ff, layer.num_experts, comm, k=layer.k,
                    capacity_factor=layer.capacity_factor, second_expert=layer.second_expert,
                    group_size=layer.group_size, generator=layer.generator)
        _set(shard.gate.weight, np.asarray(layer.gate.weight.data))
        _set(shard.experts.wi, _rows(layer.experts.wi.data, comm))
        _set(shard.experts.wo, _rows(layer.experts.wo.data, comm))
        return shard

    def run_experts(self, expert_inputs):
        """(E, C, d) buffers of this rank's tokens -> the outputs of their experts, run where
        the experts live."""
        ranks, local = self.comm.size, self.experts.num_experts
        _, capacity, d_model = expert_inputs.shape
        received = all_to_all(expert_inputs, self.comm, axis=0)   # (source rank, my expert)
        mine = received.reshape(ranks, local, capacity, d_model).permute(1, 0, 2, 3) \
            .reshape(local, ranks * capacity, d_model)            # each expert: N x C tokens
        out = self.experts(mine)                                  # eq 33
        back = out.reshape(local, ranks, capacity, d_model).permute(1, 0, 2, 3) \
            .reshape(ranks * local, capacity, d_model)
        return all_to_all(back, self.comm, axis=0)                # to the tokens' ranks
