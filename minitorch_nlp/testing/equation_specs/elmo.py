"""Specs of ELMo: the forward and backward language models (eq 13-14), the layer
representations R_k (eq 15), the biLSTM's concatenated states h_kj (eq 16) and the task-specific
mix of the layers (eq 17).

Eq 13-16 are computed by the ``BiLM`` module, eq 17 by ``ScalarMix``; their specs take the
weights as arguments, and the library's side is the module run with them (``nn.replaced_tensors``
/ ``nn.functional_call``). A biLM's weights are a dict named as ``BiLM.state_dict()`` names them
(``_BILM_PARAMS``); the spec's differentiable arguments replace some of its entries."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import nn
from minitorch_nlp.models.elmo import CHAR_VOCAB_SIZE, BiLM, BiLMConfig, ScalarMix

from .. import strategies as S
from ..reference import elmo as reference
from ..spec import Spec

_BILM_PARAMS = (
    "dict of float64 arrays named as BiLM.state_dict(): token_encoder.char_embedding.weight "
    "(CHAR_VOCAB_SIZE, char_dim), row 0 (padding) zero; token_encoder.convolutions.i.weight "
    "(filters, width, char_dim) and .bias; token_encoder.highways.i.{transform,gate}.{weight,"
    "bias}; token_encoder.projection.weight (dim, features) and .bias; {forward,backward}_lstms."
    "j.{weight_ih_l0, weight_hh_l0} (4 dim, dim) and {bias_ih_l0, bias_hh_l0} (4 dim,), gates "
    "in the order i, f, g, o; softmax.weight (vocab, dim) and .bias")
_CHAR_IDS = ("char_ids", "int64 (batch, n, max_chars), each token's character ids (0: padding)")
_LENGTHS = ("lengths", "int64 (batch,), each sentence's length in [1, n]; positions after it are "
                       "padding")
_CHAR_EMBEDDING = "token_encoder.char_embedding.weight"
_SOFTMAX = ("softmax.weight", "softmax.bias")
_FIRST_LSTMS = ("forward_lstms.0.weight_ih_l0", "backward_lstms.0.weight_ih_l0")


def _count(params, prefix):
    return len({key[len(prefix):].split(".")[0] for key in params if key.startswith(prefix)})


def _bilm(params, replaced, dtype, residual):
    """A BiLM of the shapes of ``params`` and ``replaced`` (the differentiable arguments), with
    or without ``residual`` connections between its LSTM layers, and its tensors: both
    together."""
    tensors = {name: mt.tensor(array, dtype=dtype) for name, array in params.items()}
    tensors.update(replaced)
    vocab_size, dim = tensors["softmax.weight"].shape
    convolutions = _count(tensors, "token_encoder.convolutions.")
    filters = tuple(tuple(tensors[f"token_encoder.convolutions.{i}.weight"].shape[1::-1])
                    for i in range(convolutions))
    model = BiLM(BiLMConfig(
        vocab_size=vocab_size, dim=dim, num_layers=_count(tensors, "forward_lstms."),
        char_dim=tensors[_CHAR_EMBEDDING].shape[1], filters=filters,
        highway_layers=_count(tensors, "token_encoder.highways."), residual=residual))
    return model, tensors


def forward_log_probs(char_embedding, softmax_weight, softmax_bias, *, char_ids, token_ids,
                      lengths, params, residual):
    """log p(t_k | t_1, ..., t_{k-1}) (eq 13) at every position k of each sentence: the softmax
    of the top forward LSTM state after reading x_1 .. x_{k-1}, the token vectors x from the
    character CNN (convolutions max-pooled over the characters, ReLU, highway layers, a
    projection); 0 at k = 0 and at padding. ``token_ids`` (batch, n) are the words the softmax
    scores. Returns (batch, n); each row's sum is the sentence's log-likelihood given t_1.

    The library's ``BiLM.forward_log_probs`` computes it with these weights."""
    model, tensors = _bilm(params, {_CHAR_EMBEDDING: char_embedding, _SOFTMAX[0]: softmax_weight,
                                    _SOFTMAX[1]: softmax_bias}, char_embedding.dtype, residual)
    with nn.replaced_tensors(model, tensors):
        return model.forward_log_probs(model(char_ids, lengths), token_ids)


def backward_log_probs(char_embedding, softmax_weight, softmax_bias, *, char_ids, token_ids,
                       lengths, params, residual):
    """log p(t_k | t_{k+1}, ..., t_N) (eq 14) at every position k of each sentence: the backward
    LSTM reads the sentence from its own last token; 0 at that last token and at padding.
    Arguments as ``forward_log_probs``. Returns (batch, n).

    The library's ``BiLM.backward_log_probs`` computes it with these weights."""
    model, tensors = _bilm(params, {_CHAR_EMBEDDING: char_embedding, _SOFTMAX[0]: softmax_weight,
                                    _SOFTMAX[1]: softmax_bias}, char_embedding.dtype, residual)
    with nn.replaced_tensors(model, tensors):
        return model.backward_log_probs(model(char_ids, lengths), token_ids)


def layer_representations(char_embedding, projection_weight, *, char_ids, lengths, params,
                          residual):
    """R_k = {h_kj | j = 0..L} (eq 15) for every token: h_k0 = [x_k; x_k] (the token vector
    twice) and h_kj = [fwd h_kj; bwd h_kj] (eq 16), stacked: (L + 1, batch, n, 2 dim), zero at
    padding. ``projection_weight`` (dim, features) is the character CNN's last projection.

    The library's ``BiLM.layer_representations`` computes it with these weights."""
    model, tensors = _bilm(params, {_CHAR_EMBEDDING: char_embedding,
                                    "token_encoder.projection.weight": projection_weight},
                           char_embedding.dtype, residual)
    with nn.replaced_tensors(model, tensors):
        return model.layer_representations(char_ids, lengths)


def bilstm_states(forward_weight_ih, backward_weight_ih, *, char_ids, lengths, params,
                  residual):
    """h_kj = [fwd h_kj; bwd h_kj] (eq 16) for the biLM's layers j = 1..L: (L, batch, n, 2 dim),
    zero at padding; layers above the first add their input (the residual connection).
    ``forward_weight_ih``, ``backward_weight_ih`` (4 dim, dim) are the first layer's input
    weights of the two directions (gates i, f, g, o).

    The library's ``BiLM.layer_representations`` (its layers 1..L) computes it with these
    weights."""
    model, tensors = _bilm(params, dict(zip(_FIRST_LSTMS, (forward_weight_ih,
                                                            backward_weight_ih))),
                           forward_weight_ih.dtype, residual)
    with nn.replaced_tensors(model, tensors):
        return model.layer_representations(char_ids, lengths)[1:]


def scalar_mix(layers, scalars, gamma, *, layer_norm):
    """ELMo_k^task = gamma * sum_j s_j h_kj with s = softmax(scalars) (eq 17), for the biLM's
    layers stacked on axis 0, ``layers`` (L + 1, ..., dim): (..., dim). With ``layer_norm`` each
    vector h_kj is first standardised over its features (eps 1e-5), as Peters et al. do for some
    tasks.

    The library's ``ScalarMix`` computes it with these scalars and gamma."""
    mix = ScalarMix(layers.shape[0], layer_norm=layer_norm)
    return nn.functional_call(mix, {"scalars": scalars, "gamma": gamma}, layers)


@st.composite
def _mix_cases(draw):
    depth, batch, time, dim = (draw(st.integers(1, 4)) for _ in range(4))
    # scalars shifted by ±1e4 or spread to ±1e4: a softmax without the max subtraction fails
    return {"layers": draw(S.arrays((depth, batch, time, dim))),
            "scalars": draw(S.stress_arrays((depth,))), "gamma": draw(S.arrays((1,))),
            "layer_norm": draw(st.booleans())}


@st.composite
def _bilm_cases(draw):
    """A tiny biLM's weights (from a seed: many arrays), sentences of distinct characters (no
    two windows alike, so that max-pooling has no ties) and their lengths."""
    vocab, dim, depth, char_dim = (draw(st.integers(1, 2)) for _ in range(4))
    vocab += 1
    batch, time, max_chars = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(
        st.integers(2, 3))
    filters = ((1, draw(st.integers(1, 2))), (2, 1))
    model = BiLM(BiLMConfig(vocab_size=vocab, dim=dim, num_layers=depth, char_dim=char_dim,
                            filters=filters, highway_layers=1))
    rng = np.random.default_rng(draw(S.seeds()))
    params = {name: rng.uniform(-1.0, 1.0, tensor.shape)
              for name, tensor in model.state_dict().items()}
    params[_CHAR_EMBEDDING][0] = 0.0                         # the padding character
    # the softmax's bias sometimes spread to ±1e3 or shifted by ±1e4: log-probabilities taken
    # without the max subtraction overflow
    params[_SOFTMAX[1]] = (params[_SOFTMAX[1]] * draw(st.sampled_from((1.0, 1e3)))
                           + draw(st.sampled_from((0.0, 1e4, -1e4))))
    chars = np.stack([np.stack([rng.choice(np.arange(1, 8), max_chars, replace=False)
                                for _ in range(time)]) for _ in range(batch)])
    lengths = draw(S.arrays((batch,), 1, time).map(lambda a: np.rint(a).astype(np.int64)))
    token_ids = draw(S.arrays((batch, time), 0, vocab - 1).map(
        lambda a: np.rint(a).astype(np.int64)))
    return {"params": params, "char_ids": chars.astype(np.int64), "token_ids": token_ids,
            "lengths": lengths, "residual": draw(st.booleans())}


def _with(case, names, drop=()):
    """``case`` with the differentiable arguments (argument -> parameter name) taken out of its
    params, and without the entries ``drop``."""
    params = dict(case["params"])
    weights = {argument: params.pop(name) for argument, name in names.items()}
    return weights | {key: value for key, value in case.items() if key not in drop} | {
        "params": params}


def _lm_reference(direction, names):
    """Eq 13 (``direction`` the forward LM) or 14 on each sentence's real tokens, 0 where
    nothing is predicted."""
    forward = direction is reference.eq13_forward_lm

    def lm(*, char_ids, token_ids, lengths, params, residual, **weights):
        full = dict(params, **{names[argument]: value for argument, value in weights.items()})
        rows = []
        for chars, ids, length in zip(char_ids, token_ids, lengths):
            values = direction(full, chars[:length], ids[:length], residual)  # length - 1
            row = [values[k] for k in range(length - 1)]
            row = [0.0] + row if forward else row + [0.0]
            rows.append(anp.stack(row + [0.0] * (len(ids) - length)))
        return anp.stack(rows)
    return lm


def _representations_reference(names, layers):
    """Eq 15's layers ``layers`` of each sentence's real tokens, zero at padding."""
    def representations(*, char_ids, lengths, params, residual, **weights):
        full = dict(params, **{names[argument]: value for argument, value in weights.items()})
        sentences = []
        for chars, length in zip(char_ids, lengths):
            r = reference.eq15_layer_representations(full, chars[:length], residual)[layers]
            padding = np.zeros((r.shape[0], len(chars) - length, r.shape[2]))
            sentences.append(anp.concatenate([r, padding], axis=1))
        return anp.stack(sentences, axis=1)
    return representations


_LM_WEIGHTS = {"char_embedding": _CHAR_EMBEDDING, "softmax_weight": _SOFTMAX[0],
               "softmax_bias": _SOFTMAX[1]}
_R_WEIGHTS = {"char_embedding": _CHAR_EMBEDDING,
              "projection_weight": "token_encoder.projection.weight"}
_H_WEIGHTS = dict(zip(("forward_weight_ih", "backward_weight_ih"), _FIRST_LSTMS))
_RESIDUAL = ("residual", "bool: each LSTM layer above the first adds its input (Peters et al.'s "
                         "residual connection)")
_LM_ARGUMENTS = (
    ("char_embedding", "float64 (CHAR_VOCAB_SIZE, char_dim), the character vectors (row 0, "
                       "padding, is not used: zero)"),
    ("softmax_weight", "float64 (vocab, dim), the shared softmax's weight"),
    ("softmax_bias", "float64 (vocab,), its bias"),
    _CHAR_IDS, ("token_ids", "int64 (batch, n), the words t_k"), _LENGTHS,
    ("params", "the other weights: " + _BILM_PARAMS), _RESIDUAL)

SPECS = (
    Spec(13, "forward_log_probs", _LM_ARGUMENTS,
         "float64 (batch, n): log p(t_k | t_1 .. t_{k-1}) at k >= 1, 0 at k = 0 and at padding",
         tuple(_LM_WEIGHTS),
         lambda: _bilm_cases().map(lambda case: _with(case, _LM_WEIGHTS)),
         _lm_reference(reference.eq13_forward_lm, _LM_WEIGHTS),
         "minitorch_nlp.testing.equation_specs.elmo:forward_log_probs",
         f"CHAR_VOCAB_SIZE = {CHAR_VOCAB_SIZE}. Peters et al. (2018) section 3.1; the LSTMs "
         "are plain (no cell projection). The other weights are given, not differentiated. "
         "The library's side is BiLM.forward_log_probs with these weights."),
    Spec(14, "backward_log_probs", _LM_ARGUMENTS,
         "float64 (batch, n): log p(t_k | t_{k+1} .. t_N) at k < N - 1, 0 at each sentence's "
         "last token and at padding",
         tuple(_LM_WEIGHTS),
         lambda: _bilm_cases().map(lambda case: _with(case, _LM_WEIGHTS)),
         _lm_reference(reference.eq14_backward_lm, _LM_WEIGHTS),
         "minitorch_nlp.testing.equation_specs.elmo:backward_log_probs",
         "The backward LM starts at each sentence's own last token, not at the padded end. The "
         "library's side is BiLM.backward_log_probs with these weights."),
    Spec(15, "layer_representations",
         (_LM_ARGUMENTS[0],
          ("projection_weight", "float64 (dim, features), the character CNN's projection"),
          _CHAR_IDS, _LENGTHS, _LM_ARGUMENTS[-2], _RESIDUAL),
         "float64 (L + 1, batch, n, 2 dim): h_k0 = [x_k; x_k], h_kj = [fwd h_kj; bwd h_kj]; "
         "zero at padding",
         tuple(_R_WEIGHTS),
         lambda: _bilm_cases().map(lambda case: _with(case, _R_WEIGHTS, ("token_ids",))),
         _representations_reference(_R_WEIGHTS, slice(None)),
         "minitorch_nlp.testing.equation_specs.elmo:layer_representations",
         "Layer 0 is the token vector twice, so that all L + 1 layers have size 2 dim (Peters "
         "et al. section 3.2). The library's side is BiLM.layer_representations."),
    Spec(16, "bilstm_states",
         (("forward_weight_ih", "float64 (4 dim, dim), the forward LM's first LSTM's input "
                                "weights"),
          ("backward_weight_ih", "float64 (4 dim, dim), the backward LM's"),
          _CHAR_IDS, _LENGTHS, _LM_ARGUMENTS[-2], _RESIDUAL),
         "float64 (L, batch, n, 2 dim): h_kj = [fwd h_kj; bwd h_kj] for j = 1..L; zero at "
         "padding",
         tuple(_H_WEIGHTS),
         lambda: _bilm_cases().map(lambda case: _with(case, _H_WEIGHTS, ("token_ids",))),
         _representations_reference(_H_WEIGHTS, slice(1, None)),
         "minitorch_nlp.testing.equation_specs.elmo:bilstm_states",
         "The backward states are put back in reading order before the concatenation. The "
         "library's side is BiLM.layer_representations (layers 1..L)."),
    Spec(17, "scalar_mix",
         (("layers", "float64 (L + 1, batch, T, dim), the layer representations h_kj, j = 0..L"),
          ("scalars", "float64 (L + 1,), the unnormalised weights w (s = softmax(w))"),
          ("gamma", "float64 (1,), the task scale"),
          ("layer_norm", "bool: standardise each h_kj over its features first (eps 1e-5)")),
         "float64 (batch, T, dim): gamma * sum_j softmax(w)_j h_kj",
         ("layers", "scalars", "gamma"),
         _mix_cases,
         lambda layers, scalars, gamma, layer_norm: reference.eq17_scalar_mix(
             layers, scalars, gamma[0], layer_norm),
         "minitorch_nlp.testing.equation_specs.elmo:scalar_mix",
         "The library's side is ScalarMix with these scalars and gamma."),
)
