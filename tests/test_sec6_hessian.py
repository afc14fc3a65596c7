"""Section VI-C.2: Q-BERT (Shen et al., 2020; eq 59-60) of ``minitorch_nlp.compress.hessian``.

A small classifier W_c(tanh(W_1(mean(W_e x)))) written with the library and, differently, in
autograd.numpy: the loss (eq 59) and the Hessian-vector products (eq 60, second-order autograd)
against HIPS autograd's; power iteration's eigenvalue against NumPy's eigvalsh of the explicit
Hessian; Hutchinson's trace within its own standard deviation; per-layer sensitivities of a BERT
classifier, the bit allocation and group-wise quantisation; errors."""
from __future__ import annotations

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings

import minitorch_nlp as mt
from minitorch_nlp.compress import hessian as Hs
from minitorch_nlp.models.bert import BertConfig, BertForSequenceClassification
from minitorch_nlp.nn import Embedding, Linear, Module
from minitorch_nlp.nn.outputs import ModelOutput
from minitorch_nlp.testing import strategies as S

pytestmark = pytest.mark.sec6

VOCAB, D, HIDDEN, CLASSES = 5, 3, 3, 2


class Classifier(Module):
    def __init__(self):
        super().__init__()
        self.embed = Embedding(VOCAB, D)
        self.layer = Linear(D, HIDDEN)
        self.classifier = Linear(HIDDEN, CLASSES)

    def forward(self, ids):
        pooled = self.embed(ids).mean(axis=1)
        return ModelOutput(logits=self.classifier(self.layer(pooled).tanh()))


def make(seed):
    mt.manual_seed(seed)
    model = Classifier().to(mt.float64)
    rng = np.random.default_rng(seed)
    batches = [(rng.integers(0, VOCAB, (3, 4)), rng.integers(0, CLASSES, 3)) for _ in range(2)]
    return model, batches


def reference_loss(flat, batches):
    """Eq 59 written out: one-hot embedding sums, explicit log-sum-exp, example by example."""
    sizes = [VOCAB * D, HIDDEN * D, HIDDEN, CLASSES * HIDDEN, CLASSES]
    parts, start = [], 0
    for size in sizes:
        parts.append(flat[start:start + size])
        start += size
    w_e = anp.reshape(parts[0], (VOCAB, D))
    w_1, b_1 = anp.reshape(parts[1], (HIDDEN, D)), parts[2]
    w_c, b_c = anp.reshape(parts[3], (CLASSES, HIDDEN)), parts[4]
    total = 0.0
    for ids, labels in batches:
        for row, label in zip(ids, labels):
            one_hot = np.eye(VOCAB)[row]                       # (time, vocab)
            pooled = anp.sum(anp.dot(one_hot, w_e), axis=0) / len(row)
            scores = anp.dot(w_c, anp.tanh(anp.dot(w_1, pooled) + b_1)) + b_c
            total = total + anp.log(anp.sum(anp.exp(scores))) - scores[label]
    return total


def params_of(model):
    return [model.embed.weight, model.layer.weight, model.layer.bias, model.classifier.weight,
            model.classifier.bias]


def flat(tensors):
    return np.concatenate([t.numpy().ravel() for t in tensors])


@pytest.mark.eq(59)
@pytest.mark.eq(60)
@settings(max_examples=10)
@given(S.seeds())
def test_eq60_hessian_vector_product_matches_autograd(seed):
    model, batches = make(seed)
    params = params_of(model)
    loss = Hs.classification_loss(model, batches)
    theta = flat(params)
    assert loss.item() == pytest.approx(reference_loss(theta, batches), rel=1e-12)
    rng = np.random.default_rng(seed + 1)
    vectors = [mt.tensor(rng.standard_normal(p.shape)) for p in params]
    product = Hs.hessian_vector_product(loss, params, vectors)
    v = flat(vectors)
    expected = autograd.grad(lambda t: anp.dot(autograd.grad(reference_loss)(t, batches), v))(
        theta)
    np.testing.assert_allclose(flat(product), expected, rtol=1e-7, atol=1e-10)


def explicit_hessian(model, batches):
    return autograd.hessian(reference_loss)(flat(params_of(model)), batches)


@pytest.mark.eq(60)
def test_power_iteration_finds_the_top_eigenvalue_of_the_explicit_hessian():
    model, batches = make(3)
    eigenvalues = np.linalg.eigvalsh(explicit_hessian(model, batches))
    top = eigenvalues[np.argmax(np.abs(eigenvalues))]
    found, vector = Hs.top_eigenvalue(lambda: Hs.classification_loss(model, batches),
                                      params_of(model), iterations=500, tol=1e-12)
    assert found == pytest.approx(top, rel=1e-6)
    assert np.linalg.norm(flat(vector)) == pytest.approx(1.0)


@pytest.mark.eq(60)
def test_hutchinson_trace_is_within_four_standard_deviations():
    model, batches = make(4)
    hessian = explicit_hessian(model, batches)
    samples = 200
    estimate = Hs.hutchinson_trace(lambda: Hs.classification_loss(model, batches),
                                   params_of(model), samples=samples)
    variance = 2 * (np.sum(hessian ** 2) - np.sum(np.diag(hessian) ** 2))   # Rademacher v
    assert abs(estimate - np.trace(hessian)) < 4 * np.sqrt(variance / samples)


@pytest.mark.slow
def test_each_bert_layer_gets_a_sensitivity_and_the_sensitive_layers_more_bits():
    mt.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=20, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=12, max_position_embeddings=6, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)).to(mt.float64)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(1, 20, (4, 6)), rng.integers(0, 2, 4)) for _ in range(3)]
    eigenvalues = Hs.layer_eigenvalues(model, batches, iterations=30, tol=1e-6)
    assert eigenvalues.shape == (3, 3) and np.all(np.isfinite(eigenvalues))
    layer = model.bert.encoder.layers[1]
    alone, _ = Hs.top_eigenvalue(lambda: Hs.classification_loss(model, batches[2:]),
                                 list(layer.parameters()), iterations=30, tol=1e-6)
    assert eigenvalues[1, 2] == pytest.approx(alone)
    sensitivities = Hs.layer_sensitivities(model, batches, iterations=30, tol=1e-6)
    for row, omega in zip(eigenvalues, sensitivities):     # Q-BERT: |mean| + std over batches
        assert omega == pytest.approx(abs(np.mean(row)) + np.std(row))
    assert Hs.layer_sensitivities(model, batches[2:], iterations=30, tol=1e-6)[1] == \
        pytest.approx(abs(alone))
    with pytest.raises(ValueError, match="layer_eigenvalues: batches is empty"):
        Hs.layer_sensitivities(model, [])
    bits = Hs.allocate_bits(sensitivities, (4, 8, 2))
    assert sorted(bits) == [2, 4, 8]
    assert bits[int(np.argmax(sensitivities))] == 8 and bits[int(np.argmin(sensitivities))] == 2


def test_allocate_bits_splits_the_sorted_layers_into_equal_groups():
    assert Hs.allocate_bits([0.1, 5, 2, 0.3, 9, 1]) == [2, 8, 4, 2, 8, 4]
    assert Hs.allocate_bits([3.0, 1.0], (4, 8)) == [8, 4]
    with pytest.raises(ValueError, match=r"bits must be an integer in \[2, 16\]"):
        Hs.allocate_bits([1.0], (4, 17))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        Hs.allocate_bits([])


@pytest.mark.eq(61)
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_wise_quantisation_keeps_each_group_within_half_its_own_step(groups):
    mt.manual_seed(0)
    layer = Linear(4, 6).to(mt.float64)
    original = layer.weight.numpy().copy()
    original[:3] *= 10                                          # groups of very different range
    layer.weight.data[...] = original
    Hs.quantize_weights_(layer, bits=4, groups=groups)
    quantised = layer.weight.numpy()
    for rows in np.split(np.arange(6), groups):
        scale = 7 / np.abs(original[rows]).max()
        levels = quantised[rows] * scale
        np.testing.assert_allclose(levels, np.round(levels), atol=1e-9)
        assert np.abs(quantised[rows] - original[rows]).max() <= 0.5 / scale + 1e-12
    assert layer.bias is not None


def test_hessian_errors():
    model, batches = make(0)
    params = params_of(model)
    loss = Hs.classification_loss(model, batches)
    with pytest.raises(ValueError, match="2 vectors for 5 parameters"):
        Hs.hessian_vector_product(loss, params, [mt.ones(1), mt.ones(1)])
    with pytest.raises(ValueError, match=r"a vector of shape \(1,\) for a parameter of shape"):
        Hs.hessian_vector_product(loss, params[:1], [mt.ones(1)])
    with pytest.raises(ValueError, match="batches is empty"):
        Hs.classification_loss(model, [])
    with pytest.raises(ValueError, match=r"bits must be an integer in \[2, 16\]"):
        Hs.quantize_weights_(model, bits=1)
