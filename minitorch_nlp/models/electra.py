"""ELECTRA (Clark et al., 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than
Generators"), the survey's section IX-D, equations 107-110.

Two BERT encoders (``models.bert``) trained together on "replaced token detection":

* the generator G, a small masked LM (``ElectraForMaskedLM``), predicts the masked tokens,
  p_G(x_t | x) = softmax over the vocabulary of e(x')^T h_G(x)_t with the tied embeddings e
  (eq 109), trained with the masked-LM loss (eq 107, BERT's ``masked_lm_loss``);
* each masked token is replaced by a sample of p_G (drawn without gradient: the sampling is not
  differentiable, and the paper does not back-propagate through it); a sample equal to the
  original counts as "original";
* the discriminator D (``ElectraForPreTraining``) reads the corrupted text and predicts, for
  every token, whether it was replaced (eq 108, ``discriminator_loss``);
* both minimise L_MLM + lambda L_Disc with lambda = 50 (eq 110, ``electra_loss``), sharing the
  token and position embeddings (Clark section 3.2); the generator is a fraction of the
  discriminator's width (1/4 to 1/2 works best, section 3.2) and may not be wider.

``ElectraPretraining`` holds the pair; after pretraining the discriminator is the model kept for
fine-tuning. Embeddings are ``embedding_size`` wide and projected to ``hidden_size`` when the two
differ (HuggingFace's ``embeddings_project``). Names, calls and checkpoints follow HuggingFace
(``ElectraModel``, ``ElectraForPreTraining``, ``ElectraForMaskedLM``).
"""
from __future__ import annotations


import numpy as np

from .. import cookbook
from .. import functional as F
from ..autograd import no_grad, random as mt_random, tensor, Tensor
from ..nn import Linear, Module
from ..nn.outputs import ModelOutput
from .albert import AlbertEmbeddings
from .bert import (HIDDEN_ACT, IGNORE_INDEX, BertForMaskedLM, BertModel,
                   _BertWithHead, masked_lm_loss)
from .configs.electra import ElectraConfig

__all__ = ["DISCRIMINATOR_WEIGHT", "ElectraConfig", "ElectraEmbeddings", "ElectraForMaskedLM",
           "ElectraForPreTraining", "ElectraModel", "ElectraPretraining", "discriminator_loss",
           "electra_loss", "sample_replacements"]

DISCRIMINATOR_WEIGHT = 50.0     # lambda of eq 110 (Clark et al. section 3.2)

# ELECTRA's generator loss (eq 107) is BERT's masked-LM loss (eq 25): the mean over the masked
# positions of -log p_G(x_i | x^masked).
cookbook.equation(107)(masked_lm_loss)


class ElectraEmbeddings(AlbertEmbeddings):
    """BERT's embeddings ``embedding_size`` wide, projected to ``hidden_size`` only when the two
    differ (HuggingFace's ``embeddings_project``)."""

    always_project = False


class ElectraModel(BertModel):
    """The ELECTRA encoder: ``BertModel`` with ``ElectraEmbeddings`` and no pooler. Returns
    ``ModelOutput(last_hidden_state)``."""

    config_class = ElectraConfig
    embeddings_class = ElectraEmbeddings

    def __init__(self, config: ElectraConfig, add_pooling_layer: bool = False) -> None:
        super().__init__(config, add_pooling_layer)


@cookbook.equation(109)
class ElectraForMaskedLM(BertForMaskedLM):
    r"""The generator: an ELECTRA encoder with BERT's masked-LM head, whose decoder is the tied
    word embeddings e, so that (eq 109, plus the head's output bias)::

        p_G(x_t | x) = exp(e(x_t)^T h_G(x)_t) / sum_{x'} exp(e(x')^T h_G(x)_t)

    where h_G(x)_t is the head's dense layer, GELU and LayerNorm applied to the encoder's
    output, of the embedding width. The head's GELU is the exact one whatever ``hidden_act``
    says (HuggingFace's ``ElectraGeneratorPredictions``)."""

    base_model_class = ElectraModel

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__(config)
        self.mlm.approximate = "none"


@cookbook.equation(108)
def discriminator_loss(logits, replaced, attention_mask=None):
    r"""The replaced-token-detection loss (eq 108), averaged over the real tokens::

        L_Disc = sum_t -1(x^corr_t = x_t) log D(x^corr, t)
                       - 1(x^corr_t != x_t) log(1 - D(x^corr, t))

    where D(x^corr, t) is the probability that token t is original. ``logits`` (batch, time)
    score "replaced" (HuggingFace's convention: D = sigmoid(-logit)); ``replaced`` (batch, time)
    is 1 where the corrupted token differs from the original; ``attention_mask`` (batch, time),
    0 on padding (None: every token counts). The sum over t becomes a mean over the counted
    tokens, as in ELECTRA's released code, against which lambda = 50 (eq 110) was tuned.
    """
    targets = tensor(np.asarray(replaced), dtype=logits.dtype, backend=logits.backend)
    if attention_mask is None:
        return F.binary_cross_entropy_with_logits(logits, targets)
    weights = np.asarray(attention_mask, dtype=np.float64)
    if weights.shape != tuple(logits.shape):
        raise ValueError(f"discriminator_loss: attention_mask {weights.shape} must have the "
                         f"shape of logits {tuple(logits.shape)}")
    counted = tensor(weights, dtype=logits.dtype, backend=logits.backend)
    total = F.binary_cross_entropy_with_logits(logits, targets, weight=counted, reduction="sum")
    return total / max(float(weights.sum()), 1.0)


@cookbook.equation(110)
def electra_loss(generator_logits, discriminator_logits, *, mlm_labels, replaced,
                 attention_mask=None, discriminator_weight=DISCRIMINATOR_WEIGHT):
    """ELECTRA's combined objective (eq 110), L_MLM(x, theta_G) + lambda L_Disc(x, theta_D)::

        masked_lm_loss(generator_logits, mlm_labels)                           (eq 107)
        + discriminator_weight * discriminator_loss(discriminator_logits, replaced,
                                                    attention_mask)             (eq 108)

    ``generator_logits`` (batch, time, vocab), ``mlm_labels`` (batch, time): the original ids at
    masked positions, -100 elsewhere; ``discriminator_logits``, ``replaced`` and
    ``attention_mask`` as ``discriminator_loss``; lambda = 50 by default."""
    return (masked_lm_loss(generator_logits, mlm_labels)
            + discriminator_weight * discriminator_loss(discriminator_logits, replaced,
                                                        attention_mask))


class ElectraDiscriminatorHead(Module):
    """A dense layer, the activation, and a linear map to one "replaced" logit per token
    (HuggingFace's ``discriminator_predictions``)."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.approximate = "tanh" if HIDDEN_ACT[config.hidden_act] == "gelu_tanh" else "none"
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.dense_prediction = Linear(config.hidden_size, 1)

    def forward(self, hidden: Tensor):
        return self.dense_prediction(F.gelu(self.dense(hidden),
                                            approximate=self.approximate))[..., 0]


class ElectraForPreTraining(_BertWithHead):
    """The discriminator: an ELECTRA encoder and a per-token "replaced" logit, ``logits``
    (batch, time). With ``labels`` (batch, time; 1 replaced, 0 original) the output has
    ``loss``, ``discriminator_loss`` (eq 108) over the real tokens."""

    base_model_class = ElectraModel

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__(config)
        self.discriminator = ElectraDiscriminatorHead(config)
        self._init_head(self.discriminator)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None):
        hidden = self._encode(input_ids, attention_mask, token_type_ids,
                              position_ids).last_hidden_state
        logits = self.discriminator(hidden)
        loss = None if labels is None else discriminator_loss(logits, labels, attention_mask)
        return ModelOutput(loss=loss, logits=logits)


def sample_replacements(logits, input_ids, labels, rng):
    """The corrupted ids of replaced token detection: at every masked position (``labels`` !=
    -100) a token drawn from the generator's softmax (eq 109), elsewhere ``input_ids``; and
    ``replaced``, int64 (batch, time), 1 where the result differs from the original (a sample
    equal to the original counts as original). Runs on NumPy, outside the graph: no gradient
    flows through the sampling. ``rng``: a ``numpy.random.Generator``."""
    labels = np.asarray(labels)
    ids = np.asarray(input_ids)
    scores = np.asarray(logits.detach().numpy(), dtype=np.float64)
    probabilities = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    uniform = rng.random(ids.shape)[..., None]
    sampled = np.minimum((probabilities.cumsum(axis=-1) < uniform).sum(axis=-1),
                         scores.shape[-1] - 1)
    masked = labels != IGNORE_INDEX
    corrupted = np.where(masked, sampled, ids)
    original = np.where(masked, labels, ids)
    return corrupted, (corrupted != original).astype(np.int64)


class ElectraPretraining(Module):
    """The generator and the discriminator trained together (Clark et al. section 3, eq 107-110).

    ``ElectraPretraining(discriminator_config, generator_config=None)``; the generator defaults
    to ``discriminator_config.generator(0.25)``. The two share the word and position embeddings
    (so both need the same ``vocab_size``, ``embedding_size`` and ``max_position_embeddings``),
    and the generator may not be wider than the discriminator.

    ``forward(input_ids, attention_mask=None, token_type_ids=None, labels=None, rng=None)``:
    ``input_ids`` already masked (``data.masking.MaskedLMCollator``) and ``labels`` the original
    ids at the masked positions. The generator predicts them (``generator_loss``, eq 107), the
    masked tokens are replaced by its samples (eq 109, no gradient), the discriminator labels
    every token (``discriminator_loss``, eq 108), and ``loss`` is eq 110 with
    ``discriminator_weight`` (50). Also returned: ``logits`` (the generator's, so that filling
    masks works as with any masked LM), ``discriminator_logits``, ``corrupted_ids`` and
    ``replaced``. Samples come from ``rng``, else in training from minitorch_nlp's default
    generator (saved and restored with a run), else from a fixed stream, so that evaluation is
    repeatable and draws nothing from the run's streams.
    """

    def __init__(self, discriminator_config: ElectraConfig,
                 generator_config: ElectraConfig | None = None,
                 discriminator_weight: float = DISCRIMINATOR_WEIGHT) -> None:
        super().__init__()
        generator_config = (discriminator_config.generator() if generator_config is None
                            else generator_config)
        for name, config in (("discriminator_config", discriminator_config),
                             ("generator_config", generator_config)):
            if not isinstance(config, ElectraConfig):
                raise TypeError(f"ElectraPretraining: {name} must be an ElectraConfig, got "
                                f"{type(config).__name__}")
        if generator_config.hidden_size > discriminator_config.hidden_size:
            raise ValueError(f"ElectraPretraining: the generator's hidden_size="
                             f"{generator_config.hidden_size} is larger than the "
                             f"discriminator's {discriminator_config.hidden_size}; a generator "
                             "as strong as the discriminator makes its task too hard (Clark et "
                             "al. 3.2 use 1/4 to 1/2 of its width): use a smaller generator")
        for field in ("vocab_size", "embedding_size", "max_position_embeddings"):
            if getattr(generator_config, field) != getattr(discriminator_config, field):
                raise ValueError(f"ElectraPretraining: the generator's {field}="
                                 f"{getattr(generator_config, field)} differs from the "
                                 f"discriminator's {getattr(discriminator_config, field)}; "
                                 "the two share their token and position embeddings")
        self.discriminator_weight = float(discriminator_weight)
        self.discriminator = ElectraForPreTraining(discriminator_config)
        self.generator = ElectraForMaskedLM(generator_config)
        shared, own = self.discriminator.bert.embeddings, self.generator.bert.embeddings
        own.word_embeddings = shared.word_embeddings
        own.position_embeddings = shared.position_embeddings
        self.config = discriminator_config

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None, rng=None):
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids)
        generated = self.generator(ids, attention_mask, token_type_ids)
        if labels is None:
            return ModelOutput(logits=generated.logits)
        labels = np.asarray(labels.numpy() if hasattr(labels, "numpy") else labels)
        if rng is None:
            rng = mt_random.rng() if self.training else np.random.default_rng(0)
        with no_grad():
            corrupted, replaced = sample_replacements(generated.logits, ids, labels, rng)
        discriminated = self.discriminator(corrupted, attention_mask, token_type_ids)
        mask = None if attention_mask is None else np.asarray(attention_mask)
        generator_loss = masked_lm_loss(generated.logits, labels)                     # eq 107
        disc_loss = discriminator_loss(discriminated.logits, replaced, mask)          # eq 108
        return ModelOutput(loss=generator_loss + self.discriminator_weight * disc_loss,  # eq 110
                           generator_loss=generator_loss, discriminator_loss=disc_loss,
                           logits=generated.logits, discriminator_logits=discriminated.logits,
                           corrupted_ids=corrupted, replaced=replaced)
