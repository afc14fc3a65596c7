"""The Transformer (Vaswani et al., 2017, "Attention Is All You Need"): the encoder-decoder model
for translation of the survey's section IV-A (eq 11-12; the layers are in
``minitorch_nlp.nn.transformer``).

Read top to bottom, ``forward`` follows the paper's Figure 1:

1. source and target tokens are embedded, the embeddings multiplied by sqrt(d_model) (section
   3.4), positional encodings added (section 3.5) and dropout applied (section 5.4);
2. the encoder stack turns the source into "memory"; padded source positions are masked;
3. the decoder stack reads the shifted target (<bos> y_1 .. y_{n-1}) with causal self-attention
   and attends to the memory;
4. a linear map tied to the embedding matrix (the same matrix for source, target and output, as
   in the paper's shared source-target vocabulary) gives the logits of the next token.

``loss`` is cross-entropy with label smoothing (eps_ls = 0.1 in the paper, section 5.4) that
ignores padding. ``greedy_decode``, ``beam_decode`` and ``generate`` (every option of
``decoding.generate_seq2seq``) generate with ``minitorch_nlp.decoding``; ``start_decoding``,
``step`` and ``generate`` are ``decoding.Seq2SeqGeneration``'s, the interface BART and T5 share,
one token at a time, reusing each layer's keys and values (the KV cache) so that a step costs one
row of attention instead of re-running the whole prefix.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from .. import checks, decoding
from .. import functional as F
from ..autograd import Tensor
from ..nn import (Dropout, Embedding, LearnedPositionalEmbedding, Module,
                  SinusoidalPositionalEncoding, TransformerDecoder, TransformerEncoder, init)

__all__ = ["Transformer"]

POSITIONAL = ("sinusoidal", "learned")


def _ids(ids, name):
    """Token ids as an int64 NumPy array (from a Tensor, an array or nested lists)."""
    array = ids.numpy() if isinstance(ids, Tensor) else np.asarray(ids)
    if array.ndim != 2 or array.dtype.kind not in "iu":
        raise ValueError(f"Transformer: {name} must be integer token ids of shape (batch, time), "
                         f"got {array.dtype} {array.shape}")
    return array.astype(np.int64, copy=False)


class Transformer(decoding.Seq2SeqGeneration, Module):
    """The encoder-decoder Transformer. The defaults are the paper's base model (d_model = 512,
    8 heads, 6 + 6 layers, d_ff = 2048, dropout 0.1, label smoothing 0.1, post-LN).

    ``share_embeddings=True`` (the paper's setting) uses one embedding matrix for the source, the
    target and the output projection, so both vocabularies must be the same one. With ``False``
    source and target have their own embeddings and the output projection is tied to the
    target's. ``positional`` is ``"sinusoidal"`` (the paper) or ``"learned"``. ``norm_first=True``
    makes every layer pre-LN (with a final LayerNorm after each stack). ``pad_id``, ``bos_id``
    and ``eos_id`` are those of ``minitorch_nlp.data.Vocab``.

    Masks are bool arrays, True on real tokens; where one is not given it is computed from
    ``pad_id`` (every position holding ``pad_id`` is padding).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int | None = None, *,
                 d_model: int = 512, num_heads: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, d_ff: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, max_len: int = 256,
                 positional: str = "sinusoidal", share_embeddings: bool = True,
                 label_smoothing: float = 0.1, pad_id: int = 0, bos_id: int = 1,
                 eos_id: int = 2) -> None:
        super().__init__()
        tgt_vocab_size = src_vocab_size if tgt_vocab_size is None else tgt_vocab_size
        if share_embeddings and tgt_vocab_size != src_vocab_size:
            raise ValueError(f"Transformer: share_embeddings=True needs one vocabulary for source "
                             f"and target, got src_vocab_size={src_vocab_size} and "
                             f"tgt_vocab_size={tgt_vocab_size}; build a joint vocabulary or pass "
                             "share_embeddings=False")
        if positional not in POSITIONAL:
            raise ValueError(f"Transformer: positional must be one of {POSITIONAL}, got "
                             f"{positional!r}")
        # the constructor's arguments, and the ids under the names decoding.Seq2SeqGeneration reads
        self.config = SimpleNamespace(
            src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, d_model=d_model,
            num_heads=num_heads, num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers, d_ff=d_ff, dropout=dropout,
            activation=activation, norm_first=norm_first, max_len=max_len, positional=positional,
            share_embeddings=share_embeddings, label_smoothing=label_smoothing, pad_id=pad_id,
            bos_id=bos_id, eos_id=eos_id, pad_token_id=pad_id, eos_token_id=eos_id,
            decoder_start_token_id=bos_id)
        self.d_model, self.max_len = d_model, max_len
        self.label_smoothing = label_smoothing
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id

        self.src_embed = self._embedding(src_vocab_size, d_model, pad_id)
        self.tgt_embed = (self.src_embed if share_embeddings
                          else self._embedding(tgt_vocab_size, d_model, pad_id))
        self.positions = (SinusoidalPositionalEncoding(d_model, max_len)
                          if positional == "sinusoidal"
                          else LearnedPositionalEmbedding(max_len, d_model))
        self.dropout = Dropout(dropout)
        stack = dict(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout,
                     activation=activation, norm_first=norm_first)
        self.encoder = TransformerEncoder(num_encoder_layers, **stack)
        self.decoder = TransformerDecoder(num_decoder_layers, **stack)

    @staticmethod
    def _embedding(vocab_size, d_model, pad_id):
        """N(0, 1/d_model) entries: multiplied by sqrt(d_model) they have unit variance, the
        scale of the positional encodings, and as the tied output projection they give logits of
        unit variance at the start."""
        embedding = Embedding(vocab_size, d_model, padding_idx=pad_id)
        init.normal_(embedding.weight, std=d_model ** -0.5)
        embedding.weight.data[pad_id] = 0
        embedding.weight._bump_version()
        return embedding

    # ---- the model ----------------------------------------------------------------------------
    def _key_mask(self, ids, mask):
        return ids != self.pad_id if mask is None else mask

    def embed(self, ids, embedding, start=0):
        """Embedding * sqrt(d_model) + positional encoding, then dropout (sections 3.4, 3.5,
        5.4); ``start`` is the position of the first token (> 0 when decoding with a cache)."""
        x = embedding(ids) * math.sqrt(self.d_model)
        return self.dropout(self.positions(x, start=start))

    def encode(self, input_ids, attention_mask=None, output_attentions=False):
        """The encoder's output (a ``ModelOutput``): ``last_hidden_state`` is the "memory"
        (batch, src_time, d_model); with ``output_attentions=True`` also each layer's
        self-attention weights. ``attention_mask`` True on real source tokens (None: from
        ``pad_id``)."""
        src = _ids(input_ids, "src")
        return self.encoder(self.embed(src, self.src_embed),
                            key_mask=self._key_mask(src, attention_mask),
                            output_attentions=output_attentions)

    def decode(self, decoder_input_ids, memory, attention_mask, decoder_attention_mask=None,
               cache=None, output_attentions=False):
        """The decoder's output (a ``ModelOutput``, hidden states (batch, tgt_time, d_model)) for
        ``decoder_input_ids`` reading the encoder's ``memory`` and its key mask
        ``attention_mask``. With a ``cache`` (``new_cache()``), only the new positions are fed."""
        tgt_in = _ids(decoder_input_ids, "tgt_in")
        start = 0 if cache is None else TransformerDecoder.cache_length(cache)
        if decoder_attention_mask is None and cache is None:
            decoder_attention_mask = tgt_in != self.pad_id
        return self.decoder(self.embed(tgt_in, self.tgt_embed, start), memory,
                            key_mask=decoder_attention_mask, memory_key_mask=attention_mask,
                            cache=cache, output_attentions=output_attentions)

    def logits(self, hidden):
        """The output layer, tied to the target embedding E (section 3.4): h E^T."""
        return F.linear(hidden, self.tgt_embed.weight)

    def new_cache(self):
        """Empty key/value caches for the decoder, one per layer."""
        return self.decoder.new_cache()

    @property
    def encoder_decoder(self):
        """What ``decoding.Seq2SeqGeneration`` encodes and decodes with: the model itself."""
        return self

    def forward(self, src: Tensor | np.ndarray, tgt_in: Tensor | np.ndarray,
                src_key_mask: Tensor | np.ndarray | None = None,
                tgt_key_mask: Tensor | np.ndarray | None = None, need_weights: bool = False):
        """Logits (batch, tgt_time, tgt_vocab_size) for teacher forcing: position t predicts
        ``tgt_in[:, t + 1]``, i.e. ``tgt_out[:, t]``. With ``need_weights=True`` returns
        ``(logits, {"encoder": [...], "decoder": [...]})``, every layer's attention weights
        (batch, heads, query_time, key_time), for pictures."""
        checks.same_batch("Transformer", src=src, tgt_in=tgt_in)
        src = _ids(src, "src")
        src_key_mask = self._key_mask(src, src_key_mask)
        encoded = self.encode(src, src_key_mask, output_attentions=need_weights)
        decoded = self.decode(tgt_in, encoded.last_hidden_state, src_key_mask, tgt_key_mask,
                              output_attentions=need_weights)
        logits = self.logits(decoded.last_hidden_state)
        if not need_weights:
            return logits
        return logits, {"encoder": list(encoded.attentions),
                        "decoder": [{"self": s, "cross": c} for s, c in
                                    zip(decoded.attentions, decoded.cross_attentions)]}

    def loss(self, src, tgt_in, tgt_out, src_key_mask=None, tgt_key_mask=None):
        """Mean label-smoothed cross-entropy over the real (non-padding) target tokens."""
        logits = self(src, tgt_in, src_key_mask, tgt_key_mask)
        return F.cross_entropy(logits, tgt_out, ignore_index=self.pad_id,
                               label_smoothing=self.label_smoothing)

    # ---- generation ---------------------------------------------------------------------------
    def start_decoding(self, input_ids, attention_mask=None, use_cache=True):
        """``decoding.Seq2SeqGeneration.start_decoding`` with the source mask taken from
        ``pad_id`` when none is given (the decoder needs it at every step)."""
        src = _ids(input_ids, "src")
        return super().start_decoding(src, self._key_mask(src, attention_mask), use_cache)

    def _max_len(self, src, max_len):
        return min(self.max_len, 2 * src.shape[1] + 10) if max_len is None else max_len

    def greedy_decode(self, src, src_key_mask=None, max_len=None, use_cache=True):
        """The most likely next token at every step (eq 1 approximated one step at a time):
        ids (batch, <= max_len) after <bos>, each row ending with <eos> unless cut off."""
        src = _ids(src, "src")
        with self.inference():
            state = self.start_decoding(src, src_key_mask, use_cache)
            return decoding.greedy_search(self.step, state, batch_size=src.shape[0],
                                          bos_id=self.bos_id, eos_id=self.eos_id,
                                          max_len=self._max_len(src, max_len),
                                          pad_id=self.pad_id)

    def beam_decode(self, src, src_key_mask=None, beam_size=4, max_len=None,
                    length_penalty=0.6, use_cache=True):
        """Beam search with Wu et al.'s (2016) length normalisation (alpha = 0.6 and beam 4 in
        the paper, section 6.1). Returns ``(ids (batch, length), scores (batch,))``."""
        src = _ids(src, "src")
        with self.inference():
            state = self.start_decoding(src, src_key_mask, use_cache)
            return decoding.beam_search(self.step, state, batch_size=src.shape[0],
                                        bos_id=self.bos_id, eos_id=self.eos_id,
                                        max_len=self._max_len(src, max_len),
                                        beam_size=beam_size, length_penalty=length_penalty,
                                        pad_id=self.pad_id)
