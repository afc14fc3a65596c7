"""The Backend protocol: an array namespace plus a table of fused kernels.

Every ``Tensor`` holds one array of one backend. Autograd ``Function``s compute on raw arrays
through ``backend.xp`` (``numpy`` or ``cupy``); the few memory-bound operations that dominate a
Transformer step (softmax, log-softmax / cross-entropy, layer norm, GELU, the embedding-gradient
scatter-add) go through the kernel methods below (plus cross-entropy, attention and banded
attention, and the int8 / binary products of the quantised models), so a backend only has to
override those to become fast.
The NumPy backend implements every kernel and is the reference that the others are tested against.

A kernel works on raw arrays of its own backend and never records a graph; the ``Function`` that
calls it decides when a fused kernel may be used (no ``create_graph``) and otherwise falls back to a
composite of differentiable primitives.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Backend(Protocol):
    """What ``minitorch_nlp`` needs from an array backend."""

    name: str
    xp: Any
    # whether ``nn.Linear`` stores a widening weight column-major (the layout this backend's
    # few-row products, decoding's, read fastest)
    widening_weights_column_major: bool

    def asarray(self, obj: Any, dtype: Any = None) -> Any:
        """An array of this backend holding ``obj`` (no copy when it already is one)."""

    def to_numpy(self, array: Any) -> Any:
        """A ``numpy.ndarray`` with the contents of ``array``."""

    def erf(self, x: Any) -> Any:
        """The error function, elementwise."""

    def matmul(self, a: Any, b: Any, out: Any = None) -> Any:
        """``xp.matmul(a, b, out=out)``, threaded as suits the backend."""

    # fused kernels, each with its backward
    def softmax(self, x: Any, axis: int) -> Any: ...

    def softmax_backward(self, y: Any, grad: Any, axis: int) -> Any: ...

    def log_softmax(self, x: Any, axis: int) -> Any: ...

    def log_softmax_backward(self, y: Any, grad: Any, axis: int) -> Any: ...

    # (y, state): the state, whatever the backend keeps, goes back to ``layer_norm_backward``
    def layer_norm(self, x: Any, weight: Any, bias: Any, eps: float) -> tuple: ...

    # (dx, dweight or None, dbias) from the forward's input x and state
    def layer_norm_backward(self, grad: Any, x: Any, state: Any, weight: Any) -> tuple: ...

    def gelu(self, x: Any, approximate: str) -> Any: ...

    def gelu_backward(self, x: Any, grad: Any, approximate: str) -> Any: ...

    def bias_gelu(self, x: Any, bias: Any, approximate: str) -> Any: ...

    def bias_gelu_backward(self, x: Any, bias: Any, grad: Any, approximate: str) -> Any: ...

    def scatter_add_rows(self, index: Any, src: Any, num_rows: int) -> Any: ...

    def cross_entropy(self, logits: Any, target: Any, ignore_index: int,
                      label_smoothing: float) -> tuple: ...

    def cross_entropy_backward(self, state: Any, target: Any, grad_rows: Any, ignore_index: int,
                               label_smoothing: float) -> Any: ...

    # attention on (B, H, T, D) arrays; ``state`` is whatever the forward kernel keeps for
    # backward; ``bias`` (None or broadcastable to (B, H, Tq, Tk)) is added to the scaled scores.
    # The backward returns (dq, dk, dv, dbias), dbias in the bias's shape when ``bias_grad``
    # (the forward had a bias), else None.
    def attention(self, q: Any, k: Any, v: Any, scale: float, causal: bool, key_mask: Any,
                  bias: Any = None) -> tuple: ...

    # ``attention``'s output alone, no state: for a forward nothing will differentiate
    def attention_inference(self, q: Any, k: Any, v: Any, scale: float, causal: bool,
                            key_mask: Any, bias: Any = None) -> Any: ...

    def attention_backward(self, grad: Any, q: Any, k: Any, v: Any, state: Any, scale: float,
                           causal: bool, key_mask: Any, bias_grad: bool = False) -> tuple: ...

    def band_offsets(self, window: int, dilation: int, causal: bool) -> Any: ...

    def banded_attention(self, q: Any, k: Any, v: Any, scale: float, window: int, dilation: int,
                         causal: bool, key_mask: Any) -> tuple: ...

    def banded_attention_backward(self, grad: Any, q: Any, k: Any, v: Any, state: Any,
                                  scale: float, window: int, dilation: int, causal: bool,
                                  key_mask: Any) -> tuple: ...

    # the sparse patterns' groups of queries and keys (``attention.grouped.GroupedAttention``)
    def grouped_attention(self, q: Any, k: Any, v: Any, query_index: Any, key_index: Any,
                          allowed: Any, key_mask: Any, bias: Any, scale: float) -> tuple: ...

    def grouped_attention_backward(self, grad: Any, q: Any, k: Any, v: Any, state: Any,
                                   query_index: Any, key_index: Any, scale: float) -> tuple: ...

    def lsh_round_masks(self, buckets: Any, chunk: Any, queries: Any, key_index: Any,
                        has_previous: Any, r: int, causal: bool, self_penalty: float) -> tuple: ...

    def causal_linear_attention(self, qf: Any, kf: Any, v: Any, chunk: int) -> tuple: ...

    def causal_linear_attention_backward(self, grad: Any, qf: Any, kf: Any, v: Any, state: Any,
                                         chunk: int) -> tuple: ...

    # low-precision products (no gradient)
    def matmul_int8(self, a: Any, b: Any) -> Any: ...

    def pack_signs(self, x: Any) -> Any: ...

    def binary_matmul(self, a_bits: Any, b_bits: Any, k: int) -> Any: ...
