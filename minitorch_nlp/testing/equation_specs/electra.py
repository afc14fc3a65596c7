"""Specs of ELECTRA: the generator's losses and softmax, the discriminator's loss and the
combined objective (eq 107-110).

Eq 109 is computed by the generator's masked-LM head (``ElectraForMaskedLM.mlm``); its spec
takes the head's weights as arguments, and the library's side is the head run with them
(``nn.replaced_tensors``)."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.models.electra import ElectraConfig, ElectraForMaskedLM

from .. import strategies as S
from ..reference import electra as reference
from ..spec import Spec


@st.composite
def _electra_case(draw):
    """Generator logits with masked-LM labels (at least one masked position), discriminator
    logits with replaced labels and a padding mask (None: every token counts), both kinds of
    logits from near-zero to +-1e4 (the generator's also shifted by +-1e5), the loss weight
    lambda the paper's 50 or another."""
    batch, time, vocab = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 5))
    targets = draw(S.arrays((batch, time), 0, vocab - 1)).round().astype(np.int64)
    masked = draw(S.bool_masks((batch, time)))
    masked.flat[0] = True
    attention_mask = draw(S.bool_masks((batch, time))) | masked
    generator_logits = draw(S.scaled_arrays((batch, time, vocab))) + draw(S.score_offsets())
    return {"generator_logits": generator_logits,
            "discriminator_logits": draw(S.scaled_arrays((batch, time))),
            "mlm_labels": np.where(masked, targets, -100),
            "replaced": draw(S.bool_masks((batch, time))).astype(np.int64),
            "attention_mask": draw(st.none() | st.just(attention_mask)),
            "discriminator_weight": draw(st.sampled_from([50.0, 1.0, 0.0, 0.5]))}


@st.composite
def _discriminator_cases(draw):
    """Eq 108's arguments of ``_electra_case``; sometimes a batch of padding only (no token
    counts: the loss is 0)."""
    case = draw(_electra_case())
    mask = case["attention_mask"]
    if mask is not None and draw(st.integers(0, 4)) == 0:
        mask = np.zeros_like(mask)
    return {"logits": case["discriminator_logits"], "replaced": case["replaced"],
            "attention_mask": mask}


_GENERATOR_ARGS = (
    ("generator_logits", "float64 (batch, T, V), the generator's scores of every token"),
    ("mlm_labels", "int64 (batch, T): the original id at masked positions, -100 elsewhere"),
)
_DISCRIMINATOR_ARGS = (
    ("discriminator_logits", "float64 (batch, T), each token's score of being replaced: "
                             "D(x^corr, t) = P(original) = sigmoid(-logit)"),
    ("replaced", "int64 (batch, T): 1 where x^corr_t != x_t, 0 where it is the original"),
    ("attention_mask", "None or bool (batch, T), False on padding (not counted)"),
)


def _rename(case, names):
    return {new: case[old] for old, new in names.items()}


_HEAD = {"dense_w": "dense.weight", "dense_b": "dense.bias", "norm_g": "norm.weight",
         "norm_b": "norm.bias"}


def generator_distribution(hidden, embeddings, bias, *, head):
    """p_G(x_t | x) = softmax_x(e(x)^T h_G(x)_t + b_x) (eq 109, with the released models' output
    bias) for the encoder's states ``hidden`` (batch, T, H), the word embeddings ``embeddings``
    (V, E) and ``bias`` (V,): h_G = LayerNorm(GELU(W h + b)) (exact GELU, eps 1e-12) with
    ``head`` = {dense_w (E, H), dense_b (E,), norm_g, norm_b (E,)}. Returns (batch, T, V).

    The library's ``ElectraForMaskedLM.mlm`` computes the scores with these weights."""
    (vocab, width), size = embeddings.shape, hidden.shape[-1]
    model = ElectraForMaskedLM(ElectraConfig(
        vocab_size=vocab, embedding_size=width, hidden_size=size, num_hidden_layers=1,
        num_attention_heads=1, intermediate_size=1, max_position_embeddings=1))
    weights = {_HEAD[name]: mt.tensor(array, dtype=hidden.dtype) for name, array in head.items()}
    with nn.replaced_tensors(model.mlm, dict(weights, bias=bias)):
        return F.softmax(model.mlm(hidden, embeddings), axis=-1)


@st.composite
def _generator_cases(draw):
    batch, time, vocab = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(2, 4))
    size, width = draw(st.integers(1, 3)), draw(st.integers(2, 3))
    rng = np.random.default_rng(draw(S.seeds()))      # random head: no LayerNorm input constant
    head = {"dense_w": rng.uniform(-1.0, 1.0, (width, size)),
            "dense_b": rng.uniform(-1.0, 1.0, width), "norm_g": rng.uniform(0.5, 1.5, width),
            "norm_b": rng.uniform(-1.0, 1.0, width)}
    return {"hidden": draw(S.arrays((batch, time, size))),
            "embeddings": draw(S.arrays((vocab, width))),
            "bias": draw(S.scaled_arrays((vocab,), scales=(1.0, 1e-4, 1e4))),
            "head": head}


def _generator_reference(hidden, embeddings, bias, head):
    states = reference.generator_head(hidden, head)
    return anp.stack([reference.eq109_generator_probabilities(row, embeddings, bias)
                      for row in states])


SPECS = (
    Spec(109, "generator_distribution",
         (("hidden", "float64 (batch, T, H), the generator encoder's last states"),
          ("embeddings", "float64 (V, E), the word embeddings e, tied to the output"),
          ("bias", "float64 (V,), the output bias"),
          ("head", "dict of float64 arrays: dense_w (E, H), dense_b (E,), norm_g, norm_b (E,)")),
         "float64 (batch, T, V): softmax over x of e(x)^T h_G(x)_t + b_x",
         ("hidden", "embeddings", "bias"),
         _generator_cases,
         _generator_reference,
         "minitorch_nlp.testing.equation_specs.electra:generator_distribution",
         "Clark et al. (2020) eq. 1; the survey omits the head (dense, GELU, LayerNorm) that "
         "gives h_G the embeddings' width, and the bias. The head's weights are given, not "
         "differentiated. The library's side is ElectraForMaskedLM's head with these weights."),
    Spec(107, "masked_lm_loss",
         (("logits", _GENERATOR_ARGS[0][1]), ("labels", _GENERATOR_ARGS[1][1])),
         "float64 (): the mean over the masked positions of -log p_G(x_i | x^masked)",
         ("logits",),
         lambda: _electra_case().map(lambda case: _rename(
             case, {"generator_logits": "logits", "mlm_labels": "labels"})),
         reference.eq107_generator_mlm_loss,
         "minitorch_nlp.models.bert:masked_lm_loss",
         "ELECTRA's generator is trained with BERT's masked-LM loss (eq 25 is the same "
         "objective); the survey's expectation of a sum becomes a mean over masked positions."),
    Spec(108, "discriminator_loss",
         (("logits", _DISCRIMINATOR_ARGS[0][1]), _DISCRIMINATOR_ARGS[1],
          _DISCRIMINATOR_ARGS[2]),
         "float64 (): eq 108's sum over tokens, averaged over the counted tokens",
         ("logits",),
         _discriminator_cases,
         lambda logits, replaced, attention_mask: reference.eq108_discriminator_loss(
             logits, replaced, attention_mask),
         "minitorch_nlp.models.electra:discriminator_loss",
         "The logits score 'replaced' (HuggingFace's convention), so D = sigmoid(-logit); the "
         "mean over tokens is ELECTRA's released normalisation, against which lambda = 50 was "
         "tuned."),
    Spec(110, "electra_loss",
         _GENERATOR_ARGS[:1] + _DISCRIMINATOR_ARGS[:1] + _GENERATOR_ARGS[1:]
         + _DISCRIMINATOR_ARGS[1:]
         + (("discriminator_weight", "float lambda >= 0, the weight of L_Disc (the paper: "
                                     "50)"),),
         "float64 (): L_MLM (eq 107) + lambda L_Disc (eq 108)",
         ("generator_logits", "discriminator_logits"),
         _electra_case,
         reference.eq110_electra_loss,
         "minitorch_nlp.models.electra:electra_loss",
         "lambda = 50 (Clark et al. section 3.2) is the library's default discriminator_weight; "
         "other weights are drawn too."),
)
