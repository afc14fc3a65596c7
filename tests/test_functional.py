"""``minitorch_nlp.functional``: each function's forward against an independent NumPy formula and
its gradient against HIPS autograd of that formula (float64, hypothesis-drawn inputs, a random
cotangent), plus PyTorch where PyTorch defines the semantics we copy (cross-entropy with label
smoothing and ignore_index, KL divergence, BCE with logits, layer norm)."""
from __future__ import annotations

import math

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import make_vjp
from autograd.scipy.special import erf as anp_erf
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp.testing import strategies as S

TOL = dict(rtol=1e-7, atol=1e-10)

# autograd warns when a drawn case makes the output constant (every target ignored): expected
pytestmark = pytest.mark.filterwarnings("ignore:Output seems independent of input")


# ---- helpers -------------------------------------------------------------------------------------
def engine_vjp(fn, arrays, cotangent):
    """fn(*tensors) and d<cotangent, fn>/d(each array), all float64."""
    xs = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in arrays]
    out = fn(*xs)
    grads = mt.grad(out, xs, grad_outputs=mt.tensor(cotangent, dtype=mt.float64),
                    allow_unused=True)
    return out.numpy(), [None if g is None else g.numpy() for g in grads]


def reference_vjp(fn, arrays, cotangent):
    grads = []
    value = None
    for i in range(len(arrays)):
        vjp, value = make_vjp(fn, argnum=i)(*arrays)
        grads.append(vjp(cotangent))
    return np.asarray(value), grads


def assert_matches_reference(fn, reference, arrays, seed, tol=TOL):
    """Forward values and vector-Jacobian products of the engine equal the reference's."""
    _, ref_value = make_vjp(reference, argnum=0)(*arrays)
    cotangent = np.random.default_rng(seed).standard_normal(np.shape(ref_value))
    value, grads = engine_vjp(fn, arrays, cotangent)
    ref_value, ref_grads = reference_vjp(reference, arrays, cotangent)
    np.testing.assert_allclose(value, ref_value, **tol)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        np.testing.assert_allclose(g if g is not None else 0.0 * r, r, **tol,
                                   err_msg=f"gradient of input {i}")


def torch_or_skip():
    return pytest.importorskip("torch")


def f64(x):
    return mt.tensor(x, dtype=mt.float64)


# ---- activations ---------------------------------------------------------------------------------
def np_gelu(x):
    return 0.5 * x * (1.0 + anp_erf(x / np.sqrt(2.0)))


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + anp.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {
    "relu": (F.relu, lambda x: x * (x > 0)),
    "tanh": (F.tanh, lambda x: (anp.exp(x) - anp.exp(-x)) / (anp.exp(x) + anp.exp(-x))),
    "sigmoid": (F.sigmoid, lambda x: 1.0 / (1.0 + anp.exp(-x))),
    "softplus": (F.softplus, lambda x: anp.log(1.0 + anp.exp(x))),
    "gelu": (F.gelu, np_gelu),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), np_gelu_tanh),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@given(x=S.distinct_arrays(S.shapes(max_dims=2)), seed=S.seeds())
def test_activation_matches_formula(name, x, seed):
    fn, reference = ACTIVATIONS[name]
    assert_matches_reference(fn, reference, [x], seed)


def test_activations_accept_arrays_and_are_stable_far_out():
    x = np.array([-1e4, -50.0, 0.0, 50.0, 1e4], dtype=np.float32)
    np.testing.assert_allclose(F.sigmoid(x).numpy(), [0, 0, 0.5, 1, 1], atol=1e-7)
    np.testing.assert_allclose(F.softplus(x).numpy(), [0, np.exp(-50.0), np.log(2), 50, 1e4],
                               rtol=1e-6)
    np.testing.assert_allclose(F.relu(x).numpy(), [0, 0, 0, 50, 1e4])
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        F.gelu(x, approximate="fast")


# ---- softmax and log-softmax ---------------------------------------------------------------------
def np_softmax(x, axis):
    e = anp.exp(x - anp.max(x, axis=axis, keepdims=True))
    return e / anp.sum(e, axis=axis, keepdims=True)


def np_log_softmax(x, axis):
    return x - anp.log(anp.sum(anp.exp(x), axis=axis, keepdims=True))


@st.composite
def arrays_and_axis(draw, min_dims=1, max_dims=3):
    x = draw(S.maybe_noncontiguous(S.arrays(S.shapes(min_dims=min_dims, max_dims=max_dims))))
    return x, draw(S.axis(x.ndim))


@pytest.mark.eq(35)
@pytest.mark.sec6
@given(case=arrays_and_axis(), seed=S.seeds())
def test_softmax_matches_formula(case, seed):
    x, axis = case
    assert_matches_reference(lambda t: F.softmax(t, axis=axis), lambda a: np_softmax(a, axis),
                             [x], seed)


@pytest.mark.eq(35)
@pytest.mark.sec6
@given(case=arrays_and_axis(), seed=S.seeds())
def test_log_softmax_matches_formula(case, seed):
    x, axis = case
    assert_matches_reference(lambda t: F.log_softmax(t, dim=axis),
                             lambda a: np_log_softmax(a, axis), [x], seed)


@pytest.mark.eq(35, 38)
@pytest.mark.sec6
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_and_log_softmax_are_stable_for_huge_logits(dtype):
    logits = np.array([[1e4, 0.0, -1e4], [1e4, 1e4 - 1.0, 1e4 - 2.0]], dtype=dtype)
    x = mt.tensor(logits, dtype=dtype, requires_grad=True)
    log_p = F.log_softmax(x)
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(log_p.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(F.softmax(x).numpy(), np.exp(expected), rtol=1e-6, atol=1e-30)
    log_p[:, 0].sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(x.grad.numpy(), np.eye(3)[[0, 0]] - np.exp(expected), rtol=1e-6,
                               atol=1e-7)


# ---- linear --------------------------------------------------------------------------------------
@st.composite
def linear_cases(draw):
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    n_in, n_out = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    x = draw(S.maybe_noncontiguous(S.arrays(lead + (n_in,))))
    weight = draw(S.maybe_noncontiguous(S.arrays((n_out, n_in))))
    bias = draw(S.arrays((n_out,)))
    return x, weight, bias


@given(case=linear_cases(), seed=S.seeds())
def test_linear_matches_formula(case, seed):
    x, weight, bias = case
    assert_matches_reference(F.linear, lambda a, w, b: anp.dot(a, w.T) + b, [x, weight, bias],
                             seed)
    assert_matches_reference(F.linear, lambda a, w: anp.dot(a, w.T), [x, weight], seed)


@given(case=linear_cases(), seed=S.seeds())
def test_linear_second_derivatives(case, seed):
    """d/dx <v, d/dW sum(tanh(linear(x, W, b)))>, the Hessian-vector product pattern."""
    x, weight, bias = case
    v = np.random.default_rng(seed).standard_normal(weight.shape)

    def reference(a, w):
        def loss(w_):
            return anp.sum(anp.tanh(anp.dot(a, w_.T) + bias))
        vjp, _ = make_vjp(loss)(w)
        return anp.sum(vjp(1.0) * v)

    xs = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in (x, weight)]
    (g_w,) = mt.grad(F.linear(xs[0], xs[1], f64(bias)).tanh().sum(), [xs[1]], create_graph=True)
    hvp = mt.grad((g_w * f64(v)).sum(), xs)
    for i, h in enumerate(hvp):
        vjp, _ = make_vjp(reference, argnum=i)(x, weight)
        np.testing.assert_allclose(h.numpy(), vjp(1.0), **TOL)


def test_linear_shape_errors_name_the_shapes():
    x, w = mt.zeros(2, 5), mt.zeros(3, 4)
    with pytest.raises(ValueError, match=r"input of shape \(2, 5\) does not end with "
                                         r"in_features = 4 of the weight of shape \(3, 4\)"):
        F.linear(x, w)
    with pytest.raises(ValueError, match=r"bias of shape \(4,\) does not match out_features = 3"):
        F.linear(mt.zeros(2, 4), w, mt.zeros(4))
    with pytest.raises(ValueError, match=r"weight must be 2-D"):
        F.linear(x, mt.zeros(5))


def test_linear_weight_gradient_is_contiguous_in_the_weights_layout():
    w = mt.randn(3, 4, requires_grad=True)
    F.linear(mt.randn(2, 5, 4), w).sum().backward()
    assert w.grad.shape == (3, 4) and w.grad.data.flags.c_contiguous


# ---- embedding -----------------------------------------------------------------------------------
@given(data=st.data(), seed=S.seeds())
def test_embedding_matches_indexing(data, seed):
    n, dim = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 4))
    weight = data.draw(S.arrays((n, dim)))
    ids = data.draw(hnp.arrays(np.int64, S.shapes(max_dims=2), elements=st.integers(0, n - 1)))
    assert_matches_reference(lambda w: F.embedding(ids, w), lambda w: w[ids], [weight], seed)


@given(batch=S.token_batches(vocab_size=7, pad_id=0), seed=S.seeds())
def test_embedding_padding_positions_give_no_gradient(batch, seed):
    weight = np.random.default_rng(seed).standard_normal((7, 3))
    counted = (batch.ids != 0)[..., None]
    assert_matches_reference(lambda w: F.embedding(batch.ids, w, padding_idx=0),
                             lambda w: anp.where(counted, w[batch.ids], anp_stop(w)[batch.ids]),
                             [weight], seed)


def anp_stop(w):
    """The value of ``w`` without its gradient, for the reference."""
    from autograd.tracer import getval
    return getval(w)


def test_embedding_errors():
    weight = mt.zeros(10, 3)
    with pytest.raises(ValueError, match=r"token id 10 is outside the vocabulary \[0, 10\)"):
        F.embedding(mt.tensor([1, 10, 2]), weight)
    with pytest.raises(ValueError, match=r"token id -1 is outside the vocabulary \[0, 10\)"):
        F.embedding([[-1, 3]], weight)
    with pytest.raises(TypeError, match="ids must be an integer tensor, got dtype float32"):
        F.embedding(mt.tensor([1.0]), weight)
    with pytest.raises(ValueError, match=r"padding_idx 10 is outside \[-10, 10\)"):
        F.embedding(mt.tensor([1]), weight, padding_idx=10)


# ---- layer norm ----------------------------------------------------------------------------------
def np_layer_norm(x, weight, bias, eps, axes):
    mean = anp.mean(x, axis=axes, keepdims=True)
    var = anp.mean((x - mean) ** 2, axis=axes, keepdims=True)
    return (x - mean) / anp.sqrt(var + eps) * weight + bias


@st.composite
def layer_norm_cases(draw):
    normalized = draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=2, max_side=4))
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    x = draw(S.maybe_noncontiguous(S.distinct_arrays(lead + normalized)))
    weight = draw(S.arrays(normalized))
    bias = draw(S.arrays(normalized))
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    return x, weight, bias, eps, normalized


@given(case=layer_norm_cases(), seed=S.seeds())
def test_layer_norm_matches_formula(case, seed):
    x, weight, bias, eps, normalized = case
    axes = tuple(range(-len(normalized), 0))
    assert_matches_reference(lambda a, w, b: F.layer_norm(a, normalized, w, b, eps),
                             lambda a, w, b: np_layer_norm(a, w, b, eps, axes),
                             [x, weight, bias], seed, tol=dict(rtol=1e-6, atol=1e-9))
    assert_matches_reference(lambda a: F.layer_norm(a, normalized, eps=eps),
                             lambda a: np_layer_norm(a, 1.0, 0.0, eps, axes), [x], seed,
                             tol=dict(rtol=1e-6, atol=1e-9))


def test_layer_norm_matches_torch():
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3, 8)), rng.standard_normal(8), rng.standard_normal(8)
    g = rng.standard_normal((2, 3, 8))
    ours = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in (x, w, b)]
    F.layer_norm(ours[0], 8, ours[1], ours[2]).backward(f64(g))
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    out = torch.nn.functional.layer_norm(theirs[0], (8,), theirs[1], theirs[2])
    out.backward(torch.tensor(g))
    np.testing.assert_allclose(F.layer_norm(f64(x), 8, f64(w), f64(b)).numpy(),
                               out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_layer_norm_shape_errors():
    with pytest.raises(ValueError, match=r"input of shape \(2, 5\) does not end with "
                                         r"normalized_shape \(4,\)"):
        F.layer_norm(mt.zeros(2, 5), 4)
    with pytest.raises(ValueError, match=r"weight of shape \(3,\) differs from normalized_shape"):
        F.layer_norm(mt.zeros(2, 4), 4, weight=mt.ones(3))
    with pytest.raises(ValueError, match=r"does not end with normalized_shape \(2, 3, 4\)"):
        F.layer_norm(mt.zeros(3, 4), (2, 3, 4))


# ---- dropout -------------------------------------------------------------------------------------
@pytest.mark.eq(11, 12)   # attention's dropout (eq 11-12) is this dropout
@pytest.mark.sec4
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_statistics(p):
    n = 200_000
    y = F.dropout(mt.ones(n), p).numpy()
    dropped = float((y == 0).mean())
    # the fraction dropped is Binomial(n, p) / n: 5 standard deviations
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(y[y != 0], 1 / (1 - p), rtol=1e-6)
    assert abs(y.mean() - 1.0) < 5 * math.sqrt(p / (1 - p) / n)


@pytest.mark.eq(11, 12)   # attention's dropout (eq 11-12) is this dropout
@pytest.mark.sec4
def test_dropout_gradient_is_the_mask():
    x = mt.randn(50, 40, requires_grad=True)
    y = F.dropout(x, 0.3)
    y.sum().backward()
    scale = np.where(y.numpy() == 0, 0.0, 1 / 0.7)
    np.testing.assert_allclose(x.grad.numpy(), scale, rtol=1e-6)


@pytest.mark.eq(11, 12)
@pytest.mark.sec4
def test_dropout_edge_cases_and_reproducibility():
    x = mt.randn(4, 5, requires_grad=True)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    zeroed = F.dropout(x, 1.0)
    assert (zeroed.numpy() == 0).all() and zeroed.requires_grad
    a = F.dropout(x, 0.5, generator=mt.Generator(3)).numpy()
    b = F.dropout(x, 0.5, generator=mt.Generator(3)).numpy()
    np.testing.assert_array_equal(a, b)
    mt.manual_seed(7)
    c = F.dropout(x, 0.5).numpy()
    mt.manual_seed(7)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), c)
    for bad in (-0.1, 1.5, "0.5", None):
        with pytest.raises(ValueError, match=r"dropout: the drop probability p must be a number "
                                             r"in \[0, 1\]"):
            F.dropout(x, bad)


# ---- cross-entropy and NLL -----------------------------------------------------------------------
def ce_reference(logits, target, weight=None, ignore_index=-100, smoothing=0.0, reduction="mean",
                 log_probs_given=False):
    """PyTorch's definition, one position at a time (the class axis is last)."""
    num_classes = logits.shape[-1]
    rows = anp.reshape(logits, (-1, num_classes))
    ids = np.asarray(target).reshape(-1)
    w = np.ones(num_classes) if weight is None else weight
    losses, denominator = [], 0.0
    for i in range(rows.shape[0]):
        if ids[i] == ignore_index:
            losses.append(0.0 * rows[i, 0])
            continue
        row = rows[i]
        log_p = row if log_probs_given else row - anp.log(anp.sum(anp.exp(row)))
        nll = -w[ids[i]] * log_p[ids[i]]
        uniform = -anp.sum(w * log_p) / num_classes
        losses.append((1 - smoothing) * nll + smoothing * uniform)
        denominator += w[ids[i]]
    per_position = anp.reshape(anp.stack(losses), np.shape(target))
    if reduction == "none":
        return per_position
    total = anp.sum(per_position)
    if reduction == "sum":
        return total
    return total / denominator if denominator else total * 0.0


@st.composite
def classification_cases(draw, ignore_index=-100):
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4))
    num_classes = draw(st.integers(1, 5))
    logits = draw(S.arrays(lead + (num_classes,), -5.0, 5.0))
    target = draw(hnp.arrays(np.int64, lead, elements=st.integers(0, num_classes - 1)))
    ignored = draw(hnp.arrays(np.bool_, lead))
    target = np.where(ignored, ignore_index, target)
    weight = draw(st.none() | S.positive_arrays((num_classes,)))
    smoothing = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    reduction = draw(st.sampled_from(["mean", "sum", "none"]))
    return logits, target, weight, smoothing, reduction


@given(case=classification_cases(), ignore_index=st.sampled_from([-100, 0, 2]), seed=S.seeds())
def test_cross_entropy_matches_reference(case, ignore_index, seed):
    logits, target, weight, smoothing, reduction = case
    target = np.where(target == -100, ignore_index, target)
    kwargs = dict(weight=weight, ignore_index=ignore_index, reduction=reduction)
    assert_matches_reference(
        lambda x: F.cross_entropy(x, target, label_smoothing=smoothing, **kwargs),
        lambda x: ce_reference(x, target, smoothing=smoothing, **kwargs), [logits], seed)


@given(case=classification_cases(), seed=S.seeds())
def test_cross_entropy_second_derivatives(case, seed):
    """Hessian-vector products d/dx <v, d loss/dx> (the fused kernel's composite path)."""
    logits, target, weight, smoothing, _ = case
    v = np.random.default_rng(seed).standard_normal(logits.shape)

    def reference(x):
        vjp, _ = make_vjp(lambda y: ce_reference(y, target, weight, smoothing=smoothing))(x)
        return anp.sum(vjp(1.0) * v)

    x = mt.tensor(logits, dtype=mt.float64, requires_grad=True)
    loss = F.cross_entropy(x, target, weight=weight, label_smoothing=smoothing)
    (g,) = mt.grad(loss, [x], create_graph=True)
    (hvp,) = mt.grad((g * f64(v)).sum(), [x], allow_unused=True)
    expected = make_vjp(reference)(logits)[0](1.0)
    np.testing.assert_allclose(0.0 * expected if hvp is None else hvp.numpy(), expected, **TOL)


@given(case=classification_cases(), seed=S.seeds())
def test_nll_loss_matches_reference(case, seed):
    logits, target, weight, _, reduction = case
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    assert_matches_reference(
        lambda x: F.nll_loss(x, target, weight=weight, reduction=reduction),
        lambda x: ce_reference(x, target, weight=weight, reduction=reduction,
                               log_probs_given=True), [log_probs], seed)


@given(case=classification_cases(), seed=S.seeds())
def test_cross_entropy_matches_torch(case, seed):
    torch = torch_or_skip()
    logits, target, weight, smoothing, reduction = case
    num_classes = logits.shape[-1]
    if (target == -100).all() and reduction == "mean":
        return  # PyTorch gives NaN here, we give 0 (tested below)
    cotangent = np.random.default_rng(seed).standard_normal(
        target.shape if reduction == "none" else ())
    value, (grad,) = engine_vjp(
        lambda x: F.cross_entropy(x, target, weight=weight, label_smoothing=smoothing,
                                  reduction=reduction), [logits], cotangent)
    x = torch.tensor(logits.reshape(-1, num_classes), requires_grad=True)
    out = torch.nn.functional.cross_entropy(
        x, torch.tensor(target.reshape(-1)), label_smoothing=smoothing, reduction=reduction,
        weight=None if weight is None else torch.tensor(weight))
    out.backward(torch.tensor(cotangent).reshape(out.shape))
    np.testing.assert_allclose(value, out.detach().numpy().reshape(value.shape), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(grad, x.grad.numpy().reshape(grad.shape), rtol=1e-10, atol=1e-12)


@given(data=st.data(), smoothing=st.sampled_from([0.0, 0.2]), seed=S.seeds())
def test_cross_entropy_with_probability_targets_matches_torch(data, smoothing, seed):
    torch = torch_or_skip()
    n, c = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    logits = data.draw(S.arrays((n, c)))
    target = data.draw(S.positive_arrays((n, c)))
    target /= target.sum(axis=-1, keepdims=True)
    weight = data.draw(st.none() | S.positive_arrays((c,)))
    value, (grad, grad_target) = engine_vjp(
        lambda x, t: F.cross_entropy(x, t, weight=weight, label_smoothing=smoothing),
        [logits, target], 1.0)
    x, t = (torch.tensor(a, requires_grad=True) for a in (logits, target))
    out = torch.nn.functional.cross_entropy(
        x, t, label_smoothing=smoothing, weight=None if weight is None else torch.tensor(weight))
    out.backward()
    np.testing.assert_allclose(value, out.item(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad_target, t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_cross_entropy_all_ignored_is_zero_not_nan():
    logits = mt.randn(3, 4, requires_grad=True)
    loss = F.cross_entropy(logits, mt.tensor([-100, -100, -100]))
    assert loss.item() == 0.0
    loss.backward()
    assert (logits.grad.numpy() == 0).all()
    assert F.cross_entropy(logits, mt.tensor([-100, -100, -100]), label_smoothing=0.3).item() == 0


@pytest.mark.eq(38)
@pytest.mark.sec6
def test_cross_entropy_is_stable_for_huge_logits():
    logits = mt.tensor([[1e4, -1e4, 0.0], [0.0, 1e4, 1e4]], requires_grad=True)
    loss = F.cross_entropy(logits, mt.tensor([1, 2]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [2e4, np.log(2.0)], rtol=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), [[1, -1, 0], [0, 0.5, -0.5]], atol=1e-6)


def test_cross_entropy_errors_name_the_problem():
    logits = mt.zeros(2, 5)
    with pytest.raises(ValueError, match=r"cross_entropy: target holds class id 7, outside "
                                         r"\[0, 5\) \(ignore_index=-100\)"):
        F.cross_entropy(logits, mt.tensor([1, 7]))
    with pytest.raises(ValueError, match=r"class id -1, outside \[0, 5\)"):
        F.cross_entropy(logits, mt.tensor([-1, 0]))
    with pytest.raises(ValueError, match=r"input of shape \(2, 5\) \(classes on the last axis\) "
                                         r"needs a target of shape \(2,\), got \(3,\)"):
        F.cross_entropy(logits, mt.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"logits of shape \(2, 5\) need class ids of shape "
                                         r"\(2,\) or probabilities of shape \(2, 5\), got a float "
                                         r"target of shape \(2, 4\)"):
        F.cross_entropy(logits, mt.zeros(2, 4))
    with pytest.raises(ValueError, match=r"weight of shape \(4,\) must have one entry per class"):
        F.cross_entropy(logits, mt.tensor([0, 1]), weight=np.ones(4))
    with pytest.raises(ValueError, match=r"reduction must be one of"):
        F.cross_entropy(logits, mt.tensor([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\]"):
        F.cross_entropy(logits, mt.tensor([0, 1]), label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"nll_loss: target holds class id 5"):
        F.nll_loss(logits, mt.tensor([5, 0]))
    with pytest.raises(TypeError, match=r"nll_loss: class targets must be integers"):
        F.nll_loss(logits, mt.tensor([0.0, 1.0]))


# ---- regression and distribution losses ----------------------------------------------------------
@given(data=st.data(), reduction=st.sampled_from(["mean", "sum", "none"]), seed=S.seeds())
def test_mse_loss_matches_formula(data, reduction, seed):
    shape = data.draw(S.shapes())
    a, b = data.draw(S.arrays(shape)), data.draw(S.arrays(shape))
    reduce = {"mean": anp.mean, "sum": anp.sum, "none": lambda v: v}[reduction]
    assert_matches_reference(lambda x, y: F.mse_loss(x, y, reduction=reduction),
                             lambda x, y: reduce((x - y) ** 2), [a, b], seed)


def test_loss_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"mse_loss: input of shape \(2, 3\) and target of "
                                         r"shape \(3, 2\) differ"):
        F.mse_loss(mt.zeros(2, 3), mt.zeros(3, 2))
    with pytest.raises(ValueError, match=r"kl_div: input of shape \(2,\) and target of shape "
                                         r"\(3,\) differ"):
        F.kl_div(mt.zeros(2), mt.zeros(3))
    with pytest.raises(ValueError, match=r"binary_cross_entropy_with_logits: logits of shape "
                                         r"\(4,\) and target of shape \(1,\) differ"):
        F.binary_cross_entropy_with_logits(mt.zeros(4), mt.zeros(1))


KL_REDUCTIONS = ["batchmean", "mean", "sum", "none"]


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")
@given(data=st.data(), reduction=st.sampled_from(KL_REDUCTIONS), log_target=st.booleans(),
       seed=S.seeds())
def test_kl_div_matches_torch(data, reduction, log_target, seed):
    torch = torch_or_skip()
    n, c = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    log_q = data.draw(S.arrays((n, c)))
    p = data.draw(S.positive_arrays((n, c)))
    p = p / p.sum(axis=-1, keepdims=True)
    if not log_target:
        p[0, 0] = 0.0  # zero probabilities contribute nothing (0 log 0 = 0)
    target = np.log(p) if log_target else p
    cotangent = np.random.default_rng(seed).standard_normal((n, c) if reduction == "none" else ())
    value, (grad_input, grad_target) = engine_vjp(
        lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=log_target), [log_q, target],
        cotangent)
    x, t = (torch.tensor(a, requires_grad=True) for a in (log_q, target))
    out = torch.nn.functional.kl_div(x, t, reduction=reduction, log_target=log_target)
    out.backward(torch.tensor(cotangent))
    np.testing.assert_allclose(value, out.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad_input, x.grad.numpy(), rtol=1e-10, atol=1e-12)
    if log_target:
        np.testing.assert_allclose(grad_target, t.grad.numpy(), rtol=1e-10, atol=1e-12)


@given(data=st.data(), seed=S.seeds())
def test_kl_div_matches_formula(data, seed):
    n, c = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    log_q = data.draw(S.arrays((n, c)))
    p = data.draw(S.positive_arrays((n, c)))
    p = p / p.sum(axis=-1, keepdims=True)
    assert_matches_reference(lambda x, t: F.kl_div(x, t),
                             lambda x, t: anp.sum(t * (anp.log(t) - x)) / n, [log_q, p], seed)


def test_kl_div_is_zero_for_equal_distributions():
    log_p = F.log_softmax(mt.randn(3, 6, dtype=mt.float64))
    assert abs(F.kl_div(log_p, log_p.exp()).item()) < 1e-12
    assert abs(F.kl_div(log_p, log_p, log_target=True).item()) < 1e-12


@given(data=st.data(), reduction=st.sampled_from(["mean", "sum", "none"]), seed=S.seeds())
def test_bce_with_logits_matches_torch(data, reduction, seed):
    torch = torch_or_skip()
    n, c = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    logits = data.draw(S.arrays((n, c), -20.0, 20.0))
    target = data.draw(S.arrays((n, c), 0.0, 1.0))
    pos_weight = data.draw(st.none() | S.positive_arrays((c,)))
    weight = data.draw(st.none() | S.positive_arrays((n, 1)))
    cotangent = np.random.default_rng(seed).standard_normal((n, c) if reduction == "none" else ())
    value, (grad_x, grad_t) = engine_vjp(
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, weight=weight,
                                                        pos_weight=pos_weight,
                                                        reduction=reduction),
        [logits, target], cotangent)
    x, t = (torch.tensor(a, requires_grad=True) for a in (logits, target))
    out = torch.nn.functional.binary_cross_entropy_with_logits(
        x, t, reduction=reduction, weight=None if weight is None else torch.tensor(weight),
        pos_weight=None if pos_weight is None else torch.tensor(pos_weight))
    out.backward(torch.tensor(cotangent))
    np.testing.assert_allclose(value, out.detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grad_x, x.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grad_t, t.grad.numpy(), rtol=1e-9, atol=1e-12)


@given(x=S.arrays(S.shapes(min_dims=1, max_dims=2)), seed=S.seeds())
def test_bce_with_logits_matches_formula(x, seed):
    t = np.random.default_rng(seed).random(x.shape)
    assert_matches_reference(
        lambda a: F.binary_cross_entropy_with_logits(a, t),
        lambda a: anp.mean(-(t * anp.log(1 / (1 + anp.exp(-a))) +
                             (1 - t) * anp.log(1 - 1 / (1 + anp.exp(-a))))), [x], seed,
        tol=dict(rtol=1e-7, atol=1e-9))


def test_bce_with_logits_weights_must_broadcast():
    with pytest.raises(ValueError, match=r"pos_weight of shape \(3,\) does not broadcast to "
                                         r"logits of shape \(2, 4\)"):
        F.binary_cross_entropy_with_logits(mt.zeros(2, 4), mt.zeros(2, 4), pos_weight=mt.ones(3))
    with pytest.raises(ValueError, match=r"weight of shape \(2, 4, 1\) does not broadcast"):
        F.binary_cross_entropy_with_logits(mt.zeros(2, 4), mt.zeros(2, 4),
                                           weight=mt.ones(2, 4, 1))


def test_bce_with_logits_is_stable_for_huge_logits():
    logits = mt.tensor([1e4, -1e4, 1e4, -1e4, 30.0], requires_grad=True)
    target = mt.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    np.testing.assert_allclose(loss.numpy(), [0, 0, 1e4, 1e4, np.exp(-30.0)], rtol=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), [0, 0, 1, -1, -np.exp(-30.0)], atol=1e-7)


# ---- cosine similarity ---------------------------------------------------------------------------
@given(data=st.data(), seed=S.seeds())
def test_cosine_similarity_matches_formula(data, seed):
    shape_a, shape_b = data.draw(S.broadcastable_shapes(2, min_dims=1))
    a, b = data.draw(S.nonzero_arrays(shape_a)), data.draw(S.nonzero_arrays(shape_b))
    ndim = max(len(shape_a), len(shape_b))
    axis = data.draw(S.axis(ndim))

    def reference(x, y):
        x, y = x * anp.ones(shape_b), y * anp.ones(shape_a)
        dot = anp.sum(x * y, axis=axis)
        return dot / anp.sqrt(anp.sum(x * x, axis=axis) * anp.sum(y * y, axis=axis))

    assert_matches_reference(lambda x, y: F.cosine_similarity(x, y, axis=axis), reference,
                             [a, b], seed)


def test_cosine_similarity_matches_torch_and_handles_zero_vectors():
    torch = torch_or_skip()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((1, 6))
    np.testing.assert_allclose(F.cosine_similarity(f64(a), f64(b)).numpy(),
                               torch.nn.functional.cosine_similarity(
                                   torch.tensor(a), torch.tensor(b), dim=-1).numpy(), rtol=1e-12)
    zero = mt.zeros(2, 3, dtype=mt.float64, requires_grad=True)
    sim = F.cosine_similarity(zero, f64(rng.standard_normal((2, 3))))
    np.testing.assert_array_equal(sim.numpy(), [0.0, 0.0])
    sim.sum().backward()
    assert np.isfinite(zero.grad.numpy()).all()
    with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4,\) do not broadcast"):
        F.cosine_similarity(mt.zeros(2, 3), mt.zeros(4))


def test_one_hot_and_pad_are_the_engines():
    assert F.one_hot is mt.one_hot and F.pad is mt.pad
    np.testing.assert_array_equal(F.one_hot(mt.tensor([2, 0]), 3).numpy(), [[0, 0, 1], [1, 0, 0]])
