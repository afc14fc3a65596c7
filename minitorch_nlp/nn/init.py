"""Weight initialisation, in place, as in ``torch.nn.init``.

Every function fills ``tensor.data`` without recording a graph, bumps the tensor's version
counter and returns the tensor. Random values are drawn on the CPU from ``generator`` (default:
the global generator that ``manual_seed`` seeds) and then moved to the tensor's backend, so a seed
gives the same weights on every backend.

Fans follow PyTorch's layout: a weight of shape ``(out_features, in_features, *kernel)`` has
``fan_in = in_features * prod(kernel)`` and ``fan_out = out_features * prod(kernel)``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..autograd.random import rng

if TYPE_CHECKING:
    from ..autograd import Generator, Tensor

__all__ = [
    "calculate_gain", "constant_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_",
    "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_",
]


def _fill(tensor, values):
    """Write ``values`` (a NumPy array or a scalar) into ``tensor`` in place."""
    data = tensor.data
    if np.isscalar(values):
        data.fill(values)
    else:
        data[...] = tensor.backend.asarray(np.asarray(values, dtype=tensor.dtype))
    tensor._bump_version()
    return tensor


def _check_spread(value, name, op):
    if not value >= 0:
        raise ValueError(f"{op}: {name} must be >= 0, got {value}")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0,
             generator: Generator | None = None) -> Tensor:
    """Fill with U(a, b)."""
    if not a <= b:
        raise ValueError(f"uniform_: need a <= b, got a={a}, b={b}")
    return _fill(tensor, rng(generator).uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0,
            generator: Generator | None = None) -> Tensor:
    """Fill with N(mean, std^2)."""
    _check_spread(std, "std", "normal_")
    return _fill(tensor, rng(generator).normal(mean, std, tensor.shape))


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, val)


def zeros_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 1)


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The factor that keeps activations' variance steady through ``nonlinearity``: 1 for linear
    maps and sigmoid, 5/3 for tanh, sqrt(2) for ReLU, sqrt(2 / (1 + slope^2)) for leaky ReLU
    (``param`` is the negative slope, 0.01 by default), 3/4 for SELU."""
    linear = ("linear", "identity", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
              "conv_transpose2d", "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: negative slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor with at least 2 dimensions, got shape "
                         f"{tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor: Tensor, gain: float = 1.0,
                    generator: Generator | None = None) -> Tensor:
    """U(-a, a) with a = gain sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator=generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain sqrt(2 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator=generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu",
                     generator: Generator | None = None) -> Tensor:
    """U(-bound, bound) with bound = gain sqrt(3 / fan) (He et al., 2015); ``a`` is the negative
    slope of the leaky ReLU. ``nn.Linear`` uses ``a = sqrt(5)``, PyTorch's default, which gives
    bound = 1 / sqrt(fan_in)."""
    fan = _fan(tensor, mode)
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return uniform_(tensor, -bound, bound, generator=generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan) (He et al., 2015)."""
    fan = _fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return normal_(tensor, 0.0, std, generator=generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: Generator | None = None) -> Tensor:
    """N(mean, std^2) conditioned on [a, b] (absolute bounds, as in PyTorch), drawn exactly by
    inverting the normal CDF: u ~ U(Phi(alpha), Phi(beta)), x = mean + std Phi^-1(u) with alpha,
    beta the bounds in standard units. Intervals in the upper tail are mirrored into the lower
    one, where the CDF keeps its relative precision, so even [mean + 8 std, inf) works."""
    _check_spread(std, "std", "trunc_normal_")
    if not a < b:
        raise ValueError(f"trunc_normal_: need a < b, got a={a}, b={b}")
    if std == 0:
        if not a <= mean <= b:
            raise ValueError(f"trunc_normal_: std is 0 and the mean {mean} is outside [{a}, {b}]")
        return constant_(tensor, mean)
    alpha, beta = (a - mean) / std, (b - mean) / std
    flip = alpha > 0
    if flip:
        alpha, beta = -beta, -alpha
    low, high = _normal_cdf(alpha), _normal_cdf(beta)
    u = rng(generator).uniform(low, high, tensor.shape)
    np.maximum(u, np.finfo(np.float64).tiny, out=u)  # u = 0 exactly would map to -inf
    z = _normal_inverse_cdf(u)
    if flip:
        z = -z
    return _fill(tensor, np.clip(mean + std * z, a, b))


def _normal_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


# Wichura's algorithm AS241 (1988), accurate to about 1e-16: three rational approximations, for
# the centre |u - 1/2| <= 0.425 and for two ranges of the tails (coefficients highest power first,
# as numpy.polyval takes them; the same as CPython's statistics.NormalDist.inv_cdf).
_AS241_CENTRE = (
    [2.5090809287301226727e3, 3.3430575583588128105e4, 6.7265770927008700853e4,
     4.5921953931549871457e4, 1.3731693765509461125e4, 1.9715909503065514427e3,
     1.3314166789178437745e2, 3.3871328727963666080e0],
    [5.2264952788528545610e3, 2.8729085735721942674e4, 3.9307895800092710610e4,
     2.1213794301586595867e4, 5.3941960214247511077e3, 6.8718700749205790830e2,
     4.2313330701600911252e1, 1.0])
_AS241_NEAR_TAIL = (
    [7.74545014278341407640e-4, 2.27238449892691845833e-2, 2.41780725177450611770e-1,
     1.27045825245236838258e0, 3.64784832476320460504e0, 5.76949722146069140550e0,
     4.63033784615654529590e0, 1.42343711074968357734e0],
    [1.05075007164441684324e-9, 5.47593808499534494600e-4, 1.51986665636164571966e-2,
     1.48103976427480074590e-1, 6.89767334985100004550e-1, 1.67638483018380384940e0,
     2.05319162663775882187e0, 1.0])
_AS241_FAR_TAIL = (
    [2.01033439929228813265e-7, 2.71155556874348757815e-5, 1.24266094738807843860e-3,
     2.65321895265761230930e-2, 2.96560571828504891230e-1, 1.78482653991729133580e0,
     5.46378491116411436990e0, 6.65790464350110377720e0],
    [2.04426310338993978564e-15, 1.42151175831644588870e-7, 1.84631831751005468180e-5,
     7.86869131145613259100e-4, 1.48753612908506148525e-2, 1.36929880922735805310e-1,
     5.99832206555887937690e-1, 1.0])


def _normal_inverse_cdf(u):
    """Phi^-1(u) for an array of u in (0, 1)."""
    u = np.asarray(u, dtype=np.float64)
    q = u - 0.5
    z = np.empty_like(u)
    centre = np.abs(q) <= 0.425
    r = 0.180625 - q[centre] ** 2
    z[centre] = q[centre] * np.polyval(_AS241_CENTRE[0], r) / np.polyval(_AS241_CENTRE[1], r)
    tail = ~centre
    r = np.sqrt(-np.log(np.where(q[tail] < 0, u[tail], 1.0 - u[tail])))
    near = r <= 5.0
    t = np.where(near, r - 1.6, r - 5.0)
    magnitude = np.where(
        near,
        np.polyval(_AS241_NEAR_TAIL[0], t) / np.polyval(_AS241_NEAR_TAIL[1], t),
        np.polyval(_AS241_FAR_TAIL[0], t) / np.polyval(_AS241_FAR_TAIL[1], t))
    z[tail] = np.where(q[tail] < 0, -magnitude, magnitude)
    return z
