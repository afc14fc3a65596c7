"""BART (Lewis et al., 2020, "BART: Denoising Sequence-to-Sequence Pre-training for Natural
Language Generation, Translation, and Comprehension"): the survey's section V-B.

BART is a standard Transformer encoder-decoder trained as a denoising autoencoder: text is
corrupted by the noising functions of ``minitorch_nlp.data.bart_noising`` (the paper's best
setting: text infilling and sentence permutation), the bidirectional encoder reads the corrupted
text, and the autoregressive decoder is trained to write the original, with the cross-entropy of
the decoder against the original document (the reconstruction loss, ``labels=original``).

Its Transformer is the original post-LN one with GELU and three details the checkpoints need:

* learned position embeddings with 2 rows more than ``max_position_embeddings``: position p reads
  row p + 2 (fairseq kept the first rows for padding);
* a LayerNorm on the embeddings (``layernorm_embedding``) before the first layer, and embeddings
  multiplied by sqrt(d_model) only when ``scale_embedding``;
* one embedding matrix for the encoder, the decoder and the output layer, plus a
  ``final_logits_bias`` added to the logits.

mBART (Liu et al., 2020; section V-C, ``MBartForConditionalGeneration``) is the same model with
pre-LN layers, a final LayerNorm after each stack and ``scale_embedding=True``, pretrained on many
languages (eq 30-31, see ``minitorch_nlp.data.multilingual``).
"""
from __future__ import annotations

import math

import numpy as np

from .. import checks, decoding
from .. import functional as F
from ..autograd import Tensor, zeros
from ..nn import (Dropout, Embedding, LayerNorm, LearnedPositionalEmbedding, Module,
                  TransformerDecoder, TransformerEncoder, init)
from .encoder_decoder import (IGNORE_INDEX, conditional_generation_output, encode_and_decode,
                              seq2seq_output, shift_right)
from .configs.bart import BartConfig, MBartConfig, _HF_ACTIVATIONS

__all__ = ["BartConfig", "BartForConditionalGeneration", "BartForTranslation", "BartModel",
           "BartStack", "MBartConfig", "MBartForConditionalGeneration", "POSITION_OFFSET",
           "SourceEncoder"]

POSITION_OFFSET = 2


# ---- the model -----------------------------------------------------------------------------------
class BartStack(Module):
    """BART's encoder or decoder: token embeddings (scaled by sqrt(d_model) when
    ``scale_embedding``) plus learned positions read with BART's offset of 2, a LayerNorm, dropout,
    then the toolkit's ``TransformerEncoder`` / ``TransformerDecoder`` with GELU (post-LN for
    BART; pre-LN with a final LayerNorm for mBART)."""

    def __init__(self, config: BartConfig, is_decoder: bool, pre_ln: bool) -> None:
        super().__init__()
        self.config, self.is_decoder = config, bool(is_decoder)
        side = "decoder" if is_decoder else "encoder"
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = LearnedPositionalEmbedding(
            config.max_position_embeddings + POSITION_OFFSET, config.d_model, std=config.init_std)
        self.layernorm_embedding = LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)
        stack_class = TransformerDecoder if is_decoder else TransformerEncoder
        self.stack = stack_class(
            getattr(config, f"{side}_layers"), config.d_model,
            getattr(config, f"{side}_attention_heads"), getattr(config, f"{side}_ffn_dim"),
            dropout=config.dropout, activation=_HF_ACTIVATIONS[config.activation_function],
            norm_first=pre_ln, attention_dropout=config.attention_dropout,
            activation_dropout=config.activation_dropout)

    def forward(self, embeddings: Tensor, memory=None, *, cache=None, **stack_kwargs):
        """``embeddings``: the tokens' rows of the shared matrix (batch, time, d_model);
        ``stack_kwargs`` (``key_mask``, ``memory_key_mask``, ``output_hidden_states`` ...) go to
        the stack. Positions count from the number of cached ones."""
        batch, time = embeddings.shape[:2]
        start = 0 if cache is None else self.stack.cache_length(cache)
        if start + time > self.config.max_position_embeddings:
            raise ValueError(f"Bart{'Decoder' if self.is_decoder else 'Encoder'}: a sequence of "
                             f"{start + time} tokens is longer than max_position_embeddings="
                             f"{self.config.max_position_embeddings}")
        positions = np.broadcast_to(np.arange(start, start + time) + POSITION_OFFSET,
                                    (batch, time))
        x = self.embed_positions(embeddings * self.embed_scale, position_ids=positions)
        return self.stack(self.dropout(self.layernorm_embedding(x)), memory, cache=cache,
                          **stack_kwargs)


def _reset_bart_parameters(model):
    """N(0, init_std^2) weights and embeddings, zero biases, the padding row zero (fairseq,
    HuggingFace)."""
    for name, parameter in model.named_parameters():
        if name.endswith("bias") and "norm" not in name:
            init.zeros_(parameter)
        elif parameter.ndim == 2:
            init.normal_(parameter, std=model.config.init_std)
    model.shared.weight.data[model.config.pad_token_id] = 0
    model.shared.weight._bump_version()


class BartModel(Module):
    """The bare encoder-decoder (HuggingFace's ``BartModel``): the decoder's
    ``last_hidden_state`` and the encoder's ``encoder_last_hidden_state``. Without
    ``decoder_input_ids`` the decoder reads ``input_ids`` shifted right, as HuggingFace does."""

    pre_ln = False

    def __init__(self, config: BartConfig, pre_ln: bool | None = None) -> None:
        super().__init__()
        pre_ln = self.pre_ln if pre_ln is None else pre_ln
        self.config = config
        self.shared = Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = BartStack(config, is_decoder=False, pre_ln=pre_ln)
        self.decoder = BartStack(config, is_decoder=True, pre_ln=pre_ln)
        _reset_bart_parameters(self)

    def new_cache(self):
        """Empty key/value caches for the decoder, one per layer."""
        return self.decoder.stack.new_cache()

    def encode(self, input_ids, attention_mask=None, output_hidden_states=False,
               output_attentions=False):
        """The encoder's output; ``attention_mask`` (batch, time) 1 on tokens, 0 on padding."""
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        mask = checks.attention_mask(attention_mask, ids.shape, name)
        return self.encoder(self.shared(ids), key_mask=mask,
                            output_hidden_states=output_hidden_states,
                            output_attentions=output_attentions)

    def decode(self, decoder_input_ids, encoder_hidden_states, attention_mask=None,
               decoder_attention_mask=None, cache=None, output_hidden_states=False,
               output_attentions=False):
        """The decoder's output for ``decoder_input_ids`` reading the encoder's states; with a
        ``cache`` only the new positions are fed."""
        name = type(self).__name__
        ids = checks.token_ids(decoder_input_ids, self.config.vocab_size, name,
                               name="decoder_input_ids")
        start = 0 if cache is None else self.decoder.stack.cache_length(cache)
        memory_mask = checks.attention_mask(attention_mask, encoder_hidden_states.shape[:2], name)
        mask = checks.attention_mask(decoder_attention_mask, (ids.shape[0], start + ids.shape[1]),
                                     name)
        return self.decoder(self.shared(ids), encoder_hidden_states, key_mask=mask,
                            memory_key_mask=memory_mask, cache=cache,
                            output_hidden_states=output_hidden_states,
                            output_attentions=output_attentions)

    def shift_right(self, labels):
        """The decoder's teacher-forcing inputs: ``decoder_start_token_id`` then ``labels``."""
        return shift_right(labels, self.config.decoder_start_token_id, self.config.pad_token_id)

    def run(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask,
            encoder_outputs, cache, output_hidden_states, output_attentions):
        """(encoder outputs, decoder outputs); without ``decoder_input_ids`` the decoder reads
        ``input_ids`` shifted right."""
        if decoder_input_ids is None:
            decoder_input_ids = self.shift_right(checks.ids_array(input_ids, "input_ids",
                                                                  type(self).__name__))
        return encode_and_decode(self, input_ids, attention_mask, decoder_input_ids,
                                 decoder_attention_mask, encoder_outputs, cache,
                                 output_hidden_states, output_attentions)

    def forward(self, input_ids: Tensor | np.ndarray | None = None,
                attention_mask: Tensor | np.ndarray | None = None,
                decoder_input_ids: Tensor | np.ndarray | None = None,
                decoder_attention_mask: Tensor | np.ndarray | None = None, encoder_outputs=None,
                cache=None, output_hidden_states: bool = False, output_attentions: bool = False):
        encoder, decoder = self.run(input_ids, attention_mask, decoder_input_ids,
                                    decoder_attention_mask, encoder_outputs, cache,
                                    output_hidden_states, output_attentions)
        return seq2seq_output(encoder, decoder, last_hidden_state=decoder.last_hidden_state)


class BartForConditionalGeneration(decoding.Seq2SeqGeneration, Module):
    """BART with its output layer (HuggingFace's ``BartForConditionalGeneration``): logits =
    h E^T + final_logits_bias, E the shared embedding. With ``labels`` (the original text) the
    decoder reads them shifted right and ``loss`` is BART's reconstruction loss, their mean
    cross-entropy (-100 ignored). ``generate``: ``decoding.generate_seq2seq``."""

    model_class = BartModel

    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config)
        self.register_buffer("final_logits_bias", zeros(1, config.vocab_size))

    def logits(self, hidden):
        """h E^T + final_logits_bias: the output layer is the shared embedding matrix."""
        return F.linear(hidden, self.model.shared.weight) + self.final_logits_bias

    def forward(self, input_ids: Tensor | np.ndarray | None = None,
                attention_mask: Tensor | np.ndarray | None = None,
                decoder_input_ids: Tensor | np.ndarray | None = None,
                decoder_attention_mask: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None, encoder_outputs=None, cache=None,
                output_hidden_states: bool = False, output_attentions: bool = False):
        checks.same_batch(type(self).__name__, input_ids=input_ids, labels=labels,
                          decoder_input_ids=decoder_input_ids)
        if decoder_input_ids is None and labels is not None:
            decoder_input_ids = self.model.shift_right(labels)
        encoder, decoder = self.model.run(input_ids, attention_mask, decoder_input_ids,
                                          decoder_attention_mask, encoder_outputs, cache,
                                          output_hidden_states, output_attentions)
        return conditional_generation_output(encoder, decoder,
                                             self.logits(decoder.last_hidden_state), labels,
                                             type(self).__name__)

    @property
    def encoder_decoder(self):
        """What ``decoding.Seq2SeqGeneration`` encodes and decodes with: ``self.model``."""
        return self.model


class MBartModel(BartModel):
    """mBART's encoder-decoder: pre-LN layers and a final LayerNorm after each stack. Its labels
    end with the target language's id (``Y </s> <lang>``), and the decoder reads them rotated,
    ``<lang> Y </s>``: the language id is the decoder's start token."""

    pre_ln = True

    def shift_right(self, labels):
        """The labels with each row's last real token (its language id) moved to the front."""
        name = type(self).__name__
        labels = checks.ids_array(labels, "labels", name)
        ids = np.where(labels == IGNORE_INDEX, self.config.pad_token_id, labels)
        real = ids != self.config.pad_token_id
        if not real.any(axis=1).all():
            raise ValueError(f"{name}: a row of labels holds only padding; mBART's labels end "
                             "with </s> and the target language's id, which starts the decoder")
        last = real.shape[1] - 1 - np.argmax(real[:, ::-1], axis=1)
        return np.concatenate([ids[np.arange(len(ids)), last][:, None], ids[:, :-1]], axis=1)


class MBartForConditionalGeneration(BartForConditionalGeneration):
    """mBART with its output layer (HuggingFace's ``MBartForConditionalGeneration``)."""

    model_class = MBartModel


# ---- the machine-translation recipe (Lewis et al., section 3.4; the survey's figure 12) ----------
class SourceEncoder(Module):
    """The new, randomly initialised encoder of BART's translation recipe: source-language token
    embeddings (a vocabulary of its own), learned positions, and a small ``TransformerEncoder``.
    Its output (batch, time, d_model) stands where BART's encoder read its token embeddings."""

    def __init__(self, vocab_size: int, d_model: int, *, num_layers: int = 1, num_heads: int = 4,
                 d_ff: int | None = None, max_positions: int = 1024, pad_token_id: int = 0,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab_size = checks.positive_int(vocab_size, "vocab_size", "SourceEncoder")
        self.embed = Embedding(vocab_size, d_model, padding_idx=pad_token_id)
        self.positions = LearnedPositionalEmbedding(max_positions, d_model)
        self.stack = TransformerEncoder(num_layers, d_model, num_heads, d_ff or 4 * d_model,
                                        dropout=dropout, activation="gelu")

    def forward(self, input_ids: Tensor | np.ndarray, key_mask: Tensor | np.ndarray | None = None):
        return self.stack(self.positions(self.embed(input_ids)), key_mask=key_mask)\
            .last_hidden_state


class BartForTranslation(decoding.Seq2SeqGeneration, Module):
    """A pretrained ``bart`` (``BartForConditionalGeneration``) with a new ``SourceEncoder`` in
    front of its encoder, for translating a foreign language into BART's: the source encoder
    maps foreign tokens to vectors that BART's encoder reads in place of its own token
    embeddings (its positions, layers and everything after are BART's), so that BART can
    "de-noise" them into its language. ``labels`` (in BART's vocabulary) give the cross-entropy
    ``loss``; ``generate`` is BART's.

    Training has two stages (``set_stage``): in stage 1 only the source encoder, BART's encoder
    positions and the input projections (W^Q, W^K, W^V) of the self-attention of BART's first
    encoder layer learn, everything else frozen; in stage 2 every parameter learns, for a few
    steps. ``source_options`` go to ``SourceEncoder`` (``num_layers``, ``num_heads``, ``d_ff``,
    ``pad_token_id``).

    Which positions stage 1 trains: the paper (section 3.4) updates "the randomly initialized
    source encoder, the BART positional embeddings, and the self-attention input projection
    matrix of BART's encoder first layer". The positions are read as the encoder's: the new
    encoder replaces "BART's encoder embedding layer", the encoder adds its positions to the new
    encoder's output and its first layer reads the sum, so the three things listed are the path
    from the foreign tokens into BART's frozen encoder layers; the decoder reads and writes
    BART's own language as it did in pretraining, and its positions have nothing new to learn."""

    def __init__(self, bart, source_vocab_size: int, **source_options) -> None:
        super().__init__()
        if not isinstance(bart, BartForConditionalGeneration):
            raise TypeError(f"BartForTranslation: expected a BartForConditionalGeneration, got "
                            f"{type(bart).__name__}")
        self.bart, self.config = bart, bart.config
        self.source_encoder = SourceEncoder(
            source_vocab_size, bart.config.d_model,
            max_positions=bart.config.max_position_embeddings, **source_options)
        self.stage = 2

    @property
    def encoder_decoder(self):
        return self

    def stage_one_parameters(self):
        """(name, parameter) of what stage 1 trains."""
        encoder = self.bart.model.encoder
        attention = encoder.stack.layers[0].self_attn
        modules = {"source_encoder": self.source_encoder,
                   "bart.model.encoder.embed_positions": encoder.embed_positions,
                   **{f"bart.model.encoder.stack.layers.0.self_attn.{name}":
                      getattr(attention, name) for name in ("q_proj", "k_proj", "v_proj")}}
        return [(f"{prefix}.{name}", parameter) for prefix, module in modules.items()
                for name, parameter in module.named_parameters()]

    def set_stage(self, stage):
        """Stage 1: only ``stage_one_parameters`` require gradients; stage 2: all. Returns the
        parameters that now learn (for the optimizer)."""
        if stage not in (1, 2):
            raise ValueError(f"BartForTranslation.set_stage: stage must be 1 (the new encoder, "
                             f"BART's encoder positions and first self-attention input "
                             f"projection) or 2 (everything), got {stage!r}")
        self.stage = stage
        self.requires_grad_(stage == 2)
        if stage == 1:
            for _, parameter in self.stage_one_parameters():
                parameter.requires_grad_(True)
        return [parameter for parameter in self.parameters() if parameter.requires_grad]

    def encode(self, input_ids, attention_mask=None, output_hidden_states=False,
               output_attentions=False):
        """BART's encoder over the source encoder's output for ``input_ids`` (source
        vocabulary)."""
        ids = checks.token_ids(input_ids, self.source_encoder.vocab_size, "BartForTranslation")
        mask = checks.attention_mask(attention_mask, ids.shape, "BartForTranslation")
        return self.bart.model.encoder(self.source_encoder(ids, mask), key_mask=mask,
                                       output_hidden_states=output_hidden_states,
                                       output_attentions=output_attentions)

    def decode(self, *args, **kwargs):
        """BART's decoder (``BartModel.decode``)."""
        return self.bart.model.decode(*args, **kwargs)

    def new_cache(self):
        return self.bart.model.new_cache()

    def logits(self, hidden):
        return self.bart.logits(hidden)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                decoder_input_ids: Tensor | np.ndarray | None = None,
                decoder_attention_mask: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None):
        return self.bart(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                         decoder_attention_mask=decoder_attention_mask, labels=labels,
                         encoder_outputs=self.encode(input_ids, attention_mask))
