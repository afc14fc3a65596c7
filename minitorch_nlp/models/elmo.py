"""ELMo: Embeddings from Language Models (Peters et al., 2018), the survey's section IV-B, eq 13-17.

A bidirectional language model (biLM) is pretrained on raw text; its internal states then serve,
frozen, as contextual word features for another task.

* Every token gets a context-independent representation x_k from its characters: character
  embeddings, 1-D convolutions of several widths max-pooled over the characters (Kim et al.,
  2016), highway layers (Srivastava et al., 2015) and a linear projection (``CharCNN``).
* A forward LSTM language model reads x_1 .. x_k and predicts t_{k+1} (eq 13); a separate
  backward one reads x_N .. x_k and predicts t_{k-1} (eq 14). The two share the token encoder and
  the softmax layer, and are trained together on the sum of both log-likelihoods (``BiLM.loss``).
* Layer j of the biLM represents token k by h_kj = [fwd h_kj; bwd h_kj], and layer 0 by
  [x_k; x_k] (eq 15-16, ``BiLM.layer_representations``).
* A task collapses the L + 1 layers into one vector per token with softmax-normalised weights and
  a scale: ELMo_k = gamma * sum_j softmax(s)_j h_kj (eq 17, ``ScalarMix``; ``ELMo`` puts it on a
  frozen biLM).

Departures from the paper's full-size model, to keep it small and readable: the LSTMs are plain
(no cell projection or clipping; the LSTM size is the token size, ``dim``), and the characters are
UTF-8 bytes with begin- and end-of-word markers (the paper's 262-symbol alphabet less its
sentence-boundary characters: sentence boundaries here are ordinary tokens such as ``<bos>``).
As in the paper, layers above the first get a residual connection, and h_kj includes it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Tensor, concatenate, empty, no_grad, ones, pad, stack, zeros
from ..nn import LSTM, Dropout, Embedding, Linear, Module, ModuleList, Parameter, init
from .configs.elmo import BiLMConfig

__all__ = ["BEGIN_OF_WORD", "CHAR_PAD", "CHAR_VOCAB_SIZE", "END_OF_WORD", "BiLM", "BiLMConfig",
           "BiLMStates", "CharCNN", "CharConv", "ELMo", "Highway", "ScalarMix",
           "encode_characters"]

CHAR_PAD = 0            # pads short tokens, and fills every character of a padded position
BEGIN_OF_WORD = 257     # byte b of a token's UTF-8 encoding has character id b + 1
END_OF_WORD = 258
CHAR_VOCAB_SIZE = 259
_IGNORE = -100          # target id of positions that predict nothing


def encode_characters(sentences, max_chars=16):
    """Character ids of tokenised sentences: an int64 array ``(batch, time, max_chars)``.

    Each token becomes ``BEGIN_OF_WORD``, its UTF-8 bytes (+1, so that 0 stays free for padding;
    cut to ``max_chars - 2`` bytes), ``END_OF_WORD``, then ``CHAR_PAD``. Positions after a
    sentence's end are all ``CHAR_PAD``.
    """
    if max_chars < 3:
        raise ValueError(f"encode_characters: max_chars must be >= 3 (two word-boundary markers "
                         f"and a character), got {max_chars}")
    sentences = [list(s) for s in sentences]
    length = max((len(s) for s in sentences), default=0)
    ids = np.full((len(sentences), length, max_chars), CHAR_PAD, dtype=np.int64)
    for b, sentence in enumerate(sentences):
        for t, token in enumerate(sentence):
            chars = [byte + 1 for byte in str(token).encode("utf-8")[:max_chars - 2]]
            word = [BEGIN_OF_WORD] + chars + [END_OF_WORD]
            ids[b, t, :len(word)] = word
    return ids


def _lengths_and_mask(lengths, batch, time):
    """``lengths`` as an int64 array (every sequence full when None) and the (batch, time) bool
    mask of real positions."""
    if lengths is None:
        lengths = np.full(batch, time, dtype=np.int64)
    else:
        lengths = np.asarray(lengths.numpy() if isinstance(lengths, Tensor) else lengths,
                             dtype=np.int64)
        if lengths.shape != (batch,) or (lengths < 1).any() or (lengths > time).any():
            raise ValueError(f"BiLM: lengths must hold one length in [1, {time}] per sequence "
                             f"({batch} of them), got {lengths.tolist()}")
    return lengths, np.arange(time)[None, :] < lengths[:, None]


def _reverse_padded(x, lengths):
    """Each sequence of ``x`` (batch, time, ...) reversed within its length; padding stays put.
    The permutation is its own inverse."""
    batch, time = x.shape[:2]
    steps = np.arange(time)[None, :]
    source = np.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    return x[np.arange(batch)[:, None], source]


# ---- the token representation x_k^LM: characters -> CNN -> highway -> projection ----------------
class CharConv(Module):
    """One bank of ``num_filters`` 1-D convolutions of ``width`` characters, max-pooled over the
    token's characters, then ReLU (ELMo's activation; Kim et al. used tanh).

    The convolution is an unfold and a matrix product: the ``max_chars - width + 1`` windows of
    ``width`` character vectors are gathered by one integer index, flattened, and multiplied by
    the filters ``weight`` ``(num_filters, width, char_dim)``.
    """

    def __init__(self, char_dim: int, width: int, num_filters: int) -> None:
        super().__init__()
        self.width = width
        self.weight = Parameter(empty(num_filters, width, char_dim))
        self.bias = Parameter(empty(num_filters))
        bound = 1.0 / np.sqrt(width * char_dim)   # PyTorch's Conv1d initialisation
        init.uniform_(self.weight, -bound, bound)
        init.uniform_(self.bias, -bound, bound)

    def forward(self, chars: Tensor | np.ndarray):
        tokens, max_chars, char_dim = chars.shape
        if max_chars < self.width:
            raise ValueError(f"CharConv: tokens of {max_chars} characters are shorter than the "
                             f"filter width {self.width}; encode them with max_chars >= "
                             f"{self.width}")
        starts = np.arange(max_chars - self.width + 1)
        windows = chars[:, starts[:, None] + np.arange(self.width)[None, :]]
        windows = windows.reshape(tokens, len(starts), self.width * char_dim)
        features = F.linear(windows, self.weight.reshape(-1, self.width * char_dim), self.bias)
        return F.relu(features.max(axis=1))

    def extra_repr(self):
        n, width, char_dim = self.weight.shape
        return f"char_dim={char_dim}, width={width}, num_filters={n}"


class Highway(Module):
    """One highway layer (Srivastava et al., 2015): y = T(x) * relu(W_H x + b_H) + (1 - T(x)) * x
    with the transform gate T(x) = sigmoid(W_T x + b_T). b_T starts at -1, so that the layer
    starts close to carrying its input through (ELMo's initialisation)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.transform = Linear(dim, dim)
        self.gate = Linear(dim, dim)
        init.constant_(self.gate.bias, -1.0)

    def forward(self, x: Tensor):
        gate = F.sigmoid(self.gate(x))
        return gate * F.relu(self.transform(x)) + (1.0 - gate) * x


@cookbook.equation(15)
class CharCNN(Module):
    """The context-independent token representation x_k^LM of eq 15: character embeddings,
    ``CharConv`` banks of several widths (their max-pooled features concatenated), highway layers
    and a linear projection to ``dim``. Input: character ids ``(..., max_chars)`` from
    ``encode_characters``; output ``(..., dim)``."""

    def __init__(self, dim: int, char_dim: int = 8, filters=((1, 16), (2, 16), (3, 32), (4, 32)),
                 highway_layers: int = 1, char_vocab_size: int = CHAR_VOCAB_SIZE) -> None:
        super().__init__()
        self.char_embedding = Embedding(char_vocab_size, char_dim, padding_idx=CHAR_PAD)
        self.convolutions = ModuleList([CharConv(char_dim, width, n) for width, n in filters])
        features = sum(n for _, n in filters)
        self.highways = ModuleList([Highway(features) for _ in range(highway_layers)])
        self.projection = Linear(features, dim)

    def forward(self, char_ids: Tensor | np.ndarray):
        char_ids = np.asarray(char_ids.numpy() if isinstance(char_ids, Tensor) else char_ids)
        batch_shape, max_chars = char_ids.shape[:-1], char_ids.shape[-1]
        chars = self.char_embedding(char_ids.reshape(-1, max_chars))
        x = concatenate([conv(chars) for conv in self.convolutions], axis=-1)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x).reshape(*batch_shape, -1)


class BiLMStates(NamedTuple):
    """What a ``BiLM`` computes for a batch: x_k (batch, time, dim), the L forward and the L
    backward layers' states (each (batch, time, dim), in the input's order), the (batch, time)
    bool mask of real positions and the lengths."""

    token: Tensor
    forward: list
    backward: list
    mask: np.ndarray
    lengths: np.ndarray


class BiLM(Module):
    """A forward and a backward L-layer LSTM language model over a shared ``CharCNN`` token
    encoder and a shared softmax layer (Peters et al., 2018, section 3.1).

    ``forward(char_ids, lengths)`` runs both directions and returns ``BiLMStates``; sequences are
    right-padded and ``lengths`` says where each ends, so that the backward LM starts at each
    sequence's own last token.
    """

    def __init__(self, config: BiLMConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.token_encoder = CharCNN(dim, config.char_dim, config.filters, config.highway_layers)
        self.forward_lstms = ModuleList([LSTM(dim, dim, batch_first=True)
                                         for _ in range(config.num_layers)])
        self.backward_lstms = ModuleList([LSTM(dim, dim, batch_first=True)
                                          for _ in range(config.num_layers)])
        self.dropout = Dropout(config.dropout)
        self.softmax = Linear(dim, config.vocab_size)

    def _run_lstms(self, lstms, x, lengths):
        """The states of every layer of one direction; layers above the first add their input
        (the residual connection)."""
        states = []
        for j, lstm in enumerate(lstms):
            h, _ = lstm(self.dropout(x), lengths=lengths)
            x = h + x if self.config.residual and j > 0 else h
            states.append(x)
        return states

    def forward(self, char_ids: Tensor | np.ndarray, lengths: Tensor | np.ndarray | None = None):
        char_ids = np.asarray(char_ids.numpy() if isinstance(char_ids, Tensor) else char_ids)
        if char_ids.ndim != 3:
            raise ValueError(f"BiLM: char_ids must have shape (batch, time, max_chars), got "
                             f"{char_ids.shape}")
        lengths, mask = _lengths_and_mask(lengths, *char_ids.shape[:2])
        x = self.token_encoder(char_ids)
        forward = self._run_lstms(self.forward_lstms, x, lengths)
        backward = [_reverse_padded(h, lengths) for h in
                    self._run_lstms(self.backward_lstms, _reverse_padded(x, lengths), lengths)]
        return BiLMStates(x, forward, backward, mask, lengths)

    def _log_probs(self, states, targets, counted):
        """log p(target) under the shared softmax at every position; 0 where not ``counted``."""
        ids = np.where(counted, targets, _IGNORE)
        return -F.cross_entropy(self.softmax(self.dropout(states)), ids, ignore_index=_IGNORE,
                                reduction="none")

    @cookbook.equation(13)
    def forward_log_probs(self, states: BiLMStates, token_ids):
        """The forward LM, eq 13: p(t_1, ..., t_N) = prod_k p(t_k | t_1, ..., t_{k-1}).

        Returns (batch, time) with log p(t_k | t_1 .. t_{k-1}) at position k, predicted by the
        softmax from the top forward state at k - 1; 0 at k = 0 (nothing precedes it: start
        sequences with ``<bos>``) and at padding. The row sums are the log-likelihoods.
        """
        ids = np.asarray(token_ids.numpy() if isinstance(token_ids, Tensor) else token_ids)
        log_probs = self._log_probs(states.forward[-1][:, :-1], ids[:, 1:], states.mask[:, 1:])
        return pad(log_probs, ((0, 0), (1, 0)))

    @cookbook.equation(14)
    def backward_log_probs(self, states: BiLMStates, token_ids):
        """The backward LM, eq 14: p(t_1, ..., t_N) = prod_k p(t_k | t_{k+1}, ..., t_N).

        Returns (batch, time) with log p(t_k | t_{k+1} .. t_N) at position k, predicted from the
        top backward state at k + 1; 0 at each sequence's last position and at padding.
        """
        ids = np.asarray(token_ids.numpy() if isinstance(token_ids, Tensor) else token_ids)
        log_probs = self._log_probs(states.backward[-1][:, 1:], ids[:, :-1], states.mask[:, 1:])
        return pad(log_probs, ((0, 0), (0, 1)))

    @cookbook.equation(13, 14)
    def loss(self, char_ids, token_ids, lengths=None):
        """The biLM objective, negated and averaged: maximise, over all sequences,

            sum_k [ log p(t_k | t_1 .. t_{k-1}) + log p(t_k | t_{k+1} .. t_N) ]

        (Peters et al., section 3.1: both directions share the token encoder and the softmax).
        Divided by the number of predictions, 2 * sum(lengths - 1): a mean cross-entropy."""
        states = self(char_ids, lengths)
        total = self.forward_log_probs(states, token_ids).sum() + \
            self.backward_log_probs(states, token_ids).sum()
        predictions = 2 * int((states.lengths - 1).sum())
        return total * (-1.0 / max(predictions, 1))

    @cookbook.equation(15, 16)
    def layer_representations(self, char_ids, lengths=None):
        """The L + 1 representations of every token, eq 15-16, stacked: (L + 1, batch, time,
        2 * dim).

            R_k = {x_k, fwd h_kj, bwd h_kj | j = 1..L} = {h_kj | j = 0..L}
            h_k0 = [x_k; x_k],   h_kj = [fwd h_kj; bwd h_kj]

        (layer 0 is the token vector duplicated, so that every layer has the same size).
        Padded positions are zero in every layer.
        """
        states = self(char_ids, lengths)
        layers = [concatenate([states.token, states.token], axis=-1)]
        layers += [concatenate([f, b], axis=-1) for f, b in zip(states.forward, states.backward)]
        real = states.token.backend.asarray(states.mask[None, :, :, None], dtype=states.token.dtype)
        return stack(layers, axis=0) * real


# ---- eq 17: the task's scalar mix ----------------------------------------------------------------
@cookbook.equation(17)
class ScalarMix(Module):
    """ELMo_k^task = gamma^task * sum_{j=0..L} s_j^task h_kj  (eq 17), with s^task = softmax(w)
    of ``num_layers`` learned scalars (zeros at first: an even mix) and a learned scale gamma
    (1 at first).

    ``layer_norm=True`` normalises each layer's vector h_kj (mean 0, variance 1 over its
    features, no gain or bias) before mixing, which Peters et al. found helps in some tasks.
    (AllenNLP normalises each layer over all its unpadded elements at once instead.)
    """

    def __init__(self, num_layers: int, layer_norm: bool = False) -> None:
        super().__init__()
        self.num_layers = checks.positive_int(num_layers, "num_layers", "ScalarMix")
        self.layer_norm = layer_norm
        self.scalars = Parameter(zeros(num_layers))
        self.gamma = Parameter(ones(1))

    def weights(self):
        """s^task = softmax of the scalars: the layers' weights, summing to one."""
        return F.softmax(self.scalars, axis=0)

    def forward(self, layers):
        """``layers``: (num_layers, ..., dim) -- ``BiLM.layer_representations`` -- or a list of
        (..., dim) tensors. Returns (..., dim)."""
        if not isinstance(layers, Tensor):
            layers = stack(list(layers), axis=0)
        if layers.ndim < 2 or layers.shape[0] != self.num_layers:
            raise ValueError(f"ScalarMix: expected {self.num_layers} layers stacked on axis 0, "
                             f"got shape {layers.shape}")
        if self.layer_norm:
            layers = F.layer_norm(layers, layers.shape[-1])
        weights = self.weights().reshape(-1, *([1] * (layers.ndim - 1)))
        return self.gamma * (weights * layers).sum(axis=0)

    def extra_repr(self):
        return f"num_layers={self.num_layers}, layer_norm={self.layer_norm}"


@cookbook.equation(17)
class ELMo(Module):
    """Task features from a pretrained biLM: ``ELMo(bilm)(char_ids, lengths)`` is ELMo_k^task
    (eq 17) for every token, (batch, time, 2 * dim).

    The biLM is frozen (no gradient, always in evaluation mode); only the ``ScalarMix`` is
    trained with the task. To train on many epochs of the same text, compute
    ``bilm.layer_representations`` once and feed them to ``elmo.mix``.
    """

    def __init__(self, bilm: BiLM, layer_norm: bool = False) -> None:
        super().__init__()
        self.bilm = bilm.requires_grad_(False).eval()
        self.mix = ScalarMix(bilm.config.num_layers + 1, layer_norm)

    def train(self, mode=True):
        super().train(mode)
        self.bilm.eval()
        return self

    def forward(self, char_ids: Tensor | np.ndarray, lengths: Tensor | np.ndarray | None = None):
        with no_grad():
            layers = self.bilm.layer_representations(char_ids, lengths)
        return self.mix(layers)
