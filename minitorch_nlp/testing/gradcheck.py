"""Finite-difference checks of gradients: ``gradcheck`` and ``gradcheck`` of the gradient,
``gradgradcheck``, for users who write their own ``Function``.

Both work like ``torch.autograd.gradcheck``: every floating input with ``requires_grad=True`` is
copied to float64, the full Jacobian is computed twice, once by the engine (one backward pass per
output element) and once by central differences ``(f(x + eps) - f(x - eps)) / (2 eps)``, and the
two must agree entry by entry within ``atol + rtol * |numerical|``::

    from minitorch_nlp.testing import gradcheck
    x = mt.randn(3, 4, dtype=mt.float64, requires_grad=True)
    assert gradcheck(lambda x: MySoftplus.apply(x), (x,))

On a mismatch the error names the worst entry: which output and element, which input and element,
the analytical and the numerical value.
"""
from __future__ import annotations

import numpy as np

from ..autograd import Generator, Tensor, dtypes, grad, randn, zeros_like
from ..autograd.function import writable

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(AssertionError):
    """The engine's gradient and the finite-difference gradient disagree."""


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _float64_copies(inputs):
    """The inputs with floating tensors copied to float64 (so perturbing them never touches the
    caller's data); returns the copies and the positions of those that are checked."""
    prepared, checked = [], []
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and dtypes.is_floating(x.dtype):
            copy = x.detach().astype(dtypes.float64).clone()
            if x.requires_grad:
                copy.requires_grad_()
                checked.append(i)
            prepared.append(copy)
        else:
            if isinstance(x, Tensor) and x.requires_grad:
                raise TypeError(f"gradcheck: input {i} requires a gradient but has dtype {x.dtype}")
            prepared.append(x)
    if not checked:
        raise ValueError("gradcheck: no input is a floating tensor with requires_grad=True")
    return prepared, checked


def _outputs(fn, args):
    outs = _as_tuple(fn(*args))
    for k, out in enumerate(outs):
        if not isinstance(out, Tensor):
            raise TypeError(f"gradcheck: output {k} of the function is a "
                            f"{type(out).__name__}, not a Tensor")
    return [out for out in outs if dtypes.is_floating(out.dtype)]


def _analytical(outs, xs):
    """Jacobians J[k][i] of shape (outs[k].size, xs[i].size), one backward pass per row."""
    jacobians = []
    for k, out in enumerate(outs):
        rows = [np.zeros((out.size, x.size)) for x in xs]
        if out.requires_grad:
            xp = out.backend.xp
            for j in range(out.size):
                onehot = xp.zeros(out.size, dtype=out.dtype)
                onehot[j] = 1
                grads = grad(out, xs, grad_outputs=Tensor._wrap(onehot.reshape(out.shape),
                                                                out.backend),
                              retain_graph=True, allow_unused=True)
                for i, (g, x) in enumerate(zip(grads, xs)):
                    if g is None:
                        continue
                    if g.shape != x.shape:
                        raise GradcheckError(
                            f"gradcheck: the gradient of output {k} with respect to input "
                            f"{i} has shape {g.shape}, but the input has shape {x.shape}")
                    rows[i][j] = g.numpy().reshape(-1)
        jacobians.append(rows)
    return jacobians


def _numerical(fn, args, positions, eps):
    """The same Jacobians by central differences, one input element at a time."""
    outs = _outputs(fn, args)
    jacobians = [[np.zeros((out.size, args[p].size)) for p in positions] for out in outs]
    for i, p in enumerate(positions):
        x = args[p]
        for flat in range(x.size):
            at = np.unravel_index(flat, x.shape)
            original = float(x.data[at])
            with writable(x) as data:  # a graph built from x (the analytical pass) holds it
                data[at] = original + eps
            plus = [o.numpy().astype(np.float64).reshape(-1) for o in _outputs(fn, args)]
            with writable(x) as data:
                data[at] = original - eps
            minus = [o.numpy().astype(np.float64).reshape(-1) for o in _outputs(fn, args)]
            with writable(x) as data:
                data[at] = original
            for k, (hi, lo) in enumerate(zip(plus, minus)):
                jacobians[k][i][:, flat] = (hi - lo) / (2 * eps)
    return jacobians


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True):
    """Check the engine's gradients of ``fn(*inputs)`` against central finite differences.

    ``fn`` returns a tensor or a tuple of tensors; ``inputs`` is a tensor or a tuple of arguments,
    of which the floating tensors with ``requires_grad=True`` are checked (other arguments pass
    through unchanged). Everything runs in float64 on copies of the inputs. Returns True; on a
    mismatch raises ``GradcheckError`` describing the worst Jacobian entry, or returns False when
    ``raise_exception`` is False.
    """
    args, positions = _float64_copies(_as_tuple(inputs))
    xs = [args[p] for p in positions]
    outs = _outputs(fn, args)
    analytical = _analytical(outs, xs)
    numerical = _numerical(fn, args, positions, eps)
    worst = None
    failures = total = 0
    for k, _out in enumerate(outs):
        for i, p in enumerate(positions):
            a, n = analytical[k][i], numerical[k][i]
            excess = np.abs(a - n) / (atol + rtol * np.abs(n))
            total += excess.size
            failures += int((excess > 1).sum())
            if excess.size and (worst is None or excess.max() > worst[0]):
                row, col = np.unravel_index(int(np.argmax(excess)), excess.shape)
                worst = (float(excess.max()), k, p, row, col, a[row, col], n[row, col])
    if failures == 0:
        return True
    _, k, p, row, col, a, n = worst
    out_index = tuple(int(v) for v in np.unravel_index(row, outs[k].shape))
    in_index = tuple(int(v) for v in np.unravel_index(col, args[p].shape))
    message = (
        f"gradcheck: {failures} of {total} Jacobian entries differ. Worst: d output {k}"
        f"{list(out_index)} / d input {p}{list(in_index)}: analytical {a:.10g}, numerical "
        f"{n:.10g} (|difference| {abs(a - n):.3g} > atol + rtol * |numerical| = "
        f"{atol + rtol * abs(n):.3g}; eps={eps})")
    if raise_exception:
        raise GradcheckError(message)
    return False


def gradgradcheck(fn, inputs, grad_outputs=None, eps=1e-6, atol=1e-5, rtol=1e-3,
                  raise_exception=True):
    """``gradcheck`` of the first derivative: checks that the gradient of ``fn`` (computed with
    ``create_graph=True``) is itself differentiated correctly, with respect to the inputs and to
    the output gradient ``grad_outputs`` (random float64 tensors, seed 0, when not given)."""
    inputs = _as_tuple(inputs)
    args, positions = _float64_copies(inputs)
    outs = _outputs(fn, args)
    if grad_outputs is None:
        generator = Generator(0)
        grad_outputs = tuple(randn(out.shape, dtype=dtypes.float64, generator=generator,
                                   backend=out.backend) for out in outs)
    grad_outputs = tuple(g.detach().astype(dtypes.float64).clone().requires_grad_()
                         for g in _as_tuple(grad_outputs))
    if len(grad_outputs) != len(outs):
        raise ValueError(f"gradgradcheck: {len(grad_outputs)} grad_outputs for {len(outs)} "
                         "floating outputs")
    n = len(inputs)

    def first_derivative(*all_args):
        xs = all_args[:n]
        live = [(out, g) for out, g in zip(_outputs(fn, xs), all_args[n:]) if out.requires_grad]
        wrt = [xs[p] for p in positions]
        if not live:
            return tuple(zeros_like(x) for x in wrt)
        grads = grad([out for out, _ in live], wrt, grad_outputs=[g for _, g in live],
                     create_graph=True, allow_unused=True)
        return tuple(zeros_like(x) if g is None else g for g, x in zip(grads, wrt))

    return gradcheck(first_derivative, tuple(args) + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
