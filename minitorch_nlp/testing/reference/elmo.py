"""Reference maths of ELMo (Peters et al., 2018; the survey's section IV-B, eq 13-17) in
``autograd.numpy``.

The library runs batches: gathered character windows times a filter matrix, padded sequences
with per-row lengths, a reversed copy of the batch for the backward LM, a fused cross-entropy.
Here every sentence is a Python list of tokens handled on its own, every token one at a time:
character vectors are one-hot rows times the embedding matrix, each convolution output is a
double sum over window offsets and characters, the LSTMs step through the sentence (the backward
LM through the reversed list) with one matrix-vector product per gate, and probabilities are the
textbook exp(z) / sum exp(z).

Parameters come as a dict of float64 arrays named as in ``BiLM.state_dict()`` (PyTorch's
layouts: LSTM weights stack the gates in the order input, forget, cell, output), so that
``autograd.grad`` of a reference gives a dict that lines up with the library's ``.grad``s.
A sentence is ``(char_ids, token_ids)``: its tokens' character ids ``(n, max_chars)`` (no
padding positions) and their word ids ``(n,)``.
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np


def _sigmoid(z):
    return 1.0 / (1.0 + anp.exp(-z))


def _relu(z):
    return z * (z > 0)


# ---- x_k^LM: the character CNN, highway layers and projection ------------------------------------
def _count(params, prefix):
    return len({key[len(prefix):].split(".")[0] for key in params if key.startswith(prefix)})


def token_vector(params, chars):
    """x_k for one token from its character ids ``chars`` (max_chars,)."""
    table = params["token_encoder.char_embedding.weight"]
    vocab = table.shape[0]
    # one-hot rows times the table; character 0 is padding, whose vector is a constant zero
    one_hot = np.zeros((len(chars), vocab))
    for i, c in enumerate(chars):
        if c != 0:
            one_hot[i, c] = 1.0
    char_vectors = anp.dot(one_hot, table)                      # (max_chars, char_dim)
    pooled = []
    for bank in range(_count(params, "token_encoder.convolutions.")):
        w = params[f"token_encoder.convolutions.{bank}.weight"]  # (filters, width, char_dim)
        b = params[f"token_encoder.convolutions.{bank}.bias"]
        width = w.shape[1]
        for f in range(w.shape[0]):
            responses = []
            for start in range(len(chars) - width + 1):
                total = b[f]
                for offset in range(width):
                    total = total + anp.sum(w[f, offset] * char_vectors[start + offset])
                responses.append(total)
            pooled.append(_relu(anp.max(anp.array(responses))))
    x = anp.array(pooled)
    for layer in range(_count(params, "token_encoder.highways.")):
        p = f"token_encoder.highways.{layer}."
        transform_gate = _sigmoid(anp.dot(params[p + "gate.weight"], x) + params[p + "gate.bias"])
        candidate = _relu(anp.dot(params[p + "transform.weight"], x) + params[p + "transform.bias"])
        x = transform_gate * candidate + (1.0 - transform_gate) * x
    return anp.dot(params["token_encoder.projection.weight"], x) + \
        params["token_encoder.projection.bias"]


# ---- the LSTM language models --------------------------------------------------------------------
def _lstm(params, prefix, inputs):
    """Hochreiter & Schmidhuber's LSTM with a forget gate, one step per input vector."""
    w_ih, w_hh = params[prefix + "weight_ih_l0"], params[prefix + "weight_hh_l0"]
    bias = params[prefix + "bias_ih_l0"] + params[prefix + "bias_hh_l0"]
    size = w_hh.shape[1]

    def gate(k, x, h):
        rows = slice(k * size, (k + 1) * size)
        return anp.dot(w_ih[rows], x) + anp.dot(w_hh[rows], h) + bias[rows]

    h, c = anp.zeros(size), anp.zeros(size)
    outputs = []
    for x in inputs:
        i, f = _sigmoid(gate(0, x, h)), _sigmoid(gate(1, x, h))
        g, o = anp.tanh(gate(2, x, h)), _sigmoid(gate(3, x, h))
        c = f * c + i * g
        h = o * anp.tanh(c)
        outputs.append(h)
    return outputs


def _direction(params, name, xs, residual=True):
    """The states of every layer of one LM over the token vectors ``xs`` in reading order:
    a list over layers of lists over positions."""
    layers = []
    inputs = xs
    for j in range(_count(params, f"{name}_lstms.")):
        outputs = _lstm(params, f"{name}_lstms.{j}.", inputs)
        if residual and j > 0:
            outputs = [h + x for h, x in zip(outputs, inputs)]
        layers.append(outputs)
        inputs = outputs
    return layers


def _log_softmax_at(params, h, target):
    logits = anp.dot(params["softmax.weight"], h) + params["softmax.bias"]
    largest = anp.max(logits)         # exp(logits - largest): no overflow at ±1e4
    return logits[target] - largest - anp.log(anp.sum(anp.exp(logits - largest)))


def eq13_forward_lm(params, chars, token_ids, residual=True):
    """log p(t_k | t_1, ..., t_{k-1}) for k = 2..n of one sentence (eq 13; their sum is
    log p(t_2 .. t_n | t_1)): the softmax of the top forward LSTM state after reading t_1..t_{k-1}.
    Returns an array of n - 1 values."""
    xs = [token_vector(params, c) for c in chars]
    top = _direction(params, "forward", xs, residual)[-1]
    return anp.array([_log_softmax_at(params, top[k - 1], token_ids[k])
                      for k in range(1, len(xs))])


def eq14_backward_lm(params, chars, token_ids, residual=True):
    """log p(t_k | t_{k+1}, ..., t_n) for k = 1..n-1 of one sentence (eq 14): the backward LSTM
    reads the sentence from its end. Returns an array of n - 1 values."""
    xs = [token_vector(params, c) for c in chars]
    n = len(xs)
    top_reversed = _direction(params, "backward", xs[::-1], residual)[-1]
    # top_reversed[m] has read t_n .. t_{n-m}; t_k is predicted after reading t_n .. t_{k+1}
    return anp.array([_log_softmax_at(params, top_reversed[n - 2 - k], token_ids[k])
                      for k in range(n - 1)])


def biLM_objective(params, sentences, residual=True):
    """Peters et al.'s joint objective (section 3.1; eq 13 and 14 together), negated and divided
    by the number of predictions: -sum over sentences and k of both log-probabilities / count."""
    total, count = 0.0, 0
    for chars, ids in sentences:
        total = total + anp.sum(eq13_forward_lm(params, chars, ids, residual)) + \
            anp.sum(eq14_backward_lm(params, chars, ids, residual))
        count += 2 * (len(ids) - 1)
    return -total / count


def eq16_bilm_layer(forward_h, backward_h):
    """h_kj = [fwd h_kj; bwd h_kj] (eq 16)."""
    return anp.concatenate([forward_h, backward_h])


def eq15_layer_representations(params, chars, residual=True):
    """R_k = {x_k, fwd h_kj, bwd h_kj | j = 1..L} = {h_kj | j = 0..L} (eq 15), with h_k0 =
    [x_k; x_k]: an array (L + 1, n, 2 * dim) for one sentence of n tokens."""
    xs = [token_vector(params, c) for c in chars]
    n = len(xs)
    forward = _direction(params, "forward", xs, residual)
    backward = [states[::-1] for states in _direction(params, "backward", xs[::-1], residual)]
    layers = [anp.stack([eq16_bilm_layer(x, x) for x in xs])]
    for fwd, bwd in zip(forward, backward):
        layers.append(anp.stack([eq16_bilm_layer(fwd[k], bwd[k]) for k in range(n)]))
    return anp.stack(layers)


# ---- eq 17 ---------------------------------------------------------------------------------------
def eq17_scalar_mix(layers, scalars, gamma, layer_norm=False, eps=1e-5):
    """ELMo_k^task = gamma * sum_j s_j h_kj with s = softmax(scalars) (eq 17). ``layers`` is
    (L + 1, ..., dim); with ``layer_norm`` each vector h_kj is first standardised over its
    features, (h - mean) / sqrt(var + eps)."""
    largest = anp.max(scalars)        # the same ratios, no overflow at ±1e4
    exps = [anp.exp(scalars[j] - largest) for j in range(len(scalars))]
    total = sum(exps)
    mixed = 0.0
    for j, layer in enumerate(layers):
        if layer_norm:
            dim = layer.shape[-1]
            mean = anp.sum(layer, axis=-1, keepdims=True) / dim
            var = anp.sum((layer - mean) ** 2, axis=-1, keepdims=True) / dim
            layer = (layer - mean) / anp.sqrt(var + eps)
        mixed = mixed + (exps[j] / total) * layer
    return gamma * mixed
