"""Quantisation of Transformer weights and activations (the survey's section VI-C): Q8BERT's
symmetric linear quantisation (Zafrir et al., 2019, eq 61), trained with fake quantisation and
run with true int8 products.

* ``symmetric_quantize`` is eq 61, Quantize(x | S, M) = Clamp(round(x S), -M, M) with
  M = 2^(b-1) - 1; ``fake_quantize`` is its training-time form, the dequantised value
  Quantize(x) / S with the straight-through estimator dx^q/dx = 1 (Bengio et al., 2013);
* ``weight_scales`` gives S = M / max|W|, for the whole matrix (Q8BERT) or for groups of
  consecutive output neurons, each with its own range (Q-BERT's group-wise quantisation);
* ``QuantizedLinear`` is a ``Linear`` trained with fake-quantised weights and inputs, the input
  range tracked as an exponential moving average of max|x| while training (Q8BERT's EMA);
  ``prepare_qat(model)`` swaps every ``Linear`` of a model for one (same parameters), and
  ``calibrate`` sets the input ranges from data without training (post-training quantisation);
* ``Int8Linear`` is the inference path: int8 weights and int8 activations multiplied by the
  backend's int8 GEMM kernel (NumPy, Numba or CuPy) with int32 accumulation, then one rescale
  by 1 / (S_x S_w) and the float bias. ``convert_to_int8(model)`` turns a trained
  ``prepare_qat`` model into one; ``int8_skeleton(model)`` makes the empty structure that a saved
  int8 ``state_dict`` (int8 weights: 4x smaller than float32) loads into.

The survey prints eq 61 with a floor; Q8BERT (and Jacob et al., 2018, whom it follows) round to
the nearest integer, as here (half to even, NumPy's rule).
"""
from __future__ import annotations

import numpy as np

from .. import cookbook
from .. import functional as F
from ..autograd import Tensor, is_grad_enabled, tensor
from ..autograd import round as round_half_even
from ..nn import Linear, Module

__all__ = ["Int8Linear", "QuantizedLinear", "calibrate", "convert_to_int8", "fake_quantize",
           "int8_skeleton", "max_level", "prepare_qat", "symmetric_quantize", "weight_scales"]

INT8_MAX = 127


def check_bits(bits, op, low=2, high=16):
    """``bits`` as an int in [low, high], else a ValueError naming ``op``."""
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) \
            or not low <= bits <= high:
        raise ValueError(f"{op}: bits must be an integer in [{low}, {high}], got {bits!r}")
    return int(bits)


def max_level(bits):
    """M = 2^(b-1) - 1, the largest quantised value of b-bit symmetric quantisation (b >= 2)."""
    return 2 ** (check_bits(bits, "max_level") - 1) - 1


def _as_scale(scale, like, op):
    if isinstance(scale, Tensor):
        values = scale.numpy()
    else:
        values = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"{op}: the scale S must be finite and > 0, got {values}")
    return tensor(values, dtype=like.dtype, backend=like.backend)


@cookbook.equation(61)
def symmetric_quantize(x, scale, *, bits=8):
    r"""Q8BERT's symmetric linear quantisation (eq 61)::

        Quantize(x | S, M) = Clamp(round(x S), -M, M),   M = 2^(b-1) - 1

    ``x`` a float Tensor, ``scale`` S > 0 (a number, or an array broadcastable to ``x``: one
    scale per group). Returns the integers as a Tensor of ``x``'s dtype; rounding has no
    gradient (use ``fake_quantize`` to train through it)."""
    m = max_level(check_bits(bits, "symmetric_quantize"))
    return round_half_even(x * _as_scale(scale, x, "symmetric_quantize")).clip(-m, m)


def fake_quantize(x, scale, *, bits=8):
    """Fake quantisation (Jacob et al., 2018; Q8BERT section 3): the value x^q = Quantize(x) / S
    that the integer model computes with, while the gradient passes straight through,
    dx^q/dx = 1 (the straight-through estimator): x + stop_gradient(x^q - x)."""
    scale_t = _as_scale(scale, x, "fake_quantize")
    dequantised = symmetric_quantize(x, scale_t, bits=bits) / scale_t
    return x + (dequantised - x).detach()


def weight_scales(weight, bits=8, groups=1):
    """S = M / max|W| per output neuron (row of a ``Linear`` weight (out, in)): one range for the
    whole matrix (``groups=1``, Q8BERT) or one per group of out / groups consecutive rows
    (Q-BERT's group-wise quantisation). An all-zero group gets S = M. Returns (out,) float64."""
    m = max_level(check_bits(bits, "weight_scales"))
    array = weight.numpy() if isinstance(weight, Tensor) else np.asarray(weight)
    rows = array.shape[0]
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1 \
            or rows % groups:
        raise ValueError(f"weight_scales: groups must be a positive divisor of the {rows} "
                         f"output neurons, got {groups!r}")
    peaks = np.abs(array.reshape(groups, -1)).max(axis=1).astype(np.float64)
    scales = m / np.where(peaks > 0, peaks, 1.0)
    return np.repeat(scales, rows // groups)


class QuantizedLinear(Linear):
    """A ``Linear`` trained for b-bit inference (Q8BERT): y = x^q (W^q)^T + b with fake-quantised
    weights (S_W = M / max|W|, per group of output rows with ``groups``) and inputs
    (S_x = M / r, r the exponential moving average of max|x| over training batches, decay
    ``decay``; Q8BERT uses 0.9999). The bias stays in float. The gradient reaches W and x through
    the straight-through estimator. In eval mode the tracked range is used as it is; a layer that
    has not seen a training batch refuses to run."""

    def __init__(self, in_features, out_features, bias=True, *, bits=8, groups=1, decay=0.9999,
                 dtype=None):
        super().__init__(in_features, out_features, bias=bias, dtype=dtype)
        self.bits = check_bits(bits, "QuantizedLinear")
        weight_scales(np.ones((out_features, 1)), bits, groups)      # checks groups
        self.groups = groups
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"QuantizedLinear: decay must be in [0, 1), got {decay!r}")
        self.decay = float(decay)
        self.register_buffer("input_range", tensor(0.0, dtype=self.weight.dtype,
                                                    backend=self.weight.backend))

    @classmethod
    def from_linear(cls, linear, **options):
        """A ``QuantizedLinear`` that holds ``linear``'s own weight and bias Parameters."""
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  dtype=linear.weight.dtype, **options)
        new.weight, new.bias = linear.weight, linear.bias
        new.input_range = new.input_range.to(linear.weight.backend.name)
        return new.train(linear.training)

    def observe(self, x):
        """Update the input range r with max|x| of this batch (the first batch sets it)."""
        peak = float(x.detach().abs().max().item())
        old = float(self.input_range.item())
        new = peak if old == 0.0 else self.decay * old + (1.0 - self.decay) * peak
        self.input_range = tensor(new, dtype=self.weight.dtype, backend=self.weight.backend)

    def input_scale(self):
        r = float(self.input_range.item())
        if r == 0.0:
            raise ValueError(f"{type(self).__name__}: no input range observed yet; run the model "
                             "in training mode on some batches first (quantisation-aware "
                             "fine-tuning, or calibration under mt.no_grad())")
        return max_level(self.bits) / r

    def forward(self, x):
        x = x if x.dtype == self.weight.dtype else x.astype(self.weight.dtype)
        if self.training:
            self.observe(x)
        scales = weight_scales(self.weight, self.bits, self.groups)[:, None]
        weight = fake_quantize(self.weight, scales, bits=self.bits)
        return F.linear(fake_quantize(x, self.input_scale(), bits=self.bits), weight, self.bias)

    def extra_repr(self):
        return f"{super().extra_repr()}, bits={self.bits}, groups={self.groups}"


class Int8Linear(Module):
    """The int8 inference path of a ``Linear`` (Q8BERT section 3; Jacob et al., 2018):

        x_int = Clamp(round(x S_x), -127, 127)          int8 (rows, in)
        acc   = x_int @ W_int^T                         int8 x int8 -> int32, the backend kernel
        y     = acc / (S_x S_W) + b                     one rescale per output neuron

    Buffers (all saved): ``qweight`` int8 (in, out) (W_int^T, laid out for the kernel),
    ``weight_scale`` (out,), ``input_scale`` (), ``bias`` (out,) float. No parameters: it is for
    inference, and refuses an input that requires a gradient while gradients are being
    recorded (run it under ``mt.no_grad()``; fine-tune the ``QuantizedLinear`` instead)."""

    def __init__(self, in_features, out_features, bias=True, dtype=None, backend=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("qweight", tensor(np.zeros((in_features, out_features), np.int8),
                                               backend=backend))
        self.register_buffer("weight_scale", tensor(np.ones(out_features), dtype=dtype,
                                                    backend=backend))
        self.register_buffer("input_scale", tensor(1.0, dtype=dtype, backend=backend))
        self.register_buffer("bias", None if not bias else tensor(
            np.zeros(out_features), dtype=dtype, backend=backend))

    @classmethod
    def from_quantized(cls, layer):
        """The int8 layer of a trained 8-bit ``QuantizedLinear``."""
        if layer.bits != 8:
            raise ValueError(f"Int8Linear: only 8-bit layers run on the int8 kernel, this one "
                             f"has bits={layer.bits}")
        weight = layer.weight
        new = cls(layer.in_features, layer.out_features, bias=layer.bias is not None,
                  dtype=weight.dtype, backend=weight.backend.name)
        scales = weight_scales(weight, 8, layer.groups)
        q = np.clip(np.rint(weight.numpy() * scales[:, None]), -INT8_MAX, INT8_MAX)
        like = dict(backend=weight.backend.name)
        new.qweight = tensor(np.ascontiguousarray(q.T.astype(np.int8)), **like)
        new.weight_scale = tensor(scales, dtype=weight.dtype, **like)
        new.input_scale = tensor(layer.input_scale(), dtype=weight.dtype, **like)
        if layer.bias is not None:
            new.bias = layer.bias.detach().clone()
        return new

    def forward(self, x):
        if x.requires_grad and is_grad_enabled():
            raise RuntimeError("Int8Linear: the int8 path has no gradient; run the model under "
                               "mt.no_grad() (train the QuantizedLinear model instead)")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Int8Linear: input of shape {x.shape} must end with in_features="
                             f"{self.in_features}")
        backend, xp = self.qweight.backend, self.qweight.backend.xp
        dtype = self.weight_scale.dtype
        rows = x.data.reshape(-1, self.in_features).astype(dtype, copy=False)
        s_x = self.input_scale.data
        x_int = xp.clip(xp.rint(rows * s_x), -INT8_MAX, INT8_MAX).astype(np.int8)
        acc = backend.matmul_int8(x_int, self.qweight.data)
        out = acc.astype(dtype) * (1.0 / (s_x * self.weight_scale.data)).astype(dtype)
        if self.bias is not None:
            out = out + self.bias.data
        return tensor(out.reshape(*x.shape[:-1], self.out_features), dtype=dtype,
                      backend=backend)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}"


def _replace_modules(model, select, make):
    """Replace every sub-module for which ``select(module)`` holds by ``make(module)``."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if child is not None and select(child):
                setattr(parent, name, make(child))
    return model


def prepare_qat(model, *, bits=8, groups=1, decay=0.9999):
    """Replace every ``Linear`` of ``model`` by a ``QuantizedLinear`` holding the same
    parameters (embeddings and LayerNorms stay float), for quantisation-aware fine-tuning.
    Returns ``model``."""
    check_bits(bits, "prepare_qat")
    return _replace_modules(model, lambda m: type(m) is Linear,
                            lambda m: QuantizedLinear.from_linear(m, bits=bits, groups=groups,
                                                                  decay=decay))


def calibrate(model, inputs):
    """Post-training calibration: run ``model`` (in eval mode, so no dropout) on each of
    ``inputs`` while forward pre-hooks make every ``QuantizedLinear`` observe its input range
    (the EMA of max|x|), as quantisation-aware training would. Returns ``model``."""
    layers = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    handles = [layer.register_forward_pre_hook(lambda module, args: module.observe(args[0]))
               for layer in layers]
    model.eval()
    try:
        for x in inputs:
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return model


def convert_to_int8(model):
    """Replace every 8-bit ``QuantizedLinear`` of a trained ``prepare_qat`` model by its
    ``Int8Linear``. Returns ``model``."""
    return _replace_modules(model, lambda m: isinstance(m, QuantizedLinear),
                            Int8Linear.from_quantized)


def int8_skeleton(model):
    """Replace every ``Linear`` (or ``QuantizedLinear``) of ``model`` by an empty ``Int8Linear``
    of the same shape, ready for ``load_state_dict`` of a saved int8 model. Returns ``model``."""
    def empty_like(layer):
        return Int8Linear(layer.in_features, layer.out_features, bias=layer.bias is not None,
                          dtype=layer.weight.dtype, backend=layer.weight.backend.name)

    return _replace_modules(model, lambda m: isinstance(m, Linear), empty_like)
