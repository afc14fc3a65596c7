"""MobileBERT (Sun, Yu, Song, Liu, Yang and Zhou, 2020, "MobileBERT: a Compact Task-Agnostic BERT
for Resource-Limited Devices"), the survey's section VI-A.3, eq 45.

MobileBERT is as deep as BERT-large (24 layers) but thin: each layer works at a narrow width B
(128) inside a wider inter-block width H (512), through bottlenecks (Sun et al. section 3.1,
Figure 1c):

* ``NoNorm`` (eq 45): NoNorm(h) = gamma o h + beta, an element-wise affine map in place of
  LayerNorm (section 3.4: normalisation and GELU cost most of the latency on a phone; MobileBERT
  uses ReLU);
* ``MobileBertEmbeddings``: word embeddings of a small size E (128), the embeddings of each token
  and its two neighbours concatenated (a kernel-3 convolution, the "3-gram" embedding) and mapped
  to H, plus position and segment embeddings, then NoNorm;
* ``MobileBertLayer``: the input bottleneck maps H -> B for the layer's residual stream, a
  second (shared) bottleneck gives the queries and keys, the values come from the H-wide input;
  multi-head attention at width B; F feed-forward networks stacked one after another (4 in
  MobileBERT, section 3.2: they restore the ratio of attention to feed-forward parameters that
  the bottleneck upset); the output bottleneck maps B -> H, added to the layer's input;
* ``MobileBertLMHead``: the masked-LM head's decoder is the E-wide word embeddings extended by
  H - E rows of its own, so that the H-wide states can be decoded.

The models mirror HuggingFace's (``MobileBertModel``, ``MobileBertForMaskedLM``,
``MobileBertForPreTraining``); the key map at the end of this file loads their checkpoints. The
configurations implemented are MobileBERT's own (bottlenecks with a shared query/key bottleneck,
NoNorm, the 3-gram embedding); the inverted-bottleneck IB-BERT teacher is not.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import checks, cookbook
from .. import functional as F
from ..autograd import concatenate, empty, ones, zeros
from ..io.huggingface import Rule
from ..nn import (Dropout, Embedding, FeedForward, LayerNorm, LearnedPositionalEmbedding, Linear,
                  Module, ModuleList, MultiHeadAttention, Parameter, TransformerStack, init)
from .bert import (BertConfig, BertForMaskedLM, BertForPreTraining,
                   BertForSequenceClassification, BertModel, register_bert_architecture,
                   weight_and_bias)

__all__ = ["MobileBertConfig", "MobileBertEmbeddings", "MobileBertForMaskedLM",
           "MobileBertForPreTraining", "MobileBertForSequenceClassification", "MobileBertLMHead",
           "MobileBertLayer", "MobileBertModel", "NoNorm", "no_norm"]


@dataclass
class MobileBertConfig(BertConfig):
    """MobileBERT's hyper-parameters under HuggingFace's names, MobileBERT's defaults (Sun et al.
    Table 1): 24 layers, inter-block width H = 512, intra-block width B = 128
    (``intra_bottleneck_size``), 4 heads, feed-forward width 512, 4 stacked feed-forward
    networks, embedding size E = 128, ReLU, NoNorm, no hidden dropout."""

    hidden_size: int = 512
    num_hidden_layers: int = 24
    num_attention_heads: int = 4
    intermediate_size: int = 512
    hidden_act: str = "relu"
    hidden_dropout_prob: float = 0.0
    embedding_size: int = 128
    intra_bottleneck_size: int = 128
    num_feedforward_networks: int = 4
    trigram_input: bool = True
    use_bottleneck: bool = True
    use_bottleneck_attention: bool = False
    key_query_shared_bottleneck: bool = True
    normalization_type: str = "no_norm"
    classifier_activation: bool = True

    model_type = "mobilebert"
    activations = {"relu": "relu", "gelu": "gelu"}
    # MobileBERT's own settings; HuggingFace's other switches (LayerNorm, no bottleneck ...) are
    # not implemented
    IMPLEMENTED = dict(trigram_input=True, use_bottleneck=True, use_bottleneck_attention=False,
                       key_query_shared_bottleneck=True, normalization_type="no_norm",
                       classifier_activation=True)

    def __post_init__(self):
        super().__post_init__()
        name = type(self).__name__
        for field in ("embedding_size", "intra_bottleneck_size", "num_feedforward_networks"):
            checks.positive_int(getattr(self, field), field, name)
        for field, value in self.IMPLEMENTED.items():
            if getattr(self, field) != value:
                raise ValueError(f"{name}: {field}={getattr(self, field)!r} is not implemented; "
                                 f"MobileBERT's setting is {field}={value!r}")
        if self.intra_bottleneck_size % self.num_attention_heads:
            raise ValueError(f"{name}: intra_bottleneck_size={self.intra_bottleneck_size} is not "
                             f"a multiple of num_attention_heads={self.num_attention_heads} "
                             "(attention works at the bottleneck's width)")
        if self.embedding_size > self.hidden_size:
            raise ValueError(f"{name}: embedding_size={self.embedding_size} must not exceed "
                             f"hidden_size={self.hidden_size} (the decoder extends the "
                             "embeddings to hidden_size)")

    def to_hf(self):
        hf_config = super().to_hf()
        hf_config.pop("position_embedding_type")
        return hf_config


@cookbook.equation(45)
def no_norm(h, weight, bias):
    r"""MobileBERT's replacement for LayerNorm (Sun et al. eq 2)::

        NoNorm(h) = gamma o h + beta,      gamma, beta in R^n

    an element-wise affine map (o the Hadamard product) over the last axis of ``h``: no
    statistics, so no reductions at inference time. Unlike LayerNorm it does not bound the
    activations, which therefore grow with depth."""
    return h * weight + bias


class NoNorm(Module):
    """``no_norm`` with learnt gamma (``weight``, 1 at first) and beta (``bias``, 0 at first)."""

    def __init__(self, features):
        super().__init__()
        self.weight = Parameter(ones(checks.positive_int(features, "features", "NoNorm")))
        self.bias = Parameter(zeros(features))

    def forward(self, h):
        return no_norm(h, self.weight, self.bias)


class MobileBertEmbeddings(Module):
    """Word embeddings of size E; each token's with its right and left neighbours' concatenated
    (zeros past the ends: a kernel-3 convolution over the sequence) and mapped to H by
    ``embedding_transformation``; plus position and segment embeddings; NoNorm and dropout
    (Sun et al. section 3.3, "embedding factorization")."""

    segments = True

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.embedding_size,
                                         padding_idx=config.pad_token_id)
        self.embedding_transformation = Linear(3 * config.embedding_size, config.hidden_size)
        self.position_embeddings = LearnedPositionalEmbedding(config.max_position_embeddings,
                                                              config.hidden_size)
        self.token_type_embeddings = Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = NoNorm(config.hidden_size)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.max_length = config.max_position_embeddings

    def forward(self, input_ids, token_type_ids, position_ids=None):
        x = self.word_embeddings(input_ids)                                 # (batch, time, E)
        edge = x[:, :1] * 0.0
        following = concatenate([x[:, 1:], edge], axis=1)
        preceding = concatenate([edge, x[:, :-1]], axis=1)
        x = self.embedding_transformation(concatenate([following, x, preceding], axis=-1))
        x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(self.position_embeddings(x, position_ids=position_ids)))


class Bottleneck(Module):
    """A linear map between the inter-block and the intra-block widths, then NoNorm."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.dense = Linear(in_features, out_features)
        self.norm = NoNorm(out_features)

    def forward(self, x):
        return self.norm(self.dense(x))


class BottleneckAttention(MultiHeadAttention):
    """Multi-head attention at the bottleneck width B whose values come from the H-wide layer
    input (queries and keys from the shared bottleneck): ``MultiHeadAttention`` with a wider
    value projection."""

    def __init__(self, width, num_heads, value_width, dropout=0.0):
        super().__init__(width, num_heads, dropout=dropout)
        self.value_width = value_width
        self.v_proj = Linear(value_width, width)

    def project(self, query, key, value, cache):
        name = "MobileBertLayer"
        checks.features(query, self.d_model, "query", name)
        checks.features(value, self.value_width, "value", name)
        return (self.split_heads(self.q_proj(query)), self.split_heads(self.k_proj(key)),
                self.split_heads(self.v_proj(value)))


class MobileBertLayer(Module):
    """One MobileBERT block (Sun et al. Figure 1c, HuggingFace's layout), on x (batch, time, H)::

        s = NoNorm(W_a x)                  the shared bottleneck: queries and keys   (B)
        r = NoNorm(W_i x)                  the input bottleneck: the residual stream (B)
        r = NoNorm(MultiHead(s, s, x) + r)
        r = NoNorm(FFN_k(r) + r)           k = 1 .. F, the stacked feed-forward networks
        out = NoNorm(Dropout(W_o r) + x)   the output bottleneck                     (H)

    Takes the keyword arguments of a ``TransformerLayer`` (``key_mask``, ``head_mask``,
    ``attentions``), so ``TransformerStack`` runs a list of them."""

    def __init__(self, config):
        super().__init__()
        wide, narrow = config.hidden_size, config.intra_bottleneck_size
        self.attention_bottleneck = Bottleneck(wide, narrow)
        self.input_bottleneck = Bottleneck(wide, narrow)
        self.self_attn = BottleneckAttention(narrow, config.num_attention_heads, wide,
                                             dropout=config.attention_probs_dropout_prob)
        self.attention_norm = NoNorm(narrow)
        activation = self.activation = config.activations[config.hidden_act]
        self.stacked_ffns = ModuleList(
            [FeedForward(narrow, config.intermediate_size, activation=activation)
             for _ in range(config.num_feedforward_networks - 1)])
        self.stacked_norms = ModuleList([NoNorm(narrow)
                                         for _ in range(config.num_feedforward_networks - 1)])
        self.feed_forward = FeedForward(narrow, config.intermediate_size, activation=activation)
        self.ffn_norm = NoNorm(narrow)
        self.output_bottleneck = Linear(narrow, wide)
        self.output_norm = NoNorm(wide)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x, memory=None, *, key_mask=None, cache=None, attentions=None,
                head_mask=None):
        shared = self.attention_bottleneck(x)
        residual = self.input_bottleneck(x)
        attended = self.self_attn(shared, shared, x, key_mask=key_mask, head_mask=head_mask,
                                  need_weights=attentions is not None)
        if attentions is not None:
            attended, attentions["self"] = attended
        residual = self.attention_norm(attended + residual)
        for feed_forward, norm in zip(self.stacked_ffns, self.stacked_norms):
            residual = norm(feed_forward(residual) + residual)
        residual = self.ffn_norm(self.feed_forward(residual) + residual)
        return self.output_norm(self.dropout(self.output_bottleneck(residual)) + x)


class MobileBertModel(BertModel):
    """The MobileBERT encoder: ``BertModel`` with ``MobileBertEmbeddings`` and a stack of
    ``MobileBertLayer``s; the pooler is BERT's (tanh of a dense layer on [CLS])."""

    config_class = MobileBertConfig
    embeddings_class = MobileBertEmbeddings

    @staticmethod
    def build_encoder(config):
        return TransformerStack([MobileBertLayer(config)
                                 for _ in range(config.num_hidden_layers)])


class MobileBertLMHead(Module):
    """The masked-LM head: dense, activation, LayerNorm (HuggingFace keeps a LayerNorm here),
    then the decoder [word embeddings (V, E) | its own (V, H - E) columns] plus a bias;
    ``embedding_size`` is E, the word embeddings' width."""

    def __init__(self, config, embedding_size):
        super().__init__()
        self.activation = config.activations[config.hidden_act]
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.norm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.extra_columns = Parameter(init.normal_(
            empty(config.hidden_size - embedding_size, config.vocab_size),
            std=config.initializer_range))
        self.bias = Parameter(zeros(config.vocab_size))

    def forward(self, hidden, word_embeddings):
        x = self.dense(hidden)
        x = self.norm(F.relu(x) if self.activation == "relu" else F.gelu(x))
        decoder = concatenate([word_embeddings, self.extra_columns.T], axis=1)   # (V, H)
        return F.linear(x, decoder, self.bias)


class MobileBertForMaskedLM(BertForMaskedLM):
    """MobileBERT with the masked-LM head (no pooler). ``labels``: the original ids at masked
    positions, -100 elsewhere."""

    base_model_class = MobileBertModel
    lm_head_class = MobileBertLMHead


class MobileBertForPreTraining(BertForPreTraining):
    """MobileBERT with both of BERT's pretraining heads: masked LM on every token
    (``prediction_logits``) and next-sentence prediction on the pooled [CLS]
    (``seq_relationship_logits``); ``loss`` is the sum of the two mean losses."""

    base_model_class = MobileBertModel
    lm_head_class = MobileBertLMHead


class MobileBertForSequenceClassification(BertForSequenceClassification):
    """A label per sequence: dropout and a linear layer on the pooled [CLS], as
    ``BertForSequenceClassification`` (and HuggingFace's MobileBERT head)."""

    base_model_class = MobileBertModel


# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
MAX_STACKED_FFNS = 16     # key-map rules for stacked feed-forward networks 0 .. 15


def mobilebert_rules(hf_prefix, prefix, pooler):
    """The key map of ``MobileBertModel`` under HuggingFace's ``hf_prefix`` (``"mobilebert."`` or
    ``""``) and our ``prefix``. Nothing is transposed; NoNorm keeps HuggingFace's ``LayerNorm``
    names."""
    hf_embed, embed = f"{hf_prefix}embeddings.", f"{prefix}embeddings."
    rules = [Rule(f"{hf_embed}word_embeddings.weight", f"{embed}word_embeddings.weight"),
             Rule(f"{hf_embed}position_embeddings.weight", f"{embed}position_embeddings.table"),
             Rule(f"{hf_embed}token_type_embeddings.weight",
                  f"{embed}token_type_embeddings.weight"),
             *weight_and_bias(f"{hf_embed}embedding_transformation",
                              f"{embed}embedding_transformation"),
             *weight_and_bias(f"{hf_embed}LayerNorm", f"{embed}norm")]
    hf_layer, layer = f"{hf_prefix}encoder.layer.{{i}}.", f"{prefix}encoder.layers.{{i}}."
    pairs = [("attention.self.query", "self_attn.q_proj"),
             ("attention.self.key", "self_attn.k_proj"),
             ("attention.self.value", "self_attn.v_proj"),
             ("attention.output.dense", "self_attn.out_proj"),
             ("attention.output.LayerNorm", "attention_norm"),
             ("intermediate.dense", "feed_forward.linear1"),
             ("output.dense", "feed_forward.linear2"),
             ("output.LayerNorm", "ffn_norm"),
             ("output.bottleneck.dense", "output_bottleneck"),
             ("output.bottleneck.LayerNorm", "output_norm"),
             ("bottleneck.input.dense", "input_bottleneck.dense"),
             ("bottleneck.input.LayerNorm", "input_bottleneck.norm"),
             ("bottleneck.attention.dense", "attention_bottleneck.dense"),
             ("bottleneck.attention.LayerNorm", "attention_bottleneck.norm")]
    for j in range(MAX_STACKED_FFNS):
        pairs += [(f"ffn.{j}.intermediate.dense", f"stacked_ffns.{j}.linear1"),
                  (f"ffn.{j}.output.dense", f"stacked_ffns.{j}.linear2"),
                  (f"ffn.{j}.output.LayerNorm", f"stacked_norms.{j}")]
    for hf, ours in pairs:
        rules += weight_and_bias(hf_layer + hf, layer + ours)
    if pooler:
        rules += weight_and_bias(f"{hf_prefix}pooler.dense", f"{prefix}pooler.dense")
    return rules


MOBILEBERT_LM_HEAD_RULES = [*weight_and_bias("cls.predictions.transform.dense", "mlm.dense"),
                            *weight_and_bias("cls.predictions.transform.LayerNorm", "mlm.norm"),
                            Rule("cls.predictions.dense.weight", "mlm.extra_columns"),
                            Rule("cls.predictions.bias", "mlm.bias")]
register_bert_architecture(MobileBertModel, mobilebert_rules("", "", pooler=True),
                           default_for_type=True)
register_bert_architecture(MobileBertForMaskedLM, mobilebert_rules("mobilebert.", "bert.", False)
                           + MOBILEBERT_LM_HEAD_RULES)
register_bert_architecture(MobileBertForSequenceClassification,
                           mobilebert_rules("mobilebert.", "bert.", True)
                           + weight_and_bias("classifier", "classifier"))
register_bert_architecture(MobileBertForPreTraining,
                           mobilebert_rules("mobilebert.", "bert.", True)
                           + MOBILEBERT_LM_HEAD_RULES
                           + weight_and_bias("cls.seq_relationship", "nsp"))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------
from .bert import _NO_SPECIAL_TOKENS  # noqa: E402 (this block only)
from .registry import MASKED_LM, ModelFamily, register_family  # noqa: E402


def _build_for_training(settings, tokenizer):
    """A ``MobileBertForMaskedLM`` for a run's ``settings`` (``training.TrainConfig``) in
    MobileBERT's proportions (Sun et al. Table 1, H = 512, B = E = 128, feed-forward width 512,
    4 stacked feed-forward networks): inter-block width H = ``n_embd``, intra-block width and
    embedding size B = E = H / 4, feed-forward width H; ``block_size`` positions, [CLS] and [SEP]
    included. Attention works at width B, so ``n_head`` must divide H / 4."""
    from ..training import SettingError
    bottleneck = settings.n_embd // 4
    if bottleneck < 1 or bottleneck % settings.n_head:
        raise SettingError("n_head", f"={settings.n_head} must divide a mobilebert's bottleneck "
                           f"width n_embd / 4 = {settings.n_embd} // 4 = {bottleneck} (its "
                           "attention works at that width); give a multiple of "
                           f"{4 * settings.n_head} as --n-embd")
    return MobileBertForMaskedLM(MobileBertConfig(
        vocab_size=len(tokenizer), hidden_size=settings.n_embd,
        num_hidden_layers=settings.n_layer, num_attention_heads=settings.n_head,
        intermediate_size=settings.n_embd, embedding_size=bottleneck,
        intra_bottleneck_size=bottleneck, max_position_embeddings=settings.block_size,
        hidden_dropout_prob=settings.dropout, attention_probs_dropout_prob=settings.dropout,
        pad_token_id=tokenizer.pad_token_id))


register_family(ModelFamily(
    name="mobilebert", summary="a MobileBERT encoder (bottlenecks, NoNorm, stacked feed-forward "
    "networks, 3-gram embedding), masked LM",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="wordpiece",
    bpe_style="roberta", refused_tokenizers={"char": _NO_SPECIAL_TOKENS},
    hf_architectures=("MobileBertForMaskedLM",)))
