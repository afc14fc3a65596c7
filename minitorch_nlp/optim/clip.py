"""Gradient clipping, in place: by global norm (``clip_grad_norm_``) and by value
(``clip_grad_value_``)."""
from __future__ import annotations

import math
from numbers import Real

import numpy as np

from ..autograd import Tensor


def _grads(parameters) -> list:
    """The gradient Tensors of ``parameters`` (one Tensor or an iterable), skipping ``None``."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _vector_norm(array, xp, norm_type: float) -> float:
    flat = array.reshape(-1)
    if flat.size == 0:
        return 0.0
    return float(xp.linalg.norm(flat, ord=norm_type))


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> float:
    r"""Scale all gradients together so that their joint norm is at most ``max_norm``.

    The total norm treats every gradient as one long vector::

        total = (sum_i ||g_i||_p ** p) ** (1/p)        (max_i ||g_i||_inf for p = inf)
        g_i  <- g_i * min(1, max_norm / (total + 1e-6))

    This is gradient norm clipping of Pascanu, Mikolov & Bengio (2013), "On the difficulty of
    training recurrent neural networks", Algorithm 1, with PyTorch's conventions (the 1e-6 guard,
    grads left unchanged when already within bounds). Returns the total norm before clipping,
    as a float.

    A non-finite total (an inf or nan in some gradient) raises ``RuntimeError`` when
    ``error_if_nonfinite`` is true; otherwise the gradients are multiplied by the resulting
    factor (0 for an infinite norm, nan for a nan one), as PyTorch does, so a training loop
    should check the returned norm and skip the step.
    """
    if not isinstance(max_norm, Real) or not max_norm >= 0:
        raise ValueError(f"clip_grad_norm_: invalid max_norm={max_norm!r}; it must be >= 0")
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm_: invalid norm_type={norm_type!r}; it must be > 0 "
                         "(or inf)")
    grads = _grads(parameters)
    if not grads:
        return 0.0
    norms = [_vector_norm(g.data, g.backend.xp, norm_type) for g in grads]
    with np.errstate(over="ignore"):
        total = float(np.linalg.norm(np.asarray(norms, dtype=np.float64), ord=norm_type))
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                           f"gradients is {total}, so they cannot be clipped; pass "
                           "error_if_nonfinite=False to scale them anyway")
    coef = max_norm / (total + 1e-6)
    if coef < 1.0 or math.isnan(coef):
        with np.errstate(invalid="ignore"):
            for g in grads:
                g.data *= coef
                g._bump_version()
    return total


def clip_grad_value_(parameters, clip_value: float) -> None:
    """Clamp every gradient element to ``[-clip_value, clip_value]``, in place."""
    if not isinstance(clip_value, Real) or not clip_value >= 0:
        raise ValueError(f"clip_grad_value_: invalid clip_value={clip_value!r}; it must be >= 0")
    for g in _grads(parameters):
        g.backend.xp.clip(g.data, -clip_value, clip_value, out=g.data)
        g._bump_version()
