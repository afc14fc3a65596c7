"""Matrix products: ``matmul`` (with batch broadcasting) and ``einsum``."""
from __future__ import annotations

import string

from . import grad_mode
from .function import Function, memory_order


def _check_matmul(a_shape, b_shape):
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise ValueError(f"matmul: {a_shape} @ {b_shape}: both operands need at least one "
                         "dimension")
    inner_a = a_shape[-1]
    inner_b = b_shape[-2] if len(b_shape) > 1 else b_shape[0]
    if inner_a != inner_b:
        raise ValueError(f"matmul: {a_shape} @ {b_shape}: inner dimensions {inner_a} and "
                         f"{inner_b} differ")
    batch_a, batch_b = a_shape[:-2], b_shape[:-2]
    for x, y in zip(reversed(batch_a), reversed(batch_b)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"matmul: {a_shape} @ {b_shape}: batch dimensions {batch_a} and "
                             f"{batch_b} do not broadcast")


class Matmul(Function):
    """``a @ b`` as NumPy defines it (1-D operands are promoted, batch dimensions broadcast).

    A stack of rows times one matrix, the linear-layer case, runs as one 2-D GEMM (NumPy does not
    always reach BLAS for a 3-D by 2-D product), and its weight gradient is one GEMM too, instead
    of a batch of products summed afterwards.
    """

    @staticmethod
    def forward(ctx, a, b):
        _check_matmul(a.shape, b.shape)
        ctx.save_inputs(0, 1)
        if a.ndim > 2 and b.ndim == 2:
            return (a.reshape(-1, a.shape[-1]) @ b).reshape(a.shape[:-1] + (b.shape[-1],))
        return ctx.backend.matmul(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        a2 = a if a.ndim > 1 else a.reshape(1, -1)
        b2 = b if b.ndim > 1 else b.reshape(-1, 1)
        g2 = grad  # the gradient with the axes that promoting 1-D operands removed put back
        if b.ndim == 1:
            g2 = g2.unsqueeze(-1)
        if a.ndim == 1:
            g2 = g2.unsqueeze(-2)
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = g2 @ b2.mT
            if a.ndim == 1:
                grad_a = grad_a.squeeze(-2)
        if ctx.needs_input_grad[1]:
            if b.ndim == 2 and a2.ndim > 2:
                grad_b = a2.reshape(-1, a2.shape[-1]).mT @ g2.reshape(-1, g2.shape[-1])
            else:
                grad_b = a2.mT @ g2
            if b.ndim == 1:
                grad_b = grad_b.squeeze(-1)
        return grad_a, grad_b


class Linear(Function):
    """``x @ weight.T + bias`` with ``weight`` in PyTorch's ``(out_features, in_features)`` layout.

    One GEMM forward (the bias is added in place), and in backward ``d weight = grad^T x`` is one
    GEMM that lands directly in the weight's memory layout, row- or column-major (a widening
    ``nn.Linear`` stores its weight column-major, see ``nn.column_major_``), so that the
    optimizer updates parameter, gradient and moments in one order. (A gradient in the other
    layout needs a transposing copy, which costs as much as the GEMM: the 784-512-512-10 MLP
    step took 2.2x as long.) Inputs with more than two axes are flattened to rows, so that every
    product is a 2-D GEMM.
    """

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_inputs(0, 1)
        out = ctx.backend.matmul(x.reshape(-1, x.shape[-1]), weight.T)
        if bias is not None:
            out += bias
        return out.reshape(x.shape[:-1] + (weight.shape[0],))

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        need_x, need_weight, need_bias = ctx.needs_input_grad
        rows = grad.reshape(-1, grad.shape[-1])
        return (grad @ weight if need_x else None,
                _weight_gradient(rows, x.reshape(-1, x.shape[-1]), weight) if need_weight else None,
                rows.sum(axis=0) if need_bias else None)


def _weight_gradient(rows, x_rows, weight):
    """``rows^T x_rows`` (out, in), in ``weight``'s layout. For a column-major weight the GEMM
    writes the contiguous ``(in, out)`` transpose of a column-major buffer that owns its memory,
    so the engine keeps it as the gradient without a copy; while a graph is recorded
    (``create_graph``) it is the transpose of the recorded product instead."""
    from .tensor import Tensor

    if memory_order(weight.data) == "C":
        return rows.mT @ x_rows
    if grad_mode.is_grad_enabled():
        return (x_rows.mT @ rows).mT
    xp = weight.backend.xp
    out = xp.empty(weight.shape, dtype=xp.result_type(rows.dtype, x_rows.dtype), order="F")
    weight.backend.matmul(x_rows.data.T, rows.data, out=out.T)
    return Tensor._wrap(out, weight.backend)


def matmul(a, b):
    from .ops_elementwise import _one_tensor

    return Matmul.apply(*_one_tensor(a, b, "matmul"))


# ---- einsum --------------------------------------------------------------------------------------
def _parse_einsum(subscripts, shapes):
    """Explicit subscripts, one letter string per operand plus the output, with '...' expanded."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        inputs, output = subscripts.split("->")
    else:
        inputs, output = subscripts, None
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: {subscripts!r} names {len(terms)} operands but "
                         f"{len(shapes)} were given")
    used = set(subscripts) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    ellipsis_ndim = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes) if "..." in t),
                        default=0)
    ellipsis = "".join(spare[:ellipsis_ndim])
    expanded = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            n = len(shape) - (len(term) - 3)
            term = term.replace("...", ellipsis[ellipsis_ndim - n:])
        if len(term) != len(shape):
            raise ValueError(f"einsum: operand subscripts {term!r} do not match its shape {shape}")
        expanded.append(term)
    sizes = {}
    for term, shape in zip(expanded, shapes):
        for c, n in zip(term, shape):
            if n != 1 and sizes.setdefault(c, n) != n:
                raise ValueError(f"einsum: {subscripts!r} with shapes "
                                 f"{[tuple(s) for s in shapes]}: index {c!r} has sizes "
                                 f"{sizes[c]} and {n}")
    if output is None:
        counts = {}
        for c in "".join(expanded):
            counts[c] = counts.get(c, 0) + 1
        output = ellipsis + "".join(sorted(c for c, k in counts.items()
                                           if k == 1 and c not in ellipsis))
    else:
        output = output.replace("...", ellipsis)
    return expanded, output, spare[ellipsis_ndim:]


class Einsum(Function):
    """Einstein summation. The gradient of operand k is another einsum: the output gradient with
    every other operand, contracted to operand k's letters; letters repeated inside operand k (a
    diagonal) are linked with identity matrices, letters only operand k has are broadcast back."""

    @staticmethod
    def forward(ctx, *operands, subscripts):
        terms, output, spare = _parse_einsum(subscripts, [o.shape for o in operands])
        ctx.terms, ctx.output_term, ctx.spare = terms, output, spare
        ctx.save_inputs(*range(len(operands)))
        return ctx.backend.xp.einsum(",".join(terms) + "->" + output, *operands)

    @staticmethod
    def backward(ctx, grad):
        from .tensor import Tensor

        operands = ctx.saved_tensors
        sizes = {}
        for term, op in zip(ctx.terms, operands):
            for c, n in zip(term, op.shape):
                sizes[c] = max(n, sizes.get(c, 1))
        grads = []
        for k, (term, _op) in enumerate(zip(ctx.terms, operands)):
            if not ctx.needs_input_grad[k]:
                grads.append(None)
                continue
            spare = iter(ctx.spare)
            target, links, seen = "", [], set()
            for c in term:
                if c in seen:  # a diagonal: a fresh letter tied to c by an identity matrix
                    fresh = next(spare)
                    links.append((c, fresh))
                    sizes[fresh] = sizes[c]
                    target += fresh
                else:
                    seen.add(c)
                    target += c
            available = set(ctx.output_term)
            for j, other in enumerate(ctx.terms):
                if j != k:
                    available.update(other)
            available.update(f for _, f in links)
            available.update(c for c, _ in links)
            reachable = "".join(c for c in target if c in available)
            xp = ctx.backend.xp
            identities = [Tensor._wrap(xp.eye(sizes[c], dtype=grad.dtype), ctx.backend)
                          for c, _ in links]
            others = [o for j, o in enumerate(operands) if j != k]
            other_terms = [t for j, t in enumerate(ctx.terms) if j != k]
            spec = ",".join([ctx.output_term] + other_terms + [c + f for c, f in links])
            g = einsum(spec + "->" + reachable, grad, *others, *identities)
            if reachable != target:  # letters summed away inside operand k: broadcast back
                shape = [sizes[c] if c in reachable else 1 for c in target]
                g = g.reshape(shape).broadcast_to(tuple(sizes[c] for c in target))
            grads.append(g)
        return tuple(grads)


def einsum(subscripts, *operands):
    from .creation import tensor
    from .tensor import Tensor

    operands = [o if isinstance(o, Tensor) else tensor(o) for o in operands]
    return Einsum.apply(*operands, subscripts=subscripts)
