"""Reverse-mode traversal of the recorded graph: ``backward`` and ``grad``.

The graph is a DAG of ``Context`` nodes (one per recorded operation) ending in ``LeafNode``s.
Nodes are visited in reverse topological order, so every gradient that reaches a node has been
summed before the node's ``backward`` runs. This is the one place that

* reduces a gradient of broadcast shape back to the shape of the input it belongs to,
* gathers the gradients of a multi-output Function's outputs (``OutputNode``s) into one call
  of its backward,
* sums gradients when a tensor is used more than once,
* runs tensor hooks, fills ``.grad`` of leaves (and of tensors that asked ``retain_grad()``),
* frees saved tensors unless ``retain_graph``.

With ``create_graph`` the backward functions run with recording on, so the gradients come back as
tensors with a graph of their own, ready to be differentiated again.
"""
from __future__ import annotations

from . import function, grad_mode
from .function import LeafNode, OutputNode

Tensor = None  # the Tensor class, handed over by tensor.py
sum_to = None  # ops_shape.sum_to, handed over by tensor.py


def _topological_order(roots):
    """Nodes reachable from ``roots``, each after every node it feeds into (roots first)."""
    post_order = []
    visited = set()
    stack = [(root, False) for root in roots]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            post_order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for child in node.next_nodes:
            if child is not None and id(child) not in visited:
                stack.append((child, False))
    post_order.reverse()
    return post_order


def _nodes_leading_to(order, targets):
    """Ids of nodes from which some target can be reached (the only ones worth running)."""
    useful = set()
    for node in reversed(order):
        if id(node) in targets or any(child is not None and id(child) in useful
                                      for child in node.next_nodes):
            useful.add(id(node))
    return useful


def _owns_memory(array):
    """True when ``array`` is a fresh buffer that may be accumulated into in place."""
    flags = getattr(array, "flags", None)
    # CuPy's flags have no ``writeable``: its arrays cannot be made read-only
    return flags is not None and array.base is None and getattr(flags, "writeable", True)


def run_backward(roots, root_grads, *, retain_graph, create_graph, targets=None):
    """Propagate ``root_grads`` from the ``roots`` nodes.

    Without ``targets``, gradients are accumulated into leaves' ``.grad``. With ``targets`` (a dict
    id(node) -> node), nothing is accumulated and the gradients reaching those nodes are returned
    as a dict id(node) -> Tensor.
    """
    order = _topological_order(roots)
    useful = None if targets is None else _nodes_leading_to(order, targets)
    pending = {}
    owned = set()  # ids of arrays in ``pending`` that the engine allocated itself
    handed_out = set(id(g.data) for g in root_grads)
    captured = {}
    for root, g in zip(roots, root_grads):
        _accumulate(pending, owned, id(root), g, create_graph)

    previous_mode = grad_mode.is_grad_enabled()
    grad_mode.set_grad_enabled(create_graph)
    try:
        for node in order:
            g = pending.pop(id(node), None)
            if g is None or (useful is not None and id(node) not in useful):
                continue
            if node.hooks:
                for hook in node.hooks:
                    replaced = hook(g)
                    if replaced is not None:
                        g = replaced
            if targets is not None and id(node) in targets:
                captured[id(node)] = g
            if isinstance(node, LeafNode):
                if targets is None:
                    _accumulate_leaf(node, g, create_graph, handed_out)
                continue
            if node.retained is not None:
                kept = node.retained()
                if kept is not None:
                    kept.grad = g if kept.grad is None else kept.grad + g
            if isinstance(node, OutputNode):   # one output of a multi-output Function
                slots = pending.setdefault(id(node.ctx), [None] * node.ctx.num_outputs)
                slots[node.index] = g
                continue
            input_grads = node.fn.backward(node, tuple(g) if isinstance(g, list) else g)
            if not isinstance(input_grads, tuple):
                input_grads = (input_grads,)
            for child, meta, child_grad in zip(node.next_nodes, node.input_meta, input_grads):
                if child is None or child_grad is None:
                    continue
                key = id(child)
                if useful is not None and key not in useful:
                    continue
                shape, dtype = meta
                data = child_grad.data
                if data.shape != shape:
                    child_grad = sum_to(child_grad, shape)
                if data.dtype != dtype:
                    child_grad = child_grad.astype(dtype)
                if key in pending:
                    _accumulate(pending, owned, key, child_grad, create_graph)
                else:
                    pending[key] = child_grad
            if not retain_graph:
                node.release()
    finally:
        grad_mode.set_grad_enabled(previous_mode)
    return captured


def _accumulate(pending, owned, key, g, create_graph):
    previous = pending.get(key)
    if previous is None:
        pending[key] = g
    elif create_graph:
        pending[key] = previous + g
    elif key in owned:
        previous.data += g.data
    else:  # a fresh sum laid out as the first gradient (a column-major weight's, say)
        total = previous._backend.xp.empty_like(previous.data)
        previous._backend.xp.add(previous.data, g.data, out=total)
        pending[key] = Tensor._wrap(total, previous._backend)
        owned.add(key)


def _accumulate_leaf(node, g, create_graph, handed_out):
    leaf = node.tensor_ref()
    if leaf is None:
        return
    if create_graph:
        leaf.grad = g if leaf.grad is None else leaf.grad + g
        return
    if leaf.grad is None or leaf.grad._node is not None:
        data = g.data
        if id(data) in handed_out or not _owns_memory(data):
            data = data.copy(order=function.memory_order(leaf.data))
        handed_out.add(id(data))
        fresh = Tensor._wrap(data, g._backend)
        leaf.grad = fresh if leaf.grad is None else Tensor._wrap(
            leaf.grad.data + data, g._backend)
    else:
        with function.writable(leaf.grad) as data:
            data += g.data
