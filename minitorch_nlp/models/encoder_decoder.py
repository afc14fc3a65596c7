"""What the pretrained encoder-decoder models (T5, BART, mBART) share beyond the toolkit's layers:
the decoder's teacher-forcing inputs and HuggingFace's ``Seq2SeqModelOutput`` fields.
Generation is ``decoding.Seq2SeqGeneration``."""
from __future__ import annotations

import numpy as np

from ..nn.outputs import ModelOutput

__all__ = ["IGNORE_INDEX", "seq2seq_output", "shift_right"]

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
