"""Pruning with learned L0 gates (the survey's section VI-B.2 and VI-B.3-A): the hard-concrete
distribution of Louizos et al. (2018, "Learning Sparse Neural Networks through L0
Regularization"), used per attention head by Voita et al. (2019, eq 51-52) and per rank-one
component of a factorised matrix by FLOP (Wang et al., 2020, eq 49-50).

* ``hard_concrete_sample``: u ~ U(0, 1), s = sigmoid((log u - log(1 - u) + log_alpha) / beta),
  stretched to (gamma, zeta) = (-eps, 1 + eps) and rectified, z = min(1, max(0, s (zeta - gamma)
  + gamma)): a distribution on [0, 1] with point masses at 0 and 1, differentiable in
  log_alpha; ``hard_concrete_gate`` is the deterministic gate used after training;
* ``l0_norm`` is eq 51, the number of gates that are not exactly 0, and ``expected_l0`` its
  relaxation, eq 52: L_C = sum_i (1 - P(z_i = 0)) = sum_i sigmoid(log_alpha_i - beta
  log(-gamma / zeta));
* ``HardConcreteGate`` holds the log_alpha of n gates; ``HeadGates`` gives each head of every
  layer of a Transformer a gate (Voita et al.: MultiHead = Concat_i(g_i head_i) W^O), trained with
  L_xent + lambda L_C, then ``closed_heads`` lists the heads to remove with
  ``pruning.prune_heads``;
* ``FactorizedLinear`` is FLOP's W = P G Q = sum_k z_k p_k q_k^T (eq 50; eq 49's
  theta~ = theta (.) z with one block theta_k = (p_k, q_k) per component), initialised from the
  SVD of a trained ``Linear``; ``flop_lagrangian`` is the penalty lambda_1 (s - t) +
  lambda_2 (s - t)^2 that drives the expected sparsity s to the target t, and ``export`` turns
  the trained layer into two dense matrices of the kept rank.
"""
from __future__ import annotations

import math

import numpy as np

from .. import checks, cookbook
from ..autograd import Tensor, empty, rand, tensor
from ..nn import Linear, Module, Parameter, Sequential, init
from . import pruning

__all__ = ["FactorizedLinear", "HardConcreteGate", "HeadGates", "expected_l0",
           "flop_lagrangian", "hard_concrete_gate", "hard_concrete_sample", "l0_norm"]

BETA, GAMMA, ZETA = 2.0 / 3.0, -0.1, 1.1      # Louizos et al.'s temperature and stretch


def _check_stretch(beta, gamma, zeta, op):
    if not (beta > 0 and gamma < 0 and zeta > 1):
        raise ValueError(f"{op}: need beta > 0 and the stretch gamma < 0 < 1 < zeta, got "
                         f"beta={beta}, gamma={gamma}, zeta={zeta}")


@cookbook.equation(52)
def hard_concrete_sample(log_alpha, u, *, beta=BETA, gamma=GAMMA, zeta=ZETA):
    """z = min(1, max(0, sigmoid((log u - log(1 - u) + log_alpha) / beta) (zeta - gamma) + gamma))
    for noise ``u`` in (0, 1) of ``log_alpha``'s shape (Louizos et al. eq. 10-11): the stochastic
    gate whose probability of being non-zero eq 52 sums."""
    _check_stretch(beta, gamma, zeta, "hard_concrete_sample")
    u = u if isinstance(u, Tensor) else tensor(u, dtype=log_alpha.dtype,
                                               backend=log_alpha.backend)
    s = ((u.log() - (1 - u).log() + log_alpha) / beta).sigmoid()
    return (s * (zeta - gamma) + gamma).clip(0.0, 1.0)


def hard_concrete_gate(log_alpha, *, gamma=GAMMA, zeta=ZETA):
    """The deterministic gate used at test time (Louizos et al. eq. 13):
    min(1, max(0, sigmoid(log_alpha) (zeta - gamma) + gamma))."""
    return (log_alpha.sigmoid() * (zeta - gamma) + gamma).clip(0.0, 1.0)


@cookbook.equation(51)
def l0_norm(gates):
    """L0(g_1 .. g_h) = sum_i (1 - [g_i = 0]) (eq 51): how many gates are open. Not
    differentiable (a count); train with ``expected_l0``."""
    values = gates.numpy() if isinstance(gates, Tensor) else np.asarray(gates)
    return int(np.count_nonzero(values))


@cookbook.equation(52)
def expected_l0(log_alpha, *, beta=BETA, gamma=GAMMA, zeta=ZETA):
    """The relaxed L0 norm (eq 52): L_C = sum_i (1 - P(z_i = 0 | log_alpha_i)) with
    P(z_i != 0) = sigmoid(log_alpha_i - beta log(-gamma / zeta)) (Louizos et al. eq. 12)."""
    _check_stretch(beta, gamma, zeta, "expected_l0")
    return (log_alpha - beta * math.log(-gamma / zeta)).sigmoid().sum()


class HardConcreteGate(Module):
    """``size`` hard-concrete gates with learned log_alpha ~ N(log(p / (1 - p)), 0.01^2),
    p = ``init_open`` (Louizos et al.'s initialisation; with the default 0.95 every test-time gate
    starts at exactly 1).
    Called: a sample per gate while training (fresh noise each call), the deterministic gate in
    eval mode. ``penalty()`` is eq 52, the expected number of open gates."""

    def __init__(self, size, init_open=0.95, beta=BETA, gamma=GAMMA, zeta=ZETA, generator=None):
        super().__init__()
        self.size = checks.positive_int(size, "size", "HardConcreteGate")
        if not 0.0 < init_open < 1.0:
            raise ValueError(f"HardConcreteGate: init_open must be in (0, 1), got {init_open!r}")
        _check_stretch(beta, gamma, zeta, "HardConcreteGate")
        self.beta, self.gamma, self.zeta = beta, gamma, zeta
        self.generator = generator
        self.log_alpha = Parameter(init.normal_(empty(size), math.log(init_open / (1 - init_open)),
                                                0.01, generator=generator))

    def forward(self):
        if not self.training:
            return hard_concrete_gate(self.log_alpha, gamma=self.gamma, zeta=self.zeta)
        eps = 1e-6
        u = rand(self.size, dtype=self.log_alpha.dtype, generator=self.generator,
                 backend=self.log_alpha.backend) * (1 - 2 * eps) + eps
        return hard_concrete_sample(self.log_alpha, u, beta=self.beta, gamma=self.gamma,
                                    zeta=self.zeta)

    def penalty(self):
        return expected_l0(self.log_alpha, beta=self.beta, gamma=self.gamma, zeta=self.zeta)

    def extra_repr(self):
        return f"size={self.size}"


class HeadGates(Module):
    """Voita et al.'s gated heads (section 6): MultiHead(Q, K, V) = Concat_i(g_i head_i) W^O, one
    ``HardConcreteGate`` per self-attention layer of ``model``'s stack, its gates given to the
    layer as its head mask by a forward pre-hook. Train the model's parameters and the gates
    with ``loss + lam * gates.penalty()`` (L_xent + lambda L_C, eq 52); ``closed_heads()`` then
    lists the heads whose deterministic gate is 0, for ``pruning.prune_heads``. ``remove()``
    detaches the hooks. The gates are a separate module: give ``gates.parameters()`` to the
    optimizer beside the model's."""

    def __init__(self, model, init_open=0.95, generator=None):
        super().__init__()
        attentions = pruning.attention_layers(model)
        self.gates = [HardConcreteGate(a.num_heads, init_open, generator=generator)
                      for a in attentions]
        for i, gate in enumerate(self.gates):
            self.add_module(f"layer{i}", gate)
        self._handles = [attention.register_forward_pre_hook(self._inject(gate),
                                                             with_kwargs=True)
                         for attention, gate in zip(attentions, self.gates)]

    @staticmethod
    def _inject(gate):
        def hook(module, args, kwargs):
            gate.train(module.training)          # sampled while training, deterministic after
            return args, dict(kwargs, head_mask=gate())
        return hook

    def penalty(self):
        """L_C summed over every layer's heads (eq 52)."""
        total = self.gates[0].penalty()
        for gate in self.gates[1:]:
            total = total + gate.penalty()
        return total

    def closed_heads(self):
        """``{layer: [heads]}`` whose test-time gate is exactly 0. Where every head of a layer is
        closed, the head with the largest log_alpha is kept (``prune_heads`` keeps at least one
        head per layer; remove the whole layer with ``pruning.drop_layers`` if it should go)."""
        closed = {}
        for i, gate in enumerate(self.gates):
            values = hard_concrete_gate(gate.log_alpha, gamma=gate.gamma, zeta=gate.zeta).numpy()
            heads = [int(h) for h in np.flatnonzero(values == 0)]
            if len(heads) == gate.size:
                heads.remove(int(np.argmax(gate.log_alpha.numpy())))
            if heads:
                closed[i] = heads
        return closed

    def prune(self, model):
        """Make the gates permanent in ``model``: each open head's test-time gate is folded into
        its columns of W^O, the closed heads are removed (``pruning.prune_heads``) and the hooks
        detached. The smaller model computes what the gated model computes in eval mode."""
        closed = self.closed_heads()
        for attention, gate in zip(pruning.attention_layers(model), self.gates):
            values = hard_concrete_gate(gate.log_alpha, gamma=gate.gamma, zeta=gate.zeta)
            columns = np.repeat(values.numpy(), attention.head_dim)
            weight = attention.out_proj.weight
            attention.out_proj.weight = Parameter(tensor(weight.numpy() * columns,
                                                         dtype=weight.dtype,
                                                         backend=weight.backend))
            attention.out_proj.choose_weight_layout_()
        self.remove()
        return pruning.prune_heads(model, closed)

    def remove(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []


@cookbook.equation(49, 50)
class FactorizedLinear(Module):
    r"""FLOP's factorised layer (Wang et al., 2020, eq 50)::

        W = P G Q = sum_{k=1}^r z_k (p_k q_k^T),   G = diag(z_1 .. z_r),   y = x W^T + b

    P (out, r), Q (r, in), z from a ``HardConcreteGate`` of r gates (a sample while training, the
    deterministic gate in eval). Computed as ((x Q^T) z) P^T + b, never forming W.
    ``from_linear`` starts from a trained ``Linear`` by its SVD, W = U S V^T, P = U sqrt(S),
    Q = sqrt(S) V^T (Wang et al. section 3), so that with all gates at 1 it computes the same
    function. ``expected_sparsity()`` is 1 - E[L0] / r; ``export()`` gives the pruned layer as
    two dense ``Linear``s of the kept rank (the gate folded into P)."""

    def __init__(self, in_features, out_features, rank, bias=True, init_open=0.95, generator=None):
        super().__init__()
        self.in_features = checks.positive_int(in_features, "in_features", "FactorizedLinear")
        self.out_features = checks.positive_int(out_features, "out_features", "FactorizedLinear")
        self.rank = checks.positive_int(rank, "rank", "FactorizedLinear")
        bound = 1 / math.sqrt(in_features)
        self.P = Parameter(init.uniform_(empty(out_features, rank), -1 / math.sqrt(rank),
                                         1 / math.sqrt(rank), generator=generator))
        self.Q = Parameter(init.uniform_(empty(rank, in_features), -bound, bound,
                                         generator=generator))
        self.bias = Parameter(init.zeros_(empty(out_features))) if bias else None
        self.gate = HardConcreteGate(rank, init_open, generator=generator)

    @classmethod
    def from_linear(cls, linear, rank=None, init_open=0.95, generator=None):
        """The factorisation of ``linear``'s weight by SVD, keeping the top ``rank`` components
        (default: all, min(in, out))."""
        weight = linear.weight.numpy().astype(np.float64)
        u, singular, vt = np.linalg.svd(weight, full_matrices=False)
        full = len(singular)
        rank = full if rank is None else rank
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= full:
            raise ValueError(f"FactorizedLinear.from_linear: rank must be in [1, {full}] for a "
                             f"{weight.shape} weight, got {rank!r}")
        root = np.sqrt(singular[:rank])
        new = cls(linear.in_features, linear.out_features, rank, bias=linear.bias is not None,
                  init_open=init_open, generator=generator)
        like = dict(dtype=linear.weight.dtype, backend=linear.weight.backend)
        new.P = Parameter(tensor(u[:, :rank] * root, **like))
        new.Q = Parameter(tensor(root[:, None] * vt[:rank], **like))
        if linear.bias is not None:
            new.bias = Parameter(linear.bias.detach().clone())
        new.gate = new.gate.to(linear.weight.dtype).to(linear.weight.backend.name)
        return new

    def forward(self, x):
        z = self.gate()
        hidden = (x @ self.Q.T) * z
        out = hidden @ self.P.T
        return out if self.bias is None else out + self.bias

    def weight(self):
        """The dense W = P G Q (eq 50) with the current gates (test-time gates in eval mode)."""
        return (self.P * self.gate()) @ self.Q

    def expected_sparsity(self):
        """s = 1 - E[number of open components] / r, differentiable in log_alpha."""
        return 1 - self.gate.penalty() / self.rank

    def export(self):
        """The trained layer with its closed components removed: ``Sequential(Linear(in, r'),
        Linear(r', out))`` with r' the open components (deterministic gates), the gate values
        folded into the second matrix; computes what this layer computes in eval mode. A layer
        with every component closed keeps its strongest one (a rank-0 layer is no layer)."""
        z = hard_concrete_gate(self.gate.log_alpha, gamma=self.gate.gamma,
                               zeta=self.gate.zeta).numpy()
        keep = np.flatnonzero(z)
        if not len(keep):
            keep = np.array([int(np.argmax(self.gate.log_alpha.numpy()))])
        like = dict(dtype=self.P.dtype, backend=self.P.backend)
        down = Linear(self.in_features, len(keep), bias=False)
        down.weight = Parameter(tensor(self.Q.numpy()[keep], **like))
        up = Linear(len(keep), self.out_features, bias=self.bias is not None)
        up.weight = Parameter(tensor(self.P.numpy()[:, keep] * z[keep], **like))
        down.choose_weight_layout_()
        up.choose_weight_layout_()
        if self.bias is not None:
            up.bias = Parameter(self.bias.detach().clone())
        return Sequential(down, up)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"rank={self.rank}")


def flop_lagrangian(expected_sparsity, target, lambda1, lambda2):
    """FLOP's constraint term (Wang et al. eq. 8): lambda_1 (s - t) + lambda_2 (s - t)^2, the
    expected sparsity s driven to the target t. The model minimises the loss plus this term; the
    multipliers lambda_1, lambda_2 (Parameters) are updated by gradient *ascent*, which rises the
    penalty while s misses t (step them with ``lambda.data += lr * lambda.grad``)."""
    if not 0.0 <= target < 1.0:
        raise ValueError(f"flop_lagrangian: the target sparsity must be in [0, 1), got {target!r}")
    gap = expected_sparsity - target
    return lambda1 * gap + lambda2 * gap * gap
