"""Q-BERT's Hessian-aware mixed precision (Shen et al., 2020; the survey's section VI-C.2,
eq 59-60).

* ``classification_loss`` is eq 59, L(theta) = sum_i CE(softmax(W_c(W_n(... W_1(W_e(x_i))))), y_i),
  summed over the examples of the given batches;
* ``hessian_vector_product`` is eq 60: H v = d(g^T v)/dW with g = dL/dW, by second-order
  autograd (the gradient recorded with ``create_graph=True``, then differentiated again), never
  forming H;
* ``top_eigenvalue`` finds the largest Hessian eigenvalue of a group of parameters by power
  iteration on H v, and ``hutchinson_trace`` estimates tr(H) = E[v^T H v] with Rademacher v;
  ``layer_eigenvalues`` gives each encoder layer its top eigenvalue on each mini-batch and
  ``layer_sensitivities`` the paper's Omega = |mean| + std of those eigenvalues;
* ``allocate_bits`` gives more bits to the layers with larger eigenvalues, and
  ``quantize_weights_`` quantises a module's Linear weights group-wise (each group of
  consecutive output neurons its own range) to simulate the quantised model, as Q-BERT
  evaluates it.
"""
from __future__ import annotations

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import grad, no_grad, tensor
from ..nn import Linear
from . import pruning
from .quantization import check_bits, fake_quantize, weight_scales

__all__ = ["allocate_bits", "classification_loss", "hessian_vector_product",
           "hutchinson_trace", "layer_eigenvalues", "layer_sensitivities",
           "sensitivities_from_eigenvalues", "quantize_weights_", "top_eigenvalue"]


@cookbook.equation(59)
def classification_loss(model, batches):
    """L(theta) = sum_i CE(softmax(model(x_i)), y_i) (eq 59) over every example of ``batches``,
    pairs (input_ids (batch, time), labels (batch,)) for a sequence classifier (``model(ids)``
    returns ``logits`` (batch, classes): W_c on the encoder's W_n ... W_1 on the embeddings W_e).
    """
    total = None
    for input_ids, labels in batches:
        loss = F.cross_entropy(model(input_ids).logits, labels, reduction="sum")
        total = loss if total is None else total + loss
    if total is None:
        raise ValueError("classification_loss: batches is empty; give at least one batch")
    return total


def _dot(xs, ys):
    total = (xs[0] * ys[0]).sum()
    for x, y in zip(xs[1:], ys[1:]):
        total = total + (x * y).sum()
    return total


@cookbook.equation(60)
def hessian_vector_product(loss, params, vectors):
    r"""H v for the Hessian H of the scalar ``loss`` in ``params`` (a list of tensors) and
    ``vectors`` (one tensor of each parameter's shape), Q-BERT's eq 60::

        d(g^T v)/dW = (dg^T/dW) v + g^T dv/dW = (dg^T/dW) v = H v       (v independent of W)

    by differentiating g^T v, with g recorded by ``grad(..., create_graph=True)``. Returns one
    tensor per parameter (no graph kept)."""
    if len(vectors) != len(params):
        raise ValueError(f"hessian_vector_product: {len(vectors)} vectors for {len(params)} "
                         "parameters; give one vector per parameter")
    for p, v in zip(params, vectors):
        if tuple(v.shape) != tuple(p.shape):
            raise ValueError(f"hessian_vector_product: a vector of shape {tuple(v.shape)} for a "
                             f"parameter of shape {tuple(p.shape)}")
    gradients = grad(loss, params, create_graph=True)
    return [h.detach() for h in grad(_dot(gradients, vectors), params, allow_unused=True)]


def _random_vectors(params, rng, rademacher=False):
    draw = (lambda shape: rng.choice([-1.0, 1.0], size=shape)) if rademacher else \
        (lambda shape: rng.standard_normal(shape))
    return [tensor(draw(tuple(p.shape)), dtype=p.dtype, backend=p.backend) for p in params]


def _norm(vectors):
    return float(np.sqrt(sum(float((v * v).sum().item()) for v in vectors)))


def top_eigenvalue(loss_fn, params, iterations=100, tol=1e-6, seed=0):
    """The largest-magnitude eigenvalue of the Hessian of ``loss_fn()`` (a fresh scalar loss
    each call) in ``params``, by power iteration: v <- H v / ||H v|| until the Rayleigh quotient
    v^T H v changes by less than ``tol`` (relative), at most ``iterations`` steps. For the
    Hessian of a loss near a minimum (positive semi-definite) this is Q-BERT's top eigenvalue.
    Returns (eigenvalue, eigenvector as a list of tensors)."""
    checks.positive_int(iterations, "iterations", "top_eigenvalue")
    params = list(params)
    rng = np.random.default_rng(seed)
    vectors = _random_vectors(params, rng)
    scale = _norm(vectors)
    vectors = [v / scale for v in vectors]
    eigenvalue = None
    for _ in range(iterations):
        product = hessian_vector_product(loss_fn(), params, vectors)
        rayleigh = float(_dot(product, vectors).item())
        size = _norm(product)
        if size == 0.0:
            return 0.0, vectors
        vectors = [h / size for h in product]
        converged = eigenvalue is not None and abs(rayleigh - eigenvalue) <= tol * abs(rayleigh)
        eigenvalue = rayleigh
        if converged:
            break
    return eigenvalue, vectors


def hutchinson_trace(loss_fn, params, samples=50, seed=0):
    """tr(H) estimated by Hutchinson's method, the mean of v^T H v over ``samples`` Rademacher
    vectors v (entries +-1), each H v one ``hessian_vector_product`` of a fresh ``loss_fn()``."""
    checks.positive_int(samples, "samples", "hutchinson_trace")
    params = list(params)
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(samples):
        vectors = _random_vectors(params, rng, rademacher=True)
        total += float(_dot(hessian_vector_product(loss_fn(), params, vectors), vectors).item())
    return total / samples


def layer_eigenvalues(model, batches, iterations=50, tol=1e-4, seed=0,
                      loss_fn=classification_loss):
    """The top Hessian eigenvalue of ``loss_fn(model, [batch])`` in the weights of each layer of
    the model's stack (eq 60 applied to W_1 .. W_n in turn), for each batch of ``batches`` on its
    own: (layers, batches) float64. Q-BERT computes these on mini-batches of 10% of the training
    data; their spread over batches is part of a layer's sensitivity (``layer_sensitivities``)."""
    batches = list(batches)
    if not batches:
        raise ValueError("layer_eigenvalues: batches is empty; give at least one batch")
    layers = pruning.transformer_stack(model).layers
    return np.array([[top_eigenvalue(lambda batch=batch: loss_fn(model, [batch]),
                                     list(layer.parameters()), iterations, tol, seed)[0]
                      for batch in batches]
                     for layer in layers])


def layer_sensitivities(model, batches, iterations=50, tol=1e-4, seed=0,
                        loss_fn=classification_loss):
    """Q-BERT's per-layer sensitivity (Shen et al., 2020, section 3.1):
    Omega_i = |mean(lambda_i)| + std(lambda_i), lambda_i the top Hessian eigenvalues of layer i
    over the given mini-batches (``layer_eigenvalues``). A layer whose eigenvalue is large on
    average, or varies much from batch to batch, is sensitive. With one batch, Omega_i is
    |lambda_i|. Returns (layers,) float64."""
    return sensitivities_from_eigenvalues(
        layer_eigenvalues(model, batches, iterations, tol, seed, loss_fn))


def sensitivities_from_eigenvalues(eigenvalues):
    """Omega_i = |mean(lambda_i)| + std(lambda_i) for each row of ``eigenvalues`` (layers,
    batches), as ``layer_eigenvalues`` returns them."""
    eigenvalues = np.asarray(eigenvalues, dtype=np.float64)
    if eigenvalues.ndim != 2 or not eigenvalues.size:
        raise ValueError("sensitivities_from_eigenvalues: eigenvalues must be a non-empty "
                         f"(layers, batches) array, got shape {eigenvalues.shape}")
    return np.abs(eigenvalues.mean(axis=1)) + eigenvalues.std(axis=1)


def allocate_bits(sensitivities, bit_choices=(2, 4, 8)):
    """Mixed precision from sensitivities (Q-BERT section 3.2: "more bits to the layers with
    larger eigenvalues"): the layers sorted by sensitivity are split into ``len(bit_choices)``
    groups of nearly equal size, the least sensitive group getting the fewest bits. Returns one
    bit width per layer, in layer order."""
    values = np.asarray(sensitivities, dtype=np.float64)
    if values.ndim != 1 or not len(values):
        raise ValueError(f"allocate_bits: sensitivities must be a non-empty 1-D array, got shape "
                         f"{values.shape}")
    choices = sorted(check_bits(b, "allocate_bits") for b in bit_choices)
    order = np.argsort(values, kind="stable")
    bits = np.empty(len(values), dtype=int)
    for group, layers in enumerate(np.array_split(order, len(choices))):
        bits[layers] = choices[group]
    return bits.tolist()


def quantize_weights_(module, bits, groups=1):
    """Replace the weight of every ``Linear`` in ``module`` by its b-bit quantise-dequantise
    value (eq 61, S = M / max|W| per group of ``groups`` consecutive output neurons: Q-BERT's
    group-wise quantisation), in place: the simulated quantised model. Returns ``module``."""
    check_bits(bits, "quantize_weights_")
    with no_grad():
        for layer in module.modules():
            if isinstance(layer, Linear):
                scales = weight_scales(layer.weight, bits, groups)[:, None]
                layer.weight.data[...] = fake_quantize(layer.weight, scales, bits=bits).data
                layer.weight._bump_version()
    return module
