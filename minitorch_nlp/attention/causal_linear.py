"""Causal linear attention (the Performer's causal FAVOR+, Choromanski et al., 2021) as one fused
operation: out_i = phi(q_i) S_i / (phi(q_i) . z_i) with the prefix sums
S_i = sum_{j<=i} phi(k_j) v_j^T and z_i = sum_{j<=i} phi(k_j).

``CausalLinearAttention`` runs the backend's kernel (NumPy: chunk products and running sums;
numba: one running sum per (batch, head) pair, ``backends/numba_linear_kernels.py``; CuPy: the
same as numba.cuda kernels, ``backends/cuda_linear_kernels.py``) and, for
second derivatives, differentiates ``composite``: the same chunked computation from the engine's
operations.
"""
from __future__ import annotations

from .. import checks
from ..autograd import Tensor, concatenate, zeros
from ..autograd.ops_fused import FusedFunction

__all__ = ["CausalLinearAttention", "causal_linear_attention"]


class CausalLinearAttention(FusedFunction):
    @staticmethod
    def forward(ctx, q_features, k_features, v, *, chunk):
        ctx.save_inputs(0, 1, 2)
        ctx.static = {"chunk": chunk}
        out, ctx.kernel_state = ctx.backend.causal_linear_attention(q_features, k_features, v,
                                                                    chunk)
        return out

    @staticmethod
    def fast_backward(ctx, grad):
        q_features, k_features, v = ctx.saved_tensors
        return ctx.backend.causal_linear_attention_backward(
            grad, q_features.data, k_features.data, v.data, ctx.kernel_state,
            ctx.static["chunk"])

    @staticmethod
    def composite(q_features, k_features, v, *, chunk):
        """The masked (chunk x chunk) product inside a chunk, the running sums of the earlier
        chunks."""
        batch, heads, time, width = q_features.shape
        state = zeros(batch, heads, width, v.shape[-1], dtype=v.dtype, backend=v.backend.name)
        normaliser = zeros(batch, heads, width, 1, dtype=v.dtype, backend=v.backend.name)
        outputs = []
        for start in range(0, time, chunk):
            window = slice(start, start + chunk)
            qc, kc, vc = q_features[:, :, window], k_features[:, :, window], v[:, :, window]
            local = (qc @ kc.mT).tril()
            numerator = local @ vc + qc @ state
            denominator = local.sum(axis=-1, keepdims=True) + qc @ normaliser
            outputs.append(numerator / denominator)
            state = state + kc.mT @ vc
            normaliser = normaliser + kc.sum(axis=2)[..., None]
        return concatenate(outputs, axis=2)


def causal_linear_attention(q_features: Tensor, k_features: Tensor, v: Tensor,
                            chunk: int = 64) -> Tensor:
    """out_i = phi(q_i) S_i / (phi(q_i) . z_i) from features (batch, heads, time, m) of the
    queries and keys and values (batch, heads, time, d_v); ``chunk`` is the block length of the
    NumPy backend and of the composite (the result does not depend on it)."""
    chunk = checks.positive_int(chunk, "chunk", "causal_linear_attention")
    if (q_features.shape != k_features.shape or q_features.ndim != 4
            or v.shape[:3] != q_features.shape[:3]):
        raise ValueError(f"causal_linear_attention: features {q_features.shape} and "
                         f"{k_features.shape} must be equal (batch, heads, time, m) and values "
                         f"{v.shape} (batch, heads, time, d_v)")
    return CausalLinearAttention.apply(q_features, k_features, v, chunk=chunk)
