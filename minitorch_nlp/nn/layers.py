"""Layers: ``Linear``, ``Embedding``, ``LayerNorm``, ``Dropout``, ``Identity`` and activation
modules. Each holds its parameters and calls the function of the same name in
``minitorch_nlp.functional``; weights use PyTorch's layouts and default initialisations, so
PyTorch and HuggingFace checkpoints load without transposes."""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from ..autograd import Generator, Tensor, empty
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["GELU", "Dropout", "Embedding", "Identity", "LayerNorm", "Linear", "ReLU", "Sigmoid",
           "Softmax", "Tanh", "column_major_"]


def _in_dtype_of(x, parameter):
    """``x`` cast to ``parameter``'s dtype: a layer computes in the dtype of its parameters, so a
    float32 model fed float64 (or integer) input computes and answers in float32. The cast is
    differentiable; the input's gradient comes back in the input's own dtype."""
    x = x if isinstance(x, Tensor) else Tensor(x, backend=parameter.backend)
    return x if x.dtype == parameter.dtype else x.astype(parameter.dtype)


def column_major_(weight):
    """Store ``weight`` (an ``(out, in)`` parameter that the layer multiplies as ``x @ W^T``)
    column-major, in place: the same values and shape, held as the transpose of a contiguous
    ``(in, out)`` array. Returns ``weight``.

    The library chooses a weight's memory layout with this function only. With it ``x @ W^T``
    reads a contiguous ``(in, out)`` matrix, HuggingFace's Conv1D layout. OpenBLAS's one-row
    product (a decoding step) reads that faster than the row-major ``(out, in)`` one when the
    product widens (out >= in): GPT-2's LM head 768 -> 50257 took 0.60x of the row-major time
    at one thread, 768 -> 3072 0.6x, 768 -> 768 0.8-0.9x; a narrowing product is slower
    (3072 -> 768 1.2x), so ``Linear`` stores its weight column-major only when
    ``out_features >= in_features``, and only on a backend whose
    ``widening_weights_column_major`` asks for it (the numba backend's few-row kernel reads the
    row-major layout at memory speed, so there every weight stays row-major). A model whose output
    layer is a tied embedding table (GPT's ``wte``) stores that table so, since the head reads the
    whole table at every step while a lookup reads one row per token. Training products stay plain
    GEMMs in either layout.
    Everything that writes parameters works in place (``data[...] = ``) or in the parameter's
    layout: loading, optimizers (gradients and moments are made in the parameter's layout),
    clipping, quantisation. Code that gives a ``Linear`` a new weight (pruning's sliced layers,
    tensor-parallel shards) calls ``Linear.choose_weight_layout_`` afterwards.
    """
    weight.data = weight.backend.xp.asfortranarray(weight.data)
    weight._bump_version()
    return weight


def _positive_int(value, name, layer):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{layer}: {name} must be a positive int, got {value!r}")
    return value


class Linear(Module):
    """y = x W^T + b, ``W`` of shape ``(out_features, in_features)``, ``b`` ``(out_features,)``.
    ``W`` is stored column-major when ``out_features >= in_features`` (see ``column_major_``);
    its shape and values are PyTorch's.

    Initialised as PyTorch does: W ~ U(-1/sqrt(in_features), 1/sqrt(in_features)) (Kaiming-uniform
    with a = sqrt(5)) and the same range for b. ``generator`` gives a private random stream.
    """

    def __init__(self, in_features, out_features, bias=True, dtype=None, generator=None):
        super().__init__()
        self.in_features = _positive_int(in_features, "in_features", "Linear")
        self.out_features = _positive_int(out_features, "out_features", "Linear")
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        self.choose_weight_layout_()
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(generator)

    def choose_weight_layout_(self):
        """Store the weight column-major when the product widens (``out_features >=
        in_features``, where decoding reads it faster so; see ``column_major_``) on a backend
        that wants it so (``widening_weights_column_major``: the numba backend's few-row kernel
        reads the row-major layout faster), row-major otherwise; in place, values unchanged.
        Returns the layer."""
        out_features, in_features = self.weight.shape
        backend = self.weight.backend
        xp = backend.xp
        if out_features >= in_features and backend.widening_weights_column_major:
            column_major_(self.weight)
        elif not self.weight.data.flags.c_contiguous:
            self.weight.data = xp.ascontiguousarray(self.weight.data)
            self.weight._bump_version()
        return self

    def reset_parameters(self, generator=None):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=generator)
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound, generator=generator)

    def forward(self, x):
        return F.linear(_in_dtype_of(x, self.weight), self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table: ``ids`` of any shape -> vectors of shape ``ids.shape + (embedding_dim,)``.

    The weight ``(num_embeddings, embedding_dim)`` starts N(0, 1), as in PyTorch. With
    ``padding_idx`` that row starts at zero and never receives a gradient, so padding tokens embed
    to zeros for the whole of training. Ids outside [0, num_embeddings) raise ``ValueError``.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 dtype=None, generator: Generator | None = None) -> None:
        super().__init__()
        self.num_embeddings = _positive_int(num_embeddings, "num_embeddings", "Embedding")
        self.embedding_dim = _positive_int(embedding_dim, "embedding_dim", "Embedding")
        if padding_idx is not None:
            padding_idx = F._padding_row(padding_idx, num_embeddings, "Embedding")
        self.padding_idx = padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype))
        self.reset_parameters(generator)

    @classmethod
    def from_pretrained(cls, embeddings: Tensor | np.ndarray, freeze: bool = True,
                        padding_idx: int | None = None) -> Embedding:
        """An ``Embedding`` holding (a copy of) ``embeddings`` (a 2-D Tensor or array); frozen
        unless ``freeze=False``."""
        data = embeddings if isinstance(embeddings, Tensor) else Tensor(embeddings)
        if data.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: embeddings must be 2-D, got shape "
                             f"{data.shape}")
        layer = cls(*data.shape, padding_idx=padding_idx, dtype=data.dtype)
        layer.load_state_dict({"weight": data})
        layer.weight.requires_grad = not freeze
        return layer

    def reset_parameters(self, generator: Generator | None = None) -> None:
        init.normal_(self.weight, generator=generator)
        if self.padding_idx is not None:
            self.weight.data[self.padding_idx] = 0
            self.weight._bump_version()

    def forward(self, ids: Tensor | np.ndarray) -> Tensor:
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self):
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        return text if self.padding_idx is None else f"{text}, padding_idx={self.padding_idx}"


class LayerNorm(Module):
    """Layer normalisation over the trailing ``normalized_shape`` axes (Ba et al., 2016), with a
    learned gain (ones) and bias (zeros) when ``elementwise_affine``."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, dtype=None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else \
            tuple(normalized_shape)
        if not shape or any(isinstance(n, bool) or not isinstance(n, int) or n <= 0
                            for n in shape):
            raise ValueError(f"LayerNorm: normalized_shape must be a positive int or a tuple of "
                             f"them, got {normalized_shape!r}")
        self.normalized_shape = shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(init.ones_(empty(*shape, dtype=dtype)))
            if bias:
                self.bias = Parameter(init.zeros_(empty(*shape, dtype=dtype)))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        if self.weight is not None:
            x = _in_dtype_of(x, self.weight)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class Dropout(Module):
    """Inverted dropout with probability ``p`` while training; the identity in ``eval()`` mode."""

    def __init__(self, p: float = 0.5, generator: Generator | None = None) -> None:
        super().__init__()
        F._check_probability(p, "Dropout")
        self.p = p
        self.generator = generator

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.generator)

    def extra_repr(self):
        return f"p={self.p}"


class Identity(Module):
    """Returns its input (a placeholder where a layer is optional)."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Softmax(Module):
    def __init__(self, axis: int = -1, dim: int | None = None) -> None:
        super().__init__()
        self.axis = dim if dim is not None else axis

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.axis)

    def extra_repr(self):
        return f"axis={self.axis}"
