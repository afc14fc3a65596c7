"""The Performer's FAVOR+ attention (Choromanski et al., 2021; the survey's section IX-E) as an
attention core for ``nn.MultiHeadAttention(core=...)``.

The softmax kernel is estimated with positive random features: for w ~ N(0, I_d),

    exp(x . y) = E_w[ exp(w . x - |x|^2 / 2) exp(w . y - |y|^2 / 2) ]

so with phi(x) = exp(W x - |x|^2 / 2) / sqrt(m) for m features W (m, d), and x = q / d^(1/4),
y = k / d^(1/4) (the 1/sqrt(d) of the scores split between them), phi(q) . phi(k) is an unbiased
estimate of exp(q . k / sqrt(d)). Attention then never forms the n x n matrix:

    bidirectional:  out = phi(Q) (phi(K)^T V) / (phi(Q) (phi(K)^T 1))
    causal:         out_i = phi(q_i) S_i / (phi(q_i) z_i),  S_i = sum_{j<=i} phi(k_j) v_j^T,
                    z_i = sum_{j<=i} phi(k_j)   (prefix sums)

in O(n m d) time. The features are orthogonal (blocks of d orthonormal directions, each row
rescaled to the length of a Gaussian vector, so every row is still N(0, I_d) and the estimate
stays unbiased with a lower variance), and they are redrawn every ``redraw_interval`` training
calls.
"""
from __future__ import annotations

import math

import numpy as np

from .. import checks
from ..autograd import Generator, Tensor, tensor
from ..autograd import random as mt_random
from ..nn.reversible import schedules_frozen
from ..nn.transformer import FullAttention
from .causal_linear import causal_linear_attention
from .grouped import self_attention_inputs

__all__ = ["PerformerAttention", "gaussian_features", "positive_random_features"]


def gaussian_features(num_features: int, dim: int, *, orthogonal: bool = True,
                      generator: Generator | None = None) -> np.ndarray:
    """m x d random features whose rows are N(0, I_d): independent (``orthogonal=False``) or
    orthogonal within blocks of d rows, with chi-distributed lengths (Choromanski et al., 2021,
    section 2.4)."""
    rng = mt_random.rng(generator)
    if not orthogonal:
        return rng.standard_normal((num_features, dim))
    blocks = []
    for _ in range(-(-num_features // dim)):
        directions, triangle = np.linalg.qr(rng.standard_normal((dim, dim)))
        # the signs of R's diagonal make Q uniformly (Haar) distributed; without them it is not
        blocks.append((directions * np.sign(np.diag(triangle))).T)
    lengths = np.linalg.norm(rng.standard_normal((num_features, dim)), axis=1)
    return np.concatenate(blocks)[:num_features] * lengths[:, None]


def positive_random_features(x: Tensor, features: Tensor,
                             stabiliser: str | None = None) -> Tensor:
    """phi(x) = exp(W x - |x|^2 / 2 - c) / sqrt(m) for rows x (..., d) and ``features`` W (m, d):
    phi(x) . phi(y) estimates exp(x . y) (times exp(-c_x - c_y)). ``stabiliser`` is the constant
    c subtracted in the exponent ("query": each row's largest W x; "key": the largest over all
    rows), which cancels in attention's ratio and keeps exp from overflowing."""
    projected = x @ features.mT
    exponent = projected - 0.5 * (x * x).sum(axis=-1, keepdims=True)
    if stabiliser == "query":
        exponent = exponent - projected.max(axis=-1, keepdims=True).detach()
    elif stabiliser == "key":
        exponent = exponent - projected.max(axis=(-2, -1), keepdims=True).detach()
    return exponent.exp() / math.sqrt(features.shape[0])


class PerformerAttention(FullAttention):
    """FAVOR+ attention (Choromanski et al., 2021): softmax attention estimated with
    ``num_features`` positive orthogonal random features per head of size ``head_dim``
    (default m = d log d, the paper's choice), bidirectional or causal (prefix sums over chunks
    of ``chunk`` positions: within a chunk the masked product, across chunks the running sums).

    The features are a buffer (saved with the model). While training they are redrawn every
    ``redraw_interval`` calls (None: never); ``redraw_features()`` draws new ones now, from
    ``generator``. Inside an ``nn.ReversibleStack`` the stack advances that schedule once per
    forward, before its blocks run (``advance_schedule``), so that the recomputation in backward
    uses the features the forward pass used and the gradients stay exact. A general ``mask`` or
    ``bias`` needs the n x n scores the method avoids, and is an error; ``need_weights`` returns
    the estimated (q_time, k_time) weights (n x n, for inspection).
    """

    def __init__(self, head_dim: int, num_features: int | None = None, *,
                 orthogonal: bool = True, redraw_interval: int | None = None, chunk: int = 64,
                 generator: Generator | None = None, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        name = "PerformerAttention"
        self.head_dim = checks.positive_int(head_dim, "head_dim", name)
        default = max(1, round(head_dim * math.log(head_dim))) if head_dim > 1 else 1
        self.num_features = checks.positive_int(default if num_features is None else
                                                num_features, "num_features", name)
        self.orthogonal = bool(orthogonal)
        self.redraw_interval = (None if redraw_interval is None else
                                checks.positive_int(redraw_interval, "redraw_interval", name))
        self.chunk = checks.positive_int(chunk, "chunk", name)
        self.generator = generator
        self.calls = 0
        self.register_buffer("features", tensor(np.zeros((self.num_features, head_dim))))
        self.redraw_features()

    def redraw_features(self) -> None:
        """Draw a new set of random features."""
        drawn = gaussian_features(self.num_features, self.head_dim, orthogonal=self.orthogonal,
                                  generator=self.generator)
        self.features = tensor(drawn, dtype=self.features.dtype, backend=self.features.backend)

    def advance_schedule(self) -> None:
        """Count one training call, redrawing the features every ``redraw_interval``-th (after
        the first). ``forward`` calls it, except inside a ``nn.ReversibleStack``, which calls it
        once before its blocks so that the recomputation in backward sees the same features."""
        if self.training and self.redraw_interval is not None:
            if self.calls and self.calls % self.redraw_interval == 0:
                self.redraw_features()
            self.calls += 1

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        name = "PerformerAttention"
        if mask is not None or bias is not None:
            raise ValueError(f"{name}: a general mask or score bias needs the n x n scores that "
                             "FAVOR+ never forms; use causal and key_mask, or FullAttention")
        q, k, v, key_mask = self_attention_inputs(q, k, v, key_mask, name)
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"{name}: the core was built for head_dim={self.head_dim}, the "
                             f"queries have {q.shape[-1]} features per head")
        if not schedules_frozen():
            self.advance_schedule()
        features = self.features.astype(q.dtype)
        scale = self.head_dim ** -0.25
        q_features = positive_random_features(q * scale, features, "query")
        k_features = positive_random_features(k * scale, features, "key")
        if key_mask is not None:
            k_features = k_features.masked_fill(~key_mask[:, None, :, None], 0.0)
        if need_weights:
            scores = q_features @ k_features.mT
            if causal:
                scores = scores.tril()
            weights = scores / scores.sum(axis=-1, keepdims=True)
            return self.dropout(weights) @ v, weights
        if causal:
            return self.causal_linear_attention(q_features, k_features, v), None
        numerator = q_features @ (k_features.mT @ v)                  # phi(Q) (phi(K)^T V)
        denominator = q_features @ k_features.sum(axis=2)[..., None]   # phi(Q) (phi(K)^T 1)
        return numerator / denominator, None

    def causal_linear_attention(self, q_features: Tensor, k_features: Tensor,
                                v: Tensor) -> Tensor:
        """out_i = phi(q_i) S_i / phi(q_i) z_i with the prefix sums S_i, z_i (one fused
        operation, ``attention.causal_linear``)."""
        return causal_linear_attention(q_features, k_features, v, self.chunk)

    def extra_repr(self):
        return (f"head_dim={self.head_dim}, num_features={self.num_features}, "
                f"orthogonal={self.orthogonal}, redraw_interval={self.redraw_interval}")
