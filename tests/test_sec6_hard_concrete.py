"""Section VI-B: hard-concrete L0 gates (Louizos et al.), per head (Voita et al., eq 51-52) and per
rank-one component (FLOP, eq 49-50), of ``minitorch_nlp.compress.hard_concrete``.

The expected L0 (eq 52) is checked against its reference by ``check_equation(52)`` in
``tests/test_check.py``; here the sample against its reference (values and gradients), its
distribution (in [0, 1], point masses at 0 and 1 of the closed-form sizes, mean L0 = eq 52),
gated heads trained to close and then removed with the same outputs, FLOP's factorisation equal
to the layer it starts from and its export equal to it after training, and clear errors."""
from __future__ import annotations

import math

import autograd
import numpy as np
import pytest
from hypothesis import given

import minitorch_nlp as mt
from minitorch_nlp.compress import hard_concrete as H
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM
from minitorch_nlp.nn import Linear
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import pruning as R

pytestmark = pytest.mark.sec6

TOL = dict(rtol=1e-9, atol=1e-12)


@pytest.mark.eq(52)
@given(S.arrays((4,), -3, 3), S.arrays((4,), 0.01, 0.99), S.seeds())
def test_eq52_hard_concrete_sample_matches_reference(log_alpha, u, seed):
    t = mt.tensor(log_alpha, dtype=mt.float64, requires_grad=True)
    z = H.hard_concrete_sample(t, u)
    expected = R.eq52_hard_concrete_sample(log_alpha, u, H.BETA, H.GAMMA, H.ZETA)
    np.testing.assert_allclose(z.numpy(), expected, **TOL)
    cotangent = np.random.default_rng(seed).standard_normal(4)
    z.backward(mt.tensor(cotangent, dtype=mt.float64))
    want = autograd.grad(lambda a: np.sum(R.eq52_hard_concrete_sample(
        a, u, H.BETA, H.GAMMA, H.ZETA) * cotangent))(log_alpha)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-7, atol=1e-10)


@pytest.mark.eq(51)
@pytest.mark.eq(52)
@pytest.mark.parametrize("log_alpha", [-2.0, 0.0, 1.5])
def test_samples_lie_in_0_1_with_point_masses_of_the_closed_form_sizes(log_alpha):
    n = 20000
    gate = H.HardConcreteGate(n, generator=mt.Generator().manual_seed(0))
    gate.log_alpha.data[:] = log_alpha
    z = gate().numpy()
    assert z.min() >= 0 and z.max() <= 1
    p_zero = 1 / (1 + math.exp(log_alpha - H.BETA * math.log(-H.GAMMA / H.ZETA)))
    p_one = 1 / (1 + math.exp(H.BETA * math.log((1 - H.GAMMA) / (H.ZETA - 1)) - log_alpha))
    for observed, p in ((np.mean(z == 0), p_zero), (np.mean(z == 1), p_one)):
        assert abs(observed - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert 0 < p_zero and 0 < p_one                       # both point masses exist
    expected = gate.penalty().item()                     # eq 52: E[L0]
    assert abs(H.l0_norm(z) - expected) < 4 * math.sqrt(n * p_zero * (1 - p_zero))
    assert expected == pytest.approx(n * (1 - p_zero), rel=1e-6)       # float32 sum


@pytest.mark.eq(51)
def test_l0_norm_counts_the_open_gates():
    assert H.l0_norm(np.array([0.0, 0.3, 1.0, 0.0])) == 2
    assert H.l0_norm(mt.tensor([0.0, 0.0])) == 0


def tiny_bert(seed=0):
    mt.manual_seed(seed)
    return BertForMaskedLM(BertConfig(
        vocab_size=20, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
        intermediate_size=16, max_position_embeddings=8, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)).to(mt.float64)


@pytest.mark.eq(52)
def test_gated_heads_close_under_the_l0_penalty_and_are_removed_with_the_same_outputs():
    model = tiny_bert()
    gates = H.HeadGates(model, generator=mt.Generator().manual_seed(1)).to(mt.float64)
    ids = np.random.default_rng(0).integers(1, 20, (4, 8))
    optimizer = mt.optim.Adam(list(model.parameters()) + list(gates.parameters()), lr=0.1)
    start = gates.penalty().item()
    for _ in range(80):
        loss = model(ids, labels=ids).loss + 1.0 * gates.penalty()     # L_xent + lambda L_C
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert gates.penalty().item() < start - 1.0
    closed = gates.closed_heads()
    assert closed, "a strong L0 penalty should close some head"
    model.eval()
    with mt.no_grad():
        gated = model(ids).logits.numpy()
        gates.prune(model)
        pruned = model(ids).logits.numpy()
    np.testing.assert_allclose(pruned, gated, rtol=1e-9, atol=1e-10)
    heads = [layer.self_attn.num_heads for layer in model.bert.encoder.layers]
    assert heads == [3 - len(closed.get(i, [])) for i in range(2)] and min(heads) >= 1


@pytest.mark.eq(49)
@pytest.mark.eq(50)
def test_flop_factorisation_starts_as_the_linear_and_exports_what_it_computes():
    mt.manual_seed(0)
    linear = Linear(6, 5).to(mt.float64)
    flop = H.FactorizedLinear.from_linear(linear).eval()
    x = mt.tensor(np.random.default_rng(0).standard_normal((3, 6)))
    np.testing.assert_allclose(flop(x).numpy(), linear(x).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(flop.weight().numpy(), linear.weight.numpy(), rtol=1e-10,
                               atol=1e-12)
    flop.gate.log_alpha.data[:] = [3.0, -4.0, 0.5, -6.0, 3.0]      # two closed, one partial
    z = H.hard_concrete_gate(flop.gate.log_alpha).numpy()
    assert list(z == 0) == [False, True, False, True, False] and 0 < z[2] < 1
    dense = (flop.P.numpy() * z) @ flop.Q.numpy()                   # eq 50: P G Q
    np.testing.assert_allclose(flop.weight().numpy(), dense, rtol=1e-10)
    small = flop.export()
    assert small[0].weight.shape == (3, 6) and small[1].weight.shape == (5, 3)
    np.testing.assert_allclose(small(x).numpy(), flop(x).numpy(), rtol=1e-10, atol=1e-12)


def test_flop_lagrangian_drives_the_expected_sparsity_to_the_target():
    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.standard_normal((32, 8)), dtype=mt.float32)
    teacher = Linear(8, 8)
    with mt.no_grad():
        y = teacher(x)
    flop = H.FactorizedLinear.from_linear(teacher, generator=mt.Generator().manual_seed(0))
    lambdas = [mt.nn.Parameter(mt.tensor(0.0)), mt.nn.Parameter(mt.tensor(0.0))]
    optimizer = mt.optim.Adam(flop.parameters(), lr=0.05)
    target = 0.5
    for _ in range(150):
        penalty = H.flop_lagrangian(flop.expected_sparsity(), target, *lambdas)
        loss = ((flop(x) - y) ** 2).mean() + penalty
        optimizer.zero_grad()
        for lam in lambdas:
            lam.grad = None
        loss.backward()
        optimizer.step()
        for lam in lambdas:                                   # gradient ascent on lambda
            lam.data += 0.05 * lam.grad.data
    start = 0.01                      # all gates open: the expected sparsity starts near 0
    assert abs(flop.expected_sparsity().item() - target) < 0.15 < abs(start - target)
    assert lambdas[0].item() != 0.0


def test_hard_concrete_errors():
    with pytest.raises(ValueError, match="init_open must be in"):
        H.HardConcreteGate(3, init_open=1.0)
    with pytest.raises(ValueError, match="stretch gamma < 0 < 1 < zeta"):
        H.expected_l0(mt.tensor([0.0]), gamma=0.1)
    with pytest.raises(ValueError, match=r"rank must be in \[1, 4\]"):
        H.FactorizedLinear.from_linear(Linear(4, 6), rank=5)
    with pytest.raises(ValueError, match="target sparsity must be in"):
        H.flop_lagrangian(mt.tensor(0.2), 1.0, 0.0, 0.0)


@pytest.mark.eq(49, 50, 52)
def test_the_gate_constants_and_defaults_are_louizos_et_al_s():
    """beta = 2/3, gamma = -0.1, zeta = 1.1 (Louizos et al., 2018, section 4): the relaxed L0
    norm's defaults give the reference's value with these constants, and the test-time gates of
    FactorizedLinear clamp sigmoid(log_alpha) (zeta - gamma) + gamma with these values."""
    log_alpha = mt.tensor([-3.0, -0.2, 0.0, 0.7, 4.0], dtype=mt.float64)
    np.testing.assert_allclose(H.expected_l0(log_alpha).item(),
                               R.eq52_expected_l0(log_alpha.numpy(), 2 / 3, -0.1, 1.1),
                               rtol=1e-12)
    sigmoid = 1 / (1 + np.exp(-log_alpha.numpy()))
    gates = np.clip(sigmoid * 1.2 - 0.1, 0.0, 1.0)
    layer = H.FactorizedLinear(2, 3, 5).to(mt.float64).eval()
    with mt.no_grad():
        layer.gate.log_alpha.data[...] = log_alpha.numpy()
    P, Q = layer.P.numpy(), layer.Q.numpy()
    np.testing.assert_allclose(layer.weight().numpy(), P @ np.diag(gates) @ Q, rtol=1e-12)
