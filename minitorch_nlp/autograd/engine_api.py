"""The user-facing entry points to the engine: ``Tensor.backward`` and ``grad``."""
from __future__ import annotations

from .engine import run_backward


def _root_grads(outputs, grad_outputs, op):
    from .tensor import Tensor

    grads = []
    for i, out in enumerate(outputs):
        g = grad_outputs[i] if grad_outputs is not None else None
        if g is None:
            if out.size != 1:
                raise RuntimeError(
                    f"{op}: a gradient can be created implicitly only for an output with one "
                    f"element; output {i} has shape {out.shape}, so pass its gradient explicitly")
            g = Tensor._wrap(out._backend.xp.ones(out.shape, dtype=out.dtype), out._backend)
        else:
            if not isinstance(g, Tensor):
                g = Tensor._wrap(out._backend.asarray(g, dtype=out.dtype), out._backend)
            if g.shape != out.shape:
                raise ValueError(f"{op}: the gradient for output {i} has shape {g.shape}, "
                                 f"but the output has shape {out.shape}")
        grads.append(g)
    return grads


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def backward(outputs, grad_outputs=None, retain_graph=None, create_graph=False):
    """Accumulate d(outputs)/d(leaf) into the ``.grad`` of every leaf that requires a gradient."""
    outputs = _as_list(outputs)
    grad_outputs = None if grad_outputs is None else _as_list(grad_outputs)
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError(
                f"backward: output {i} (shape {out.shape}) does not require a gradient: no input "
                "of the computation had requires_grad=True, or it ran under no_grad()")
    roots = [out._grad_node() for out in outputs]
    run_backward(roots, _root_grads(outputs, grad_outputs, "backward"),
                 retain_graph=create_graph if retain_graph is None else retain_graph,
                 create_graph=create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """The gradients of ``outputs`` with respect to ``inputs``, returned as a tuple (``.grad`` is
    left untouched). With ``create_graph=True`` they carry a graph and can be differentiated again
    (Hessian-vector products: ``grad(grad(f, x, create_graph=True)[0] @ v, x)``)."""
    outputs = _as_list(outputs)
    inputs = _as_list(inputs)
    grad_outputs = None if grad_outputs is None else _as_list(grad_outputs)
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {x.shape}) does not require a gradient")
    live = [(out, g) for out, g in zip(outputs, _root_grads(outputs, grad_outputs, "grad"))
            if out.requires_grad]
    if not live and not allow_unused:
        raise RuntimeError("grad: no output requires a gradient (did it run under no_grad()?)")
    targets = {id(node): node for node in (x._grad_node() for x in inputs)}
    captured = {}
    if live:
        captured = run_backward([out._grad_node() for out, _ in live], [g for _, g in live],
                                retain_graph=create_graph if retain_graph is None else retain_graph,
                                create_graph=create_graph, targets=targets)
    results = []
    for i, x in enumerate(inputs):
        g = captured.get(id(x._grad_node()))
        if g is None and not allow_unused:
            raise RuntimeError(
                f"grad: input {i} (shape {x.shape}) is not part of the graph of the outputs; "
                "pass allow_unused=True to get None for it")
        if g is not None and g.shape != x.shape:
            from .ops_shape import sum_to

            g = sum_to(g, x.shape)
        results.append(g)
    return tuple(results)
