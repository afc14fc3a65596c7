"""Every public op against PyTorch: forward values and gradients on random float64 inputs, and the
dtype promotion table. Skipped where ``torch`` is not installed (it is never a dependency of the
library; see the README's Tests section for running it).

``OPS`` is one row per operation: the engine's call and PyTorch's call on the same inputs (the
engine's ``axis=`` against PyTorch's ``dim=`` ...). The gradient compared is that of
``sum(out * u)`` for a random cotangent ``u``. ``DIFFERENCES`` lists the differences from PyTorch
kept on purpose; each row is a test that the difference is still there, so the table cannot go
stale.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import pytest

import minitorch_nlp as mt
import minitorch_nlp.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RTOL, ATOL = 1e-9, 1e-11


def _domain(kind, shape, rng):
    """float64 values in the op's domain, distinct and away from kinks (0, +-1, +-3, 6)."""
    size = int(np.prod(shape, dtype=np.int64))
    if kind == "positive":
        values = rng.uniform(0.2, 2.0, size)
    elif kind == "unit":
        values = rng.uniform(-0.9, 0.9, size)
    elif kind == "above_one":
        values = rng.uniform(1.2, 3.0, size)
    elif kind == "probability":
        values = rng.uniform(0.05, 0.95, size)
    else:
        values = rng.permutation(np.linspace(-2.45, 2.45, max(size, 1)) + 0.013)[:size]
    return values.reshape(shape)


@dataclass
class Op:
    name: str
    ours: Callable
    theirs: Callable
    shapes: tuple
    domain: str | tuple = "any"
    differentiable: bool = True
    rtol: float = RTOL


def row(name, ours, theirs, *shapes, domain="any", differentiable=True, rtol=RTOL):
    """One row of ``OPS``: the operation ``name``, ours and PyTorch's, on inputs of ``shapes``."""
    return pytest.param(Op(name, ours, theirs, shapes, domain, differentiable, rtol), id=name)


# PyTorch's hardsigmoid / hardswish backward multiplies by 1/6 rounded to float32, also in float64
SIXTH_IN_FLOAT32 = 1e-7


IDX = np.array([2, 0, 2, 1])           # repeated positions
MASK = np.array([[True, False, True, True], [False, False, True, False], [True] * 4])
TARGET = np.array([1, 0, 3])


def _t_long(a):
    return torch.as_tensor(a, dtype=torch.long)


OPS = [
    # arithmetic and elementwise
    row("add", lambda a, b: a + b, lambda a, b: a + b, (3, 4), (4,)),
    row("sub", lambda a, b: a - b, lambda a, b: a - b, (3, 1), (1, 4)),
    row("mul", lambda a, b: a * b, lambda a, b: a * b, (3, 4), (3, 4)),
    row("div", lambda a, b: a / b, lambda a, b: a / b, (3, 4), (4,), domain=("any", "positive")),
    row("pow", lambda a, b: a ** b, lambda a, b: a ** b, (3, 4), (3, 4),
      domain=("positive", "any")),
    row("pow_scalar", lambda a: a ** 3, lambda a: a ** 3, (5,)),
    row("rpow", lambda a: 2.0 ** a, lambda a: 2.0 ** a, (5,)),
    row("maximum", mt.maximum, torch.maximum, (3, 4), (4,)),
    row("minimum", mt.minimum, torch.minimum, (3, 4), (4,)),
    row("neg", lambda a: -a, lambda a: -a, (5,)),
    row("abs", mt.abs, torch.abs, (5,)),
    row("exp", mt.exp, torch.exp, (5,)),
    row("exp2", mt.exp2, torch.exp2, (5,)),
    row("expm1", mt.expm1, torch.expm1, (5,)),
    row("log", mt.log, torch.log, (5,), domain="positive"),
    row("log2", mt.log2, torch.log2, (5,), domain="positive"),
    row("log10", mt.log10, torch.log10, (5,), domain="positive"),
    row("log1p", mt.log1p, torch.log1p, (5,), domain="positive"),
    row("sqrt", mt.sqrt, torch.sqrt, (5,), domain="positive"),
    row("rsqrt", mt.rsqrt, torch.rsqrt, (5,), domain="positive"),
    row("sin", mt.sin, torch.sin, (5,)),
    row("cos", mt.cos, torch.cos, (5,)),
    row("tan", mt.tan, torch.tan, (5,), domain="unit"),
    row("asin", mt.asin, torch.asin, (5,), domain="unit"),
    row("acos", mt.acos, torch.acos, (5,), domain="unit"),
    row("atan", mt.atan, torch.atan, (5,)),
    row("sinh", mt.sinh, torch.sinh, (5,)),
    row("cosh", mt.cosh, torch.cosh, (5,)),
    row("tanh", mt.tanh, torch.tanh, (5,)),
    row("asinh", mt.asinh, torch.asinh, (5,)),
    row("acosh", mt.acosh, torch.acosh, (5,), domain="above_one"),
    row("atanh", mt.atanh, torch.atanh, (5,), domain="unit"),
    row("sigmoid", mt.sigmoid, torch.sigmoid, (5,)),
    row("erf", mt.erf, torch.erf, (5,)),
    row("sign", mt.sign, torch.sign, (5,)),
    row("floor", mt.floor, torch.floor, (5,)),
    row("ceil", mt.ceil, torch.ceil, (5,)),
    row("round", mt.round, torch.round, (5,)),
    row("trunc", mt.trunc, torch.trunc, (5,)),
    row("clip", lambda a: mt.clip(a, -1.0, 0.5), lambda a: torch.clamp(a, -1.0, 0.5), (6,)),
    row("logaddexp", mt.logaddexp, torch.logaddexp, (3, 4), (4,)),
    row("lerp", lambda a, b: mt.lerp(a, b, 0.3), lambda a, b: torch.lerp(a, b, 0.3), (4,), (4,)),
    row("xlogy", mt.xlogy, torch.xlogy, (4,), (4,), domain=("any", "positive")),
    row("where", lambda a, b: mt.where(mt.tensor(MASK), a, b),
      lambda a, b: torch.where(torch.as_tensor(MASK), a, b), (3, 4), (4,)),
    row("remainder", lambda a: mt.remainder(a, 0.7), lambda a: torch.remainder(a, 0.7), (6,)),
    row("fmod", lambda a: mt.fmod(a, 0.7), lambda a: torch.fmod(a, 0.7), (6,)),
    row("floor_divide", lambda a: mt.floor_divide(a, 0.7), lambda a: torch.floor_divide(a, 0.7),
      (6,), differentiable=False),  # PyTorch defines no derivative; ours is 0
    # tests and logic (no gradient)
    row("isclose", lambda a, b: mt.isclose(a, b, atol=0.5),
      lambda a, b: torch.isclose(a, b, atol=0.5), (3, 4), (3, 4), differentiable=False),
    row("isinf", lambda a: mt.isinf(a / 0.0), lambda a: torch.isinf(a / 0.0), (5,),
      differentiable=False),
    row("isnan", lambda a: mt.isnan(mt.log(a)), lambda a: torch.isnan(torch.log(a)), (5,),
      differentiable=False),
    row("nonzero", lambda a: mt.floor(a).nonzero(), lambda a: torch.floor(a).nonzero(), (3, 4),
      differentiable=False),
    row("logical_and", lambda a, b: mt.logical_and(a > 0, b > 0),
      lambda a, b: torch.logical_and(a > 0, b > 0), (3, 4), (4,), differentiable=False),
    row("logical_or", lambda a, b: mt.logical_or(mt.floor(a), b > 0),
      lambda a, b: torch.logical_or(torch.floor(a), b > 0), (3, 4), (4,), differentiable=False),
    row("logical_xor", lambda a, b: mt.logical_xor(a > 0, b > 0),
      lambda a, b: torch.logical_xor(a > 0, b > 0), (3, 4), (4,), differentiable=False),
    row("logical_not", lambda a: mt.logical_not(a > 0), lambda a: torch.logical_not(a > 0), (5,),
      differentiable=False),
    row("bitwise", lambda a, b: mt.bitwise_xor(mt.bitwise_and((a * 9).long(), (b * 9).long()),
                                             mt.bitwise_not((a * 5).long())),
      lambda a, b: torch.bitwise_xor(torch.bitwise_and((a * 9).long(), (b * 9).long()),
                                     torch.bitwise_not((a * 5).long())), (3, 4), (4,),
      differentiable=False),
    row("integer_floor_divide_remainder_fmod",
      lambda a: mt.stack([mt.floor_divide((a * 9).long(), 4), mt.remainder((a * 9).long(), 4),
                          mt.fmod((a * 9).long(), 4)]),
      lambda a: torch.stack([torch.floor_divide((a * 9).long(), 4),
                             torch.remainder((a * 9).long(), 4), torch.fmod((a * 9).long(), 4)]),
      (6,), differentiable=False),
    # reductions and running ops
    row("sum", lambda a: a.sum(axis=1), lambda a: a.sum(dim=1), (3, 4)),
    row("sum_all", lambda a: a.sum(), lambda a: a.sum(), (3, 4)),
    row("mean", lambda a: a.mean(axis=(0, 2), keepdims=True),
      lambda a: a.mean(dim=(0, 2), keepdim=True), (2, 3, 4)),
    row("var_ddof1", lambda a: a.var(axis=1, ddof=1), lambda a: a.var(dim=1), (3, 4)),
    row("std_ddof1", lambda a: a.std(axis=0, ddof=1), lambda a: a.std(dim=0), (3, 4)),
    row("prod", lambda a: a.prod(axis=1), lambda a: a.prod(dim=1), (3, 4)),
    row("max", lambda a: a.max(axis=1), lambda a: a.max(dim=1).values, (3, 4)),
    row("min", lambda a: a.min(axis=0), lambda a: a.min(dim=0).values, (3, 4)),
    row("amax_all", lambda a: a.max(), lambda a: a.max(), (3, 4)),
    row("logsumexp", lambda a: a.logsumexp(axis=1), lambda a: a.logsumexp(dim=1), (3, 4)),
    row("norm1", lambda a: a.norm(1, axis=1), lambda a: torch.linalg.vector_norm(a, 1, dim=1),
      (3, 4)),
    row("norm2", lambda a: a.norm(axis=1), lambda a: torch.linalg.vector_norm(a, 2, dim=1), (3, 4)),
    row("norm3", lambda a: a.norm(3), lambda a: torch.linalg.vector_norm(a, 3), (3, 4)),
    row("norm_inf", lambda a: a.norm(math.inf, axis=0),
      lambda a: torch.linalg.vector_norm(a, math.inf, dim=0), (3, 4)),
    row("norm_fro", lambda a: a.norm("fro"), lambda a: torch.norm(a, "fro"), (3, 4)),
    row("cumsum", lambda a: a.cumsum(1), lambda a: a.cumsum(1), (3, 4)),
    row("cumprod", lambda a: a.cumprod(1), lambda a: a.cumprod(1), (3, 4)),
    row("cummax", lambda a: mt.cummax(a, 1)[0], lambda a: torch.cummax(a, 1).values, (3, 4)),
    row("cummin", lambda a: mt.cummin(a, 0)[0], lambda a: torch.cummin(a, 0).values, (3, 4)),
    row("cummax_indices", lambda a: mt.cummax(a, 1)[1], lambda a: torch.cummax(a, 1).indices,
      (3, 4), differentiable=False),
    row("logcumsumexp", lambda a: a.logcumsumexp(1), lambda a: torch.logcumsumexp(a, 1), (3, 4)),
    row("softmax", lambda a: a.softmax(0), lambda a: a.softmax(0), (3, 4)),
    row("log_softmax", lambda a: a.log_softmax(-1), lambda a: a.log_softmax(-1), (3, 4)),
    # shapes
    row("reshape", lambda a: a.reshape(4, 3), lambda a: a.reshape(4, 3), (3, 4)),
    row("permute", lambda a: a.permute(2, 0, 1), lambda a: a.permute(2, 0, 1), (2, 3, 4)),
    row("transpose", lambda a: a.transpose(0, 2), lambda a: a.transpose(0, 2), (2, 3, 4)),
    row("squeeze", lambda a: a.squeeze(1), lambda a: a.squeeze(1), (3, 1, 4)),
    row("unsqueeze", lambda a: a.unsqueeze(-1), lambda a: a.unsqueeze(-1), (3, 4)),
    row("expand", lambda a: a.expand(2, 3, -1), lambda a: a.expand(2, 3, -1), (3, 4)),
    row("flip", lambda a: a.flip(1), lambda a: a.flip(1), (3, 4)),
    row("roll", lambda a: a.roll(2, 1), lambda a: a.roll(2, 1), (3, 4)),
    row("tril", lambda a: a.tril(-1), lambda a: a.tril(-1), (3, 4)),
    row("triu", lambda a: a.triu(1), lambda a: a.triu(1), (3, 4)),
    row("tile", lambda a: mt.tile(a, (2, 1, 2)), lambda a: torch.tile(a, (2, 1, 2)), (3, 4)),
    row("repeat", lambda a: a.repeat(2, 3), lambda a: a.repeat(2, 3), (3, 4)),
    row("repeat_interleave", lambda a: a.repeat_interleave(2, 1),
      lambda a: a.repeat_interleave(2, 1), (3, 4)),
    row("repeat_interleave_counts", lambda a: a.repeat_interleave([1, 0, 3], 0),
      lambda a: a.repeat_interleave(torch.tensor([1, 0, 3]), 0), (3, 4)),
    row("unflatten", lambda a: a.unflatten(1, (2, 2)), lambda a: a.unflatten(1, (2, 2)), (3, 4)),
    row("diagonal", lambda a: a.diagonal(1, 1, 2), lambda a: a.diagonal(1, 1, 2), (2, 3, 4)),
    row("diag_matrix", lambda a: mt.diag(a, -1), lambda a: torch.diag(a, -1), (3, 4)),
    row("diag_vector", lambda a: mt.diag(a, 2), lambda a: torch.diag(a, 2), (3,)),
    row("masked_select", lambda a: a.masked_select(mt.tensor(MASK)),
      lambda a: a.masked_select(torch.as_tensor(MASK)), (3, 4)),
    row("unfold", lambda a: a.unfold(1, 2, 1), lambda a: a.unfold(1, 2, 1), (3, 5)),
    row("cat", lambda a, b: mt.cat([a, b], axis=1), lambda a, b: torch.cat([a, b], dim=1),
      (3, 4), (3, 2)),
    row("stack", lambda a, b: mt.stack([a, b], axis=1), lambda a, b: torch.stack([a, b], dim=1),
      (3, 4), (3, 4)),
    row("split", lambda a: a.split([1, 3], axis=1)[1], lambda a: a.split([1, 3], dim=1)[1],
      (3, 4)),
    row("chunk", lambda a: a.chunk(2, axis=0)[0], lambda a: a.chunk(2, dim=0)[0], (3, 4)),
    row("pad_constant", lambda a: mt.pad(a, [(0, 0), (2, 1)], value=0.5),
      lambda a: TF.pad(a, (2, 1), value=0.5), (3, 4)),
    row("pad_negative", lambda a: mt.pad(a, [(0, 0), (-1, 2)]), lambda a: TF.pad(a, (-1, 2)),
      (3, 4)),
    row("pad_replicate", lambda a: mt.pad(a, [(0, 0), (0, 0), (2, 3)], mode="replicate"),
      lambda a: TF.pad(a, (2, 3), mode="replicate"), (2, 3, 4)),
    row("pad_reflect", lambda a: mt.pad(a, [(0, 0), (0, 0), (2, 3)], mode="reflect"),
      lambda a: TF.pad(a, (2, 3), mode="reflect"), (2, 3, 4)),
    row("pad_circular", lambda a: mt.pad(a, [(0, 0), (0, 0), (2, 3)], mode="circular"),
      lambda a: TF.pad(a, (2, 3), mode="circular"), (2, 3, 4)),
    row("meshgrid", lambda a, b: mt.meshgrid(a, b)[0] * mt.meshgrid(a, b)[1],
      lambda a, b: torch.meshgrid(a, b, indexing="ij")[0] * torch.meshgrid(a, b,
                                                                            indexing="ij")[1],
      (3,), (4,)),
    # indexing, repeated positions included
    row("index_list", lambda a: a[[2, 0, 2]], lambda a: a[[2, 0, 2]], (3, 4)),
    row("index_tuple_in_tuple", lambda a: a[(2, 0, 2), ], lambda a: a[torch.tensor([2, 0, 2])],
      (3, 4)),
    row("index_tensor", lambda a: a[:, mt.tensor(IDX)], lambda a: a[:, _t_long(IDX)], (3, 4)),
    row("index_two_arrays", lambda a: a[[0, 0, 2], [1, 1, 3]],
      lambda a: a[[0, 0, 2], [1, 1, 3]], (3, 4)),
    row("index_mask", lambda a: a[mt.tensor(MASK)], lambda a: a[torch.as_tensor(MASK)], (3, 4)),
    row("index_basic", lambda a: a[1:, ::2, None], lambda a: a[1:, ::2, None], (3, 4)),
    row("index_ellipsis", lambda a: a[..., 1], lambda a: a[..., 1], (2, 3, 4)),
    row("gather", lambda a: a.gather(1, mt.tensor(np.array([[0, 0], [3, 1], [2, 2]]))),
      lambda a: a.gather(1, _t_long([[0, 0], [3, 1], [2, 2]])), (3, 4)),
    row("index_select", lambda a: a.index_select(1, (3, 3, 0)),
      lambda a: a.index_select(1, _t_long([3, 3, 0])), (3, 4)),
    row("scatter_add", lambda a, s: a.scatter_add(0, mt.tensor(np.array([[0, 2, 0, 0]])), s),
      lambda a, s: a.scatter_add(0, _t_long([[0, 2, 0, 0]]), s), (3, 4), (1, 4)),
    *[row(f"scatter_reduce_{reduce}_{'self' if include_self else 'no_self'}",
        lambda a, s, r=reduce, i=include_self: a.scatter_reduce(
            0, mt.tensor(np.array([[0, 2, 0, 0], [0, 1, 0, 2]])), s, r, include_self=i),
        lambda a, s, r=reduce, i=include_self: a.scatter_reduce(
            0, _t_long([[0, 2, 0, 0], [0, 1, 0, 2]]), s, r, include_self=i), (3, 4), (2, 4))
      for reduce in ("sum", "prod", "mean", "amax", "amin") for include_self in (True, False)],
    row("scatter", lambda a, s: a.scatter(0, mt.tensor(np.array([[0, 2, 1, 0]])), s),
      lambda a, s: a.scatter(0, _t_long([[0, 2, 1, 0]]), s), (3, 4), (1, 4)),
    row("sort", lambda a: mt.sort(a, 1, descending=True)[0],
      lambda a: torch.sort(a, 1, descending=True).values, (3, 4)),
    row("topk", lambda a: mt.topk(a, 2, axis=1)[0], lambda a: torch.topk(a, 2, dim=1).values,
      (3, 4)),
    row("masked_fill", lambda a: a.masked_fill(mt.tensor(MASK), -1.0),
      lambda a: a.masked_fill(torch.as_tensor(MASK), -1.0), (3, 4)),
    # products
    row("matmul", lambda a, b: a @ b, lambda a, b: a @ b, (2, 3, 4), (4, 5)),
    row("einsum", lambda a, b: mt.einsum("bij,bkj->bik", a, b),
      lambda a, b: torch.einsum("bij,bkj->bik", a, b), (2, 3, 4), (2, 5, 4)),
    # functional
    row("relu", F.relu, TF.relu, (6,)),
    row("gelu", F.gelu, TF.gelu, (6,)),
    row("gelu_tanh", lambda a: F.gelu(a, "tanh"), lambda a: TF.gelu(a, approximate="tanh"), (6,)),
    row("silu", F.silu, TF.silu, (6,)),
    row("mish", F.mish, TF.mish, (6,)),
    row("softplus", F.softplus, TF.softplus, (6,)),
    row("softplus_beta", lambda a: F.softplus(a, beta=2.0, threshold=1.0),
      lambda a: TF.softplus(a, beta=2.0, threshold=1.0), (6,)),
    row("logsigmoid", F.logsigmoid, TF.logsigmoid, (6,)),
    row("leaky_relu", lambda a: F.leaky_relu(a, 0.2), lambda a: TF.leaky_relu(a, 0.2), (6,)),
    row("elu", F.elu, TF.elu, (6,)),
    row("selu", F.selu, TF.selu, (6,)),
    row("relu6", lambda a: F.relu6(a * 4), lambda a: TF.relu6(a * 4), (6,)),
    row("hardtanh", F.hardtanh, TF.hardtanh, (6,)),
    row("hardsigmoid", lambda a: F.hardsigmoid(a * 2), lambda a: TF.hardsigmoid(a * 2), (6,),
      rtol=SIXTH_IN_FLOAT32),
    row("hardswish", lambda a: F.hardswish(a * 2), lambda a: TF.hardswish(a * 2), (6,),
      rtol=SIXTH_IN_FLOAT32),
    row("softsign", F.softsign, TF.softsign, (6,)),
    row("glu", F.glu, TF.glu, (3, 4)),
    row("normalize", F.normalize, TF.normalize, (3, 4)),
    row("layer_norm", lambda a, w, b: F.layer_norm(a, 4, w, b),
      lambda a, w, b: TF.layer_norm(a, (4,), w, b), (3, 4), (4,), (4,)),
    row("linear", F.linear, TF.linear, (3, 4), (2, 4), (2,)),
    row("embedding", lambda w: F.embedding(mt.tensor(IDX), w),
      lambda w: TF.embedding(_t_long(IDX), w), (4, 3)),
    row("cross_entropy", lambda a: F.cross_entropy(a, mt.tensor(TARGET)),
      lambda a: TF.cross_entropy(a, _t_long(TARGET)), (3, 4)),
    row("cross_entropy_smoothing", lambda a: F.cross_entropy(a, mt.tensor(TARGET),
                                                           label_smoothing=0.1),
      lambda a: TF.cross_entropy(a, _t_long(TARGET), label_smoothing=0.1), (3, 4)),
    row("nll_loss", lambda a: F.nll_loss(a, mt.tensor(TARGET)),
      lambda a: TF.nll_loss(a, _t_long(TARGET)), (3, 4)),
    row("binary_cross_entropy", lambda p, t: F.binary_cross_entropy(p, t.detach()),
      lambda p, t: TF.binary_cross_entropy(p, t.detach()), (3, 4), (3, 4),
      domain="probability"),
    row("bce_with_logits", lambda a, t: F.binary_cross_entropy_with_logits(a, t.detach()),
      lambda a, t: TF.binary_cross_entropy_with_logits(a, t.detach()), (3, 4), (3, 4),
      domain=("any", "probability")),
    row("mse_loss", F.mse_loss, TF.mse_loss, (3, 4), (3, 4)),
    row("kl_div", lambda a, t: F.kl_div(a, t), lambda a, t: TF.kl_div(a, t, reduction="batchmean"),
      (3, 4), (3, 4), domain=("any", "probability")),
    row("cosine_similarity", F.cosine_similarity, TF.cosine_similarity, (3, 4), (3, 4)),
]


def _inputs(op, rng):
    domains = op.domain if isinstance(op.domain, tuple) else (op.domain,) * len(op.shapes)
    return [_domain(d, s, rng) for d, s in zip(domains, op.shapes)]


def _as_numpy(out):
    return out.detach().numpy() if isinstance(out, torch.Tensor) else out.numpy()


@pytest.mark.parametrize("op", OPS)
def test_forward_and_gradient_match_pytorch(op):
    rng = np.random.default_rng(0)
    arrays = _inputs(op, rng)
    ours = [mt.tensor(a, dtype=mt.float64, requires_grad=op.differentiable) for a in arrays]
    theirs = [torch.tensor(a, dtype=torch.float64, requires_grad=op.differentiable)
              for a in arrays]
    out_ours, out_theirs = op.ours(*ours), op.theirs(*theirs)
    expected = _as_numpy(out_theirs)
    assert out_ours.shape == expected.shape, \
        f"{op.name}: shape {out_ours.shape} vs {expected.shape}"
    np.testing.assert_allclose(out_ours.numpy(), expected, rtol=RTOL, atol=ATOL,
                               err_msg=f"{op.name}: forward")
    if not op.differentiable:
        return
    u = rng.standard_normal(expected.shape)
    wanted = [t for t in ours if t.requires_grad]
    grads = mt.grad((out_ours * mt.tensor(u, dtype=mt.float64)).sum(), wanted, allow_unused=True)
    torch_grads = torch.autograd.grad((out_theirs * torch.tensor(u)).sum(), theirs,
                                      allow_unused=True)
    for i, (g, h) in enumerate(zip(grads, torch_grads)):
        g = np.zeros(arrays[i].shape) if g is None else g.numpy()
        h = np.zeros(arrays[i].shape) if h is None else h.numpy()
        np.testing.assert_allclose(g, h, rtol=op.rtol, atol=ATOL, err_msg=f"{op.name}: grad {i}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name, ours, theirs", [
    ("d/dx x**0 at 0", lambda x: x ** 0, lambda x: x ** 0),
    ("d/dy 0**y", lambda y: mt.zeros(3, dtype=mt.float64) ** y,
     lambda y: torch.zeros(3, dtype=torch.float64) ** y),
    ("xlogy(x, x) at 0", lambda x: mt.xlogy(x, x.detach()), lambda x: torch.xlogy(x, x.detach())),
    ("norm at 0", lambda x: (x * 0).norm(), lambda x: torch.linalg.vector_norm(x * 0)),
    ("sqrt at 0", mt.sqrt, torch.sqrt),
    ("log at 0", mt.log, torch.log),
])
def test_special_points_match_pytorch(name, ours, theirs):
    values = np.array([-1.0, 0.0, 2.0]) if "0**y" in name else np.array([0.0, 0.0, 0.0])
    x = mt.tensor(values, dtype=mt.float64, requires_grad=True)
    y = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    (g,) = mt.grad(ours(x).sum(), x)
    (h,) = torch.autograd.grad(theirs(y).sum(), y)
    np.testing.assert_array_equal(g.numpy(), h.numpy(), err_msg=name)


PROMOTION_PAIRS = [("float32", "float64"), ("int64", "float32"), ("int32", "int64"),
                   ("bool", "int32"), ("bool", "float64"), ("int8", "uint8"),
                   ("float32", 0.5), ("int64", 0.5), ("int32", 2), ("bool", 1), ("bool", 1.5),
                   ("int64", True), ("float64", 2)]


@pytest.mark.parametrize("left, right", PROMOTION_PAIRS, ids=[f"{a}+{b}" for a, b in
                                                             PROMOTION_PAIRS])
def test_dtype_promotion_matches_pytorch(left, right):
    def ours(kind):
        return kind if not isinstance(kind, str) else mt.tensor([1, 1], dtype=kind)

    def theirs(kind):
        return kind if not isinstance(kind, str) else torch.ones(2, dtype=getattr(torch, kind))

    for op in (lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a / b):
        assert str(op(ours(left), ours(right)).dtype) == \
            str(op(theirs(left), theirs(right)).dtype).replace("torch.", "")


# ---- the differences from PyTorch kept on purpose --------------------------------------------
DIFFERENCES = [
    ("indexing follows NumPy: advanced indices separated by a slice go first",
     lambda: mt.zeros(2, 3, 4)[1, :, [0, 1]].shape,
     lambda: tuple(torch.zeros(2, 3, 4)[1, :, [0, 1]].shape),
     (2, 3), (3, 2)),
    ("squeeze(axis) of an axis whose size is not 1 raises (NumPy) instead of a no-op",
     lambda: _raises(lambda: mt.zeros(2, 3).squeeze(1)),
     lambda: tuple(torch.zeros(2, 3).squeeze(1).shape), "ValueError", (2, 3)),
    ("var and std default to ddof=0 (NumPy), PyTorch to correction=1",
     lambda: mt.tensor([1.0, 3.0]).var().item(), lambda: torch.tensor([1.0, 3.0]).var().item(),
     1.0, 2.0),
    ("a 0-d tensor promotes like any tensor (PyTorch treats it like a Python number)",
     lambda: str((mt.ones(2) + mt.tensor(1.0, dtype=mt.float64)).dtype),
     lambda: str((torch.ones(2) + torch.tensor(1.0, dtype=torch.float64)).dtype),
     "float64", "torch.float32"),
    ("pad widths are NumPy's (before, after) per axis, first axis first",
     lambda: mt.pad(mt.zeros(2, 3), [(1, 0), (0, 0)]).shape,
     lambda: tuple(TF.pad(torch.zeros(2, 3), (1, 0)).shape), (3, 3), (2, 4)),
    ("cross_entropy takes the class axis last: logits (..., C)",
     lambda: F.cross_entropy(mt.zeros(2, 5, 3), mt.zeros(2, 5, dtype=mt.int64)).shape,
     lambda: _raises(lambda: TF.cross_entropy(torch.zeros(2, 5, 3),
                                              torch.zeros(2, 5, dtype=torch.long))),
     (), "RuntimeError"),
]


def _raises(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the name of what was raised is the result
        return type(error).__name__
    return "no error"


@pytest.mark.parametrize("what, ours, theirs, ours_value, theirs_value", DIFFERENCES,
                         ids=[d[0][:40] for d in DIFFERENCES])
def test_documented_differences_still_hold(what, ours, theirs, ours_value, theirs_value):
    assert ours() == ours_value, what
    assert theirs() == theirs_value, what
