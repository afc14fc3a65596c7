"""Optimizers, schedules and clipping against their formulas, written here in plain NumPy float64.

The reference updates below are transcribed from the papers (Kingma & Ba 2015 Algorithm 1;
Loshchilov & Hutter 2019 Algorithm 2; Vaswani et al. 2017 eq. 3; Pascanu et al. 2013), not from
the library, which updates in place with rearranged scalars; the two must agree to rounding.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.nn import Parameter

TOL = dict(rtol=1e-9, atol=1e-9)


# ---- helpers -------------------------------------------------------------------------------------
def make_param(array, dtype=np.float64):
    return Parameter(mt.tensor(np.array(array, dtype=dtype), dtype=dtype))


def set_grad(param, grad):
    param.grad = mt.tensor(np.array(grad, dtype=param.dtype), dtype=param.dtype)


def run(optimizer, params, grads_per_step):
    """Apply one optimizer step per entry of ``grads_per_step`` (a list of per-parameter grads)."""
    for grads in grads_per_step:
        for param, grad in zip(params, grads):
            set_grad(param, grad)
        optimizer.step()


def finite(low=-10.0, high=10.0):
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)


@st.composite
def trajectories(draw, max_steps=4):
    """A starting parameter array and the gradients of 1..max_steps steps."""
    shape = draw(shapes)
    values = hnp.arrays(np.float64, shape, elements=finite())
    theta = draw(values)
    grads = draw(st.lists(values, min_size=1, max_size=max_steps))
    return theta, grads


# ---- reference maths -----------------------------------------------------------------------------
def sgd_reference(theta, grads, lr, momentum, dampening, weight_decay, nesterov):
    """Polyak momentum / Sutskever's Nesterov form, in PyTorch's parameterisation."""
    velocity = None
    for g in grads:
        d = g + weight_decay * theta
        if momentum != 0:
            if velocity is None:
                velocity = d
            else:
                velocity = momentum * velocity + (1 - dampening) * d
            d = d + momentum * velocity if nesterov else velocity
        theta = theta - lr * d
    return theta


def adam_reference(theta, grads, lr, betas, eps, weight_decay, amsgrad, decoupled):
    """Kingma & Ba Algorithm 1 (+ AMSGrad's running max, + AdamW's decoupled decay)."""
    beta1, beta2 = betas
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    v_max = np.zeros_like(theta)
    for t, g in enumerate(grads, start=1):
        if decoupled:
            theta = theta * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * theta
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g ** 2
        v_max = np.maximum(v_max, v)
        m_hat = m / (1 - beta1 ** t)
        v_hat = (v_max if amsgrad else v) / (1 - beta2 ** t)
        theta = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
    return theta


# ---- the update rules ----------------------------------------------------------------------------
@given(trajectories(), finite(0, 1), finite(0, 0.99), finite(0, 1), finite(0, 0.5), st.booleans())
def test_sgd_matches_formula(trajectory, lr, momentum, dampening, weight_decay, nesterov):
    theta, grads = trajectory
    if nesterov:
        momentum, dampening = max(momentum, 0.1), 0.0
    p = make_param(theta)
    opt = optim.SGD([p], lr=lr, momentum=momentum, dampening=dampening,
                    weight_decay=weight_decay, nesterov=nesterov)
    run(opt, [p], [[g] for g in grads])
    expected = sgd_reference(theta, grads, lr, momentum, dampening, weight_decay, nesterov)
    np.testing.assert_allclose(p.numpy(), expected, **TOL)


adam_hyper_parameters = dict(lr=finite(0, 1), beta1=finite(0, 0.999), beta2=finite(0, 0.999),
                             eps=finite(1e-10, 1e-1), weight_decay=finite(0, 0.5),
                             amsgrad=st.booleans())


@pytest.mark.parametrize("cls, decoupled", [(optim.Adam, False), (optim.AdamW, True)])
@given(trajectory=trajectories(), **adam_hyper_parameters)
def test_adam_and_adamw_match_formula(cls, decoupled, trajectory, lr, beta1, beta2, eps,
                                      weight_decay, amsgrad):
    theta, grads = trajectory
    p = make_param(theta)
    opt = cls([p], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
              amsgrad=amsgrad)
    run(opt, [p], [[g] for g in grads])
    expected = adam_reference(theta, grads, lr, (beta1, beta2), eps, weight_decay, amsgrad,
                              decoupled)
    np.testing.assert_allclose(p.numpy(), expected, **TOL)
    assert opt.state[p]["step"] == len(grads)


def test_adamw_decay_is_decoupled_from_the_gradient():
    """With a zero gradient Adam's L2 term moves the moments; AdamW's decay does not touch them."""
    p = make_param([1.0, -2.0])
    opt = optim.AdamW([p], lr=0.1, weight_decay=0.5)
    run(opt, [p], [[np.zeros(2)]])
    np.testing.assert_allclose(p.numpy(), [0.95, -1.9])
    np.testing.assert_array_equal(opt.state[p]["exp_avg"], 0.0)


def test_float32_parameters_keep_float32_state():
    p = make_param(np.ones((3, 2)), dtype=np.float32)
    opt = optim.Adam([p], amsgrad=True, weight_decay=0.1)
    run(opt, [p], [[np.full((3, 2), 0.5)]] * 2)
    assert p.dtype == np.float32 and p.data.dtype == np.float32
    for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
        assert opt.state[p][key].dtype == np.float32


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_adam_on_the_numba_backend_takes_the_numpy_backends_steps(cls, amsgrad):
    """The numba backend's fused update (one loop) and the NumPy backend's (whole arrays) give
    the same parameters and moments over a few steps, in float32, for a parameter large enough
    to be split between Numba's threads."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal((160, 257)).astype(np.float32)
    grads = [[rng.standard_normal(start.shape)] for _ in range(3)]
    results = []
    for name in ("numpy", "numba"):
        with mt.backend(name):
            p = make_param(start, dtype=np.float32)
            opt = cls([p], lr=0.01, weight_decay=0.1, amsgrad=amsgrad)
            run(opt, [p], grads)
        assert p.backend.name == name
        results.append([p.numpy()] + [np.asarray(v) for k, v in sorted(opt.state[p].items())
                                      if k != "step"])
    for ours, reference in zip(*results):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)


def test_param_groups_use_their_own_options():
    rng = np.random.default_rng(0)
    a0, b0 = rng.normal(size=(3, 2)), rng.normal(size=4)
    grads = [[rng.normal(size=(3, 2)), rng.normal(size=4)] for _ in range(3)]
    a, b = make_param(a0), make_param(b0)
    opt = optim.Adam([{"params": [a]}, {"params": b, "lr": 0.5, "betas": (0.5, 0.9)}],
                     lr=0.01, weight_decay=0.1)
    run(opt, [a, b], grads)
    assert opt.param_groups[1]["weight_decay"] == 0.1  # taken from the defaults
    np.testing.assert_allclose(a.numpy(), adam_reference(
        a0, [g[0] for g in grads], 0.01, (0.9, 0.999), 1e-8, 0.1, False, False), **TOL)
    np.testing.assert_allclose(b.numpy(), adam_reference(
        b0, [g[1] for g in grads], 0.5, (0.5, 0.9), 1e-8, 0.1, False, False), **TOL)


def test_add_param_group_and_parameters_without_grad_are_skipped():
    a, b = make_param([1.0, 2.0]), make_param([3.0])
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": [b], "lr": 1.0})
    set_grad(a, [1.0, 1.0])
    opt.step()
    np.testing.assert_allclose(a.numpy(), [0.9, 1.9])
    np.testing.assert_array_equal(b.numpy(), [3.0])
    assert a in opt.state and b not in opt.state
    set_grad(b, [2.0])
    opt.step()
    np.testing.assert_allclose(b.numpy(), [1.0])


def test_zero_grad():
    a, b = make_param([1.0, 2.0]), make_param([3.0])
    opt = optim.SGD([a, b], lr=0.1)
    set_grad(a, [1.0, 1.0])
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), [0.0, 0.0])
    assert b.grad is None
    opt.zero_grad()
    assert a.grad is None


def test_step_returns_the_closure_loss():
    p = make_param([1.0])
    opt = optim.SGD([p], lr=0.5)

    def closure():
        set_grad(p, [2.0])
        return 7.0

    assert opt.step(closure) == 7.0
    np.testing.assert_allclose(p.numpy(), [0.0])


def test_step_bumps_the_parameter_version():
    """A graph that saved the parameter must refuse backward after the optimizer changed it."""
    p = make_param([1.0, 2.0])
    loss = (p * p).sum()
    opt = optim.SGD([p], lr=0.1)
    set_grad(p, [1.0, 1.0])
    opt.step()
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_training_a_linear_model_reduces_the_loss(name):
    from minitorch_nlp import functional as F, nn

    mt.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = {"sgd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
           "adamw": lambda ps: optim.AdamW(ps, lr=0.1)}[name](model.parameters())
    x = mt.randn(32, 3)
    y = x @ mt.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    losses = []
    for _ in range(60):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 100


# ---- state_dict ----------------------------------------------------------------------------------
OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    "sgd-dampening": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.5, dampening=0.3),
    "adam": lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
    "adam-amsgrad": lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
    "adamw": lambda ps: optim.AdamW(
        [{"params": ps[:1]}, {"params": ps[1:], "weight_decay": 0.0, "lr": 0.02}], lr=0.01),
}


def assert_same_tree(a, b):
    assert type(a) is type(b) or (np.ndim(a) == np.ndim(b) == 0 and a == b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same_tree(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_tree(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@given(k=st.integers(0, 3), n=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_state_dict_round_trip_resumes_exactly(name, k, n, seed):
    rng = np.random.default_rng(seed)
    starts = [rng.normal(size=(2, 3)), rng.normal(size=5)]
    grads = [[rng.normal(size=(2, 3)), rng.normal(size=5)] for _ in range(k + n)]

    straight = [make_param(s, dtype=np.float32) for s in starts]
    opt = OPTIMIZERS[name](straight)
    run(opt, straight, grads)

    first = [make_param(s, dtype=np.float32) for s in starts]
    opt1 = OPTIMIZERS[name](first)
    run(opt1, first, grads[:k])
    saved = opt1.state_dict()
    resumed = [make_param(p.numpy(), dtype=np.float32) for p in first]
    opt2 = OPTIMIZERS[name](resumed)
    opt2.load_state_dict(saved)
    assert_same_tree(opt2.state_dict(), saved)
    run(opt1, first, grads[k:])  # the snapshot must not change when training goes on
    assert_same_tree(opt2.state_dict(), saved)
    run(opt2, resumed, grads[k:])
    for p, q in zip(straight, resumed):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_state_dict_resumes_through_a_checkpoint_file(tmp_path):
    """Optimizer and scheduler state saved with ``io.save`` resume training bit for bit."""
    from minitorch_nlp import io

    rng = np.random.default_rng(1)
    starts = [rng.normal(size=(2, 3)), rng.normal(size=4)]
    grads = [[rng.normal(size=(2, 3)), rng.normal(size=4)] for _ in range(5)]

    def train(opt, sched, params, step_grads):
        for g in step_grads:
            run(opt, params, [g])
            sched.step()

    params = [make_param(s, dtype=np.float32) for s in starts]
    opt = OPTIMIZERS["adam-amsgrad"](params)
    sched = optim.CosineWarmupDecayLR(opt, warmup_steps=1, total_steps=5)
    train(opt, sched, params, grads[:2])
    io.save({"params": [p.numpy() for p in params], "optim": opt.state_dict(),
             "sched": sched.state_dict()}, tmp_path / "ckpt.npz")
    train(opt, sched, params, grads[2:])

    state = io.load(tmp_path / "ckpt.npz")
    resumed = [make_param(a, dtype=np.float32) for a in state["params"]]
    opt2 = OPTIMIZERS["adam-amsgrad"](resumed)
    opt2.load_state_dict(state["optim"])
    sched2 = optim.CosineWarmupDecayLR(opt2, warmup_steps=1, total_steps=5)
    sched2.load_state_dict(state["sched"])
    train(opt2, sched2, resumed, grads[2:])
    for p, q in zip(params, resumed):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert_same_tree(opt2.state_dict(), opt.state_dict())


def test_state_dict_format_is_pytorchs():
    a, b, c = make_param(np.zeros(2)), make_param(np.zeros(3)), make_param(np.zeros(1))
    opt = optim.Adam([{"params": [a, b]}, {"params": [c], "lr": 0.1}])
    set_grad(a, np.ones(2))
    set_grad(c, np.ones(1))
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert sorted(sd["state"]) == [0, 2]
    assert sd["state"][0]["step"] == 1
    assert isinstance(sd["state"][2]["exp_avg"], np.ndarray)
    assert sd["param_groups"][1]["lr"] == 0.1 and sd["param_groups"][0]["betas"] == (0.9, 0.999)


def test_load_state_dict_accepts_string_indices_and_0d_steps():
    """What a checkpoint format with str-only keys and array leaves gives back still loads."""
    p = make_param(np.arange(3.0))
    opt = optim.Adam([p])
    set_grad(p, np.ones(3))
    opt.step()
    sd = opt.state_dict()
    sd["state"] = {str(i): {k: np.asarray(v) for k, v in s.items()}
                   for i, s in sd["state"].items()}
    opt2 = optim.Adam([make_param(np.arange(3.0))])
    opt2.load_state_dict(sd)
    assert opt2.state_dict()["state"][0]["step"] == 1
    assert isinstance(opt2.state_dict()["state"][0]["step"], int)


def test_load_state_dict_mismatches_are_named():
    def trained(shapes, groups=1):
        params = [make_param(np.ones(s)) for s in shapes]
        split = [{"params": params[i::groups]} for i in range(groups)]
        opt = optim.Adam(split)
        run(opt, params, [[np.ones(s) for s in shapes]])
        return opt

    sd = trained([(2,), (3,)]).state_dict()
    with pytest.raises(ValueError,
                       match="state dict has 1 parameter groups but the optimizer has 2"):
        trained([(2,), (3,)], groups=2).load_state_dict(sd)
    with pytest.raises(ValueError, match="group 0 has 2 parameters in the state dict but 3"):
        trained([(2,), (3,), (4,)]).load_state_dict(sd)
    target = trained([(2,), (4,)])
    before = target.state_dict()
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 1 .* shape \(3,\) but the "
                                         r"parameter has shape \(4,\)"):
        target.load_state_dict(sd)
    assert_same_tree(target.state_dict(), before)  # nothing half-loaded
    with pytest.raises(ValueError, match="lacks \\['max_exp_avg_sq'\\]"):
        amsgrad = optim.Adam([make_param(np.ones(2)), make_param(np.ones(3))], amsgrad=True)
        bad = trained([(2,), (3,)]).state_dict()
        bad["param_groups"][0]["amsgrad"] = True
        amsgrad.load_state_dict(bad)
    with pytest.raises(ValueError, match="expected a dict with 'state' and 'param_groups'"):
        target.load_state_dict({"state": {}})
    with pytest.raises(ValueError, match=r"Adam: invalid lr=-1"):
        bad = trained([(2,), (3,)]).state_dict()
        bad["param_groups"][0]["lr"] = -1
        trained([(2,), (3,)]).load_state_dict(bad)


# ---- argument errors -----------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda ps: optim.SGD(ps, lr=-0.1), r"SGD: invalid lr=-0\.1"),
    (lambda ps: optim.SGD(ps, momentum=-0.5), r"SGD: invalid momentum=-0\.5"),
    (lambda ps: optim.SGD(ps, weight_decay=-1e-4), r"SGD: invalid weight_decay=-0\.0001"),
    (lambda ps: optim.SGD(ps, nesterov=True), r"SGD: invalid nesterov=True.*momentum > 0"),
    (lambda ps: optim.SGD(ps, nesterov=True, momentum=0.9, dampening=0.1),
     r"SGD: invalid nesterov=True.*dampening = 0"),
    (lambda ps: optim.Adam(ps, lr=-1e-3), r"Adam: invalid lr=-0\.001"),
    (lambda ps: optim.Adam(ps, betas=(1.0, 0.999)), r"Adam: invalid betas\[0\]=1\.0.*\[0.0, 1.0\)"),
    (lambda ps: optim.Adam(ps, betas=(0.9, -0.1)), r"Adam: invalid betas\[1\]=-0\.1"),
    (lambda ps: optim.Adam(ps, betas=(0.9,)), r"Adam: invalid betas=\(0\.9,\)"),
    (lambda ps: optim.Adam(ps, eps=-1e-8), r"Adam: invalid eps=-1e-08"),
    (lambda ps: optim.AdamW(ps, weight_decay=-0.01), r"AdamW: invalid weight_decay=-0\.01"),
    (lambda ps: optim.AdamW([{"params": ps, "lr": -2.0}]), r"AdamW: invalid lr=-2\.0"),
    (lambda ps: optim.Adam([]), r"Adam: got an empty parameter list"),
])
def test_bad_hyper_parameters_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make([make_param(np.ones(2))])


def test_bad_params_are_refused():
    p = make_param(np.ones(2))
    with pytest.raises(TypeError, match="got a single Tensor"):
        optim.SGD(p)
    with pytest.raises(TypeError, match="not a set"):
        optim.SGD({p})
    with pytest.raises(TypeError, match="parameter 1 of group 0 is a list"):
        optim.SGD([p, [1.0]])
    with pytest.raises(ValueError, match="lists the same parameter twice"):
        optim.SGD([p, p])
    opt = optim.SGD([p])
    with pytest.raises(ValueError, match="already in another parameter group"):
        opt.add_param_group({"params": [p]})
    with pytest.raises(ValueError, match="not a leaf"):
        optim.SGD([p * 2])
    with pytest.raises(TypeError, match="SGD: lr must be a real number, got str"):
        optim.SGD([p], lr="0.1")


# ---- schedules -----------------------------------------------------------------------------------
@st.composite
def warmup_schedules(draw):
    warmup = draw(st.integers(0, 50))
    total = draw(st.integers(warmup + 1, warmup + 200))
    return warmup, total, draw(finite(0, 1)), draw(finite(1e-6, 10)), draw(st.integers(0, 300))


@given(warmup_schedules())
def test_linear_warmup_decay_is_piecewise_linear(case):
    warmup, total, ratio, base, step = case
    knots_x, knots_y = [0, total], [base, ratio * base]
    if warmup > 0:
        knots_x, knots_y = [0, warmup, total], [0.0, base, ratio * base]
    expected = np.interp(step, knots_x, knots_y)  # holds ratio * base beyond total
    assert optim.linear_warmup_decay_lr(step, base, warmup, total, ratio) == pytest.approx(
        expected, rel=1e-12, abs=1e-15)


@given(warmup_schedules())
def test_cosine_warmup_decay_formula(case):
    warmup, total, ratio, base, step = case
    if step < warmup:
        expected = base * step / warmup
    else:
        progress = min(step, total) - warmup
        expected = base * (ratio + (1 - ratio)
                           * math.cos(math.pi / 2 * progress / (total - warmup)) ** 2)
    assert optim.cosine_warmup_decay_lr(step, base, warmup, total, ratio) == pytest.approx(
        expected, rel=1e-12, abs=1e-15)


@given(step=st.integers(0, 10_000), d_model=st.integers(1, 2048), warmup=st.integers(1, 5000),
       factor=finite(1e-3, 10))
def test_noam_formula(step, d_model, warmup, factor):
    # Vaswani et al. eq. 3: linear ramp up to `warmup`, then 1/sqrt(step).
    if step <= warmup:
        expected = factor * step / (math.sqrt(d_model) * warmup ** 1.5)
    else:
        expected = factor / math.sqrt(d_model * step)
    assert optim.noam_lr(step, d_model, warmup, factor) == pytest.approx(expected, rel=1e-12)


def test_noam_peaks_at_warmup():
    lrs = [optim.noam_lr(s, 512, 4000) for s in range(1, 20000, 7)]
    peak = int(np.argmax(lrs)) * 7 + 1
    assert abs(peak - 4000) <= 7
    assert max(lrs) == pytest.approx(1 / math.sqrt(512 * 4000), rel=1e-3)


def test_constant_lr():
    assert optim.constant_lr(123, 0.25) == 0.25


SCHEDULERS = {
    "constant": (lambda o: optim.ConstantLR(o), lambda s, b: optim.constant_lr(s, b)),
    "linear": (lambda o: optim.LinearWarmupDecayLR(o, 3, 10, 0.1),
               lambda s, b: optim.linear_warmup_decay_lr(s, b, 3, 10, 0.1)),
    "cosine": (lambda o: optim.CosineWarmupDecayLR(o, 2, 8),
               lambda s, b: optim.cosine_warmup_decay_lr(s, b, 2, 8)),
    "noam": (lambda o: optim.NoamLR(o, 64, 4, factor=2.0),
             lambda s, b: optim.noam_lr(s, 64, 4, 2.0)),
    "lambda": (lambda o: optim.LambdaLR(o, lambda s: 0.9 ** s),
               lambda s, b: b * 0.9 ** s),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_sets_group_lrs_and_round_trips(name):
    make, formula = SCHEDULERS[name]
    params = [make_param(np.ones(2)), make_param(np.ones(1))]
    opt = optim.SGD([{"params": params[:1]}, {"params": params[1:], "lr": 0.5}], lr=0.1)
    sched = make(opt)
    seen = []
    for step in range(12):
        expected = [formula(step, 0.1), formula(step, 0.5)]
        assert sched.get_last_lr() == pytest.approx(expected, rel=1e-12)
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(expected, rel=1e-12)
        seen.append(sched.get_last_lr())
        if step == 5:
            saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
        sched.step()
    params2 = [make_param(np.ones(2)), make_param(np.ones(1))]
    opt2 = optim.SGD([{"params": params2[:1]}, {"params": params2[1:], "lr": 0.5}], lr=0.1)
    opt2.load_state_dict(saved_opt)
    sched2 = make(opt2)
    sched2.load_state_dict(saved_sched)
    assert sched2.get_last_lr() == pytest.approx(seen[5], rel=1e-12)
    for step in range(6, 12):
        sched2.step()
        assert sched2.get_last_lr() == pytest.approx(seen[step], rel=1e-12)


def test_schedule_errors():
    with pytest.raises(ValueError, match=r"noam_lr: invalid warmup_steps=0"):
        optim.noam_lr(1, 512, 0)
    with pytest.raises(ValueError, match=r"noam_lr: invalid step=-1"):
        optim.noam_lr(-1, 512, 10)
    with pytest.raises(ValueError, match=r"cosine_warmup_decay_lr: invalid min_lr_ratio=1\.5"):
        optim.cosine_warmup_decay_lr(1, 0.1, 1, 10, 1.5)
    opt = optim.SGD([make_param(np.ones(2))])
    with pytest.raises(ValueError, match=r"LinearWarmupDecayLR: invalid total_steps=5"):
        optim.LinearWarmupDecayLR(opt, warmup_steps=10, total_steps=5)
    with pytest.raises(ValueError, match="has no 'initial_lr'"):
        optim.ConstantLR(opt, last_step=3)
    with pytest.raises(ValueError, match="got 2 lr_lambdas for 1 parameter groups"):
        optim.LambdaLR(opt, [lambda s: 1.0] * 2)


# ---- clipping ------------------------------------------------------------------------------------
@st.composite
def gradient_lists(draw):
    n = draw(st.integers(1, 4))
    return [draw(hnp.arrays(np.float64, draw(shapes), elements=finite(-100, 100)))
            for _ in range(n)]


@given(gradient_lists(), finite(0, 50), st.sampled_from([1.0, 2.0, 3.5, math.inf]))
def test_clip_grad_norm_matches_formula(grads, max_norm, norm_type):
    params = [make_param(np.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        set_grad(p, g)
    everything = np.concatenate([g.ravel() for g in grads])
    if norm_type == math.inf:
        total = np.abs(everything).max()
    else:
        total = np.sum(np.abs(everything) ** norm_type) ** (1 / norm_type)
    returned = optim.clip_grad_norm_(params + [make_param(np.ones(2))], max_norm, norm_type)
    assert isinstance(returned, float)
    assert returned == pytest.approx(total, rel=1e-10, abs=1e-12)
    scale = min(1.0, max_norm / (total + 1e-6))
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-10, atol=1e-12)


def test_clip_grad_norm_with_inf():
    def with_inf():
        p, q = make_param(np.zeros(3)), make_param(np.zeros(2))
        set_grad(p, [1.0, np.inf, -2.0])
        set_grad(q, [3.0, 4.0])
        return p, q

    p, q = with_inf()
    with pytest.raises(RuntimeError, match="total norm of order 2.0 of the gradients is inf"):
        optim.clip_grad_norm_([p, q], 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(q.grad.numpy(), [3.0, 4.0])  # untouched by the refusal
    assert optim.clip_grad_norm_(with_inf(), 1.0, norm_type="inf") == math.inf
    p, q = with_inf()
    assert optim.clip_grad_norm_([p, q], 1.0) == math.inf
    np.testing.assert_array_equal(q.grad.numpy(), [0.0, 0.0])  # as PyTorch: scaled by 0
    assert np.isnan(p.grad.numpy()[1])


def test_clip_grad_norm_leaves_small_gradients_alone_and_takes_one_tensor():
    p = make_param(np.zeros(2))
    set_grad(p, [0.3, 0.4])
    assert optim.clip_grad_norm_(p, 1.0) == pytest.approx(0.5)
    np.testing.assert_array_equal(p.grad.numpy(), [0.3, 0.4])
    assert optim.clip_grad_norm_([make_param(np.ones(2))], 1.0) == 0.0
    with pytest.raises(ValueError, match=r"clip_grad_norm_: invalid max_norm=-1"):
        optim.clip_grad_norm_(p, -1)


@given(gradient_lists(), finite(0, 50))
def test_clip_grad_value_matches_formula(grads, value):
    params = [make_param(np.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        set_grad(p, g)
    optim.clip_grad_value_(params, value)
    for p, g in zip(params, grads):
        np.testing.assert_array_equal(p.grad.numpy(), np.minimum(np.maximum(g, -value), value))
    with pytest.raises(ValueError, match=r"clip_grad_value_: invalid clip_value=-0\.5"):
        optim.clip_grad_value_(params, -0.5)


# ---- against PyTorch -----------------------------------------------------------------------------
def torch_trajectory(torch, make_torch_optimizer, starts, grads):
    params = [torch.nn.Parameter(torch.tensor(s, dtype=torch.float64)) for s in starts]
    opt = make_torch_optimizer(params)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return [p.detach().numpy() for p in params]


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    for name in ("SGD", "Adam", "AdamW"):  # warm up: the first torch step imports lazily
        torch_trajectory(torch, getattr(torch.optim, name), [np.zeros(1)], [[np.ones(1)]])
    return torch


@given(seed=st.integers(0, 2**32 - 1), lr=finite(1e-4, 1), momentum=finite(0, 0.99),
       beta1=finite(0, 0.99), beta2=finite(0.5, 0.9999), weight_decay=finite(0, 0.3),
       flag=st.booleans(), which=st.sampled_from(["SGD", "Adam", "AdamW"]))
def test_optimizers_match_pytorch(torch, seed, lr, momentum, beta1, beta2, weight_decay, flag,
                                  which):
    rng = np.random.default_rng(seed)
    starts = [rng.normal(size=(3, 4)), rng.normal(size=7)]
    grads = [[rng.normal(size=(3, 4)), rng.normal(size=7)] for _ in range(5)]
    if which == "SGD":
        kwargs = dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                      nesterov=flag and momentum > 0)
    else:
        kwargs = dict(lr=lr, betas=(beta1, beta2), eps=1e-8, weight_decay=weight_decay,
                      amsgrad=flag)
    ours = [make_param(s) for s in starts]
    run(getattr(optim, which)(ours, **kwargs), ours, grads)
    theirs = torch_trajectory(torch, lambda ps: getattr(torch.optim, which)(ps, **kwargs),
                              starts, grads)
    for p, expected in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), expected, **TOL)


@given(grads=gradient_lists(), max_norm=finite(0, 50),
       norm_type=st.sampled_from([1.0, 2.0, 3.5, math.inf]))
def test_clip_grad_norm_matches_pytorch(torch, grads, max_norm, norm_type):
    params = [make_param(np.zeros_like(g)) for g in grads]
    tparams = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, t, g in zip(params, tparams, grads):
        set_grad(p, g)
        t.grad = torch.tensor(g)
    ours = optim.clip_grad_norm_(params, max_norm, norm_type)
    theirs = torch.nn.utils.clip_grad_norm_(tparams, max_norm, norm_type)
    assert ours == pytest.approx(float(theirs), rel=1e-10, abs=1e-12)
    for p, t in zip(params, tparams):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)
