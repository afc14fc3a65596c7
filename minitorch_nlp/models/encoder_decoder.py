"""What the pretrained encoder-decoder models (T5, BART, mBART) share beyond the toolkit's layers:
the decoder's teacher-forcing inputs and HuggingFace's ``Seq2SeqModelOutput`` fields.
Generation is ``decoding.Seq2SeqGeneration``."""
from __future__ import annotations

import numpy as np

from .. import checks
from .. import functional as F
from ..nn.outputs import ModelOutput

__all__ = ["IGNORE_INDEX", "conditional_generation_output", "encode_and_decode",
           "seq2seq_output", "shift_right"]

IGNORE_INDEX = -100


def shift_right(labels, start_token_id, pad_token_id):
    """The decoder's inputs for teacher forcing: ``start_token_id`` then the labels but the last,
    ignored labels (-100) replaced by ``pad_token_id``."""
    labels = np.asarray(labels.numpy() if hasattr(labels, "numpy") else labels, dtype=np.int64)
    shifted = np.concatenate([np.full((len(labels), 1), start_token_id), labels[:, :-1]], axis=1)
    return np.where(shifted == IGNORE_INDEX, pad_token_id, shifted)


def seq2seq_output(encoder, decoder, **fields):
    """HuggingFace's encoder-decoder output: ``fields`` (``loss``, ``logits``,
    ``last_hidden_state`` ...) and the encoder's and decoder's ``ModelOutput``s spread out."""
    return ModelOutput(**fields, encoder_last_hidden_state=encoder.last_hidden_state,
                       encoder_hidden_states=encoder.hidden_states,
                       encoder_attentions=encoder.attentions,
                       decoder_hidden_states=decoder.hidden_states,
                       decoder_attentions=decoder.attentions,
                       cross_attentions=decoder.cross_attentions)


def conditional_generation_output(encoder, decoder, logits, labels, where):
    """``seq2seq_output`` with the ``logits`` and, when ``labels`` (batch, target_time) are
    given, ``loss``: their mean cross-entropy, labels of -100 ignored."""
    loss = None
    if labels is not None:
        targets = checks.ids_array(labels, "labels", where, shape=logits.shape[:2])
        loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
    return seq2seq_output(encoder, decoder, loss=loss, logits=logits)


def encode_and_decode(model, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask,
                      encoder_outputs, cache, output_hidden_states, output_attentions):
    """(encoder outputs, decoder outputs) of a ``model`` with ``encode`` and ``decode``;
    ``encoder_outputs`` reuses an encoding already computed."""
    encoded = None if encoder_outputs is None else encoder_outputs.last_hidden_state
    checks.same_batch(type(model).__name__, input_ids=input_ids, encoder_outputs=encoded,
                      decoder_input_ids=decoder_input_ids)
    if encoder_outputs is None:
        encoder_outputs = model.encode(input_ids, attention_mask, output_hidden_states,
                                       output_attentions)
    decoder_outputs = model.decode(decoder_input_ids, encoder_outputs.last_hidden_state,
                                   attention_mask, decoder_attention_mask, cache,
                                   output_hidden_states, output_attentions)
    return encoder_outputs, decoder_outputs
