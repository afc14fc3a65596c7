"""The deep character-level Transformer of Al-Rfou et al. (2019, "Character-Level Language
Modeling with Deeper Self-Attention"): the survey's section VIII-A, eq 85.

A causal Transformer reads fixed-length segments of characters (no memory from one segment to
the next, unlike Transformer-XL) and models their joint probability autoregressively::

    P(t_{0:L}) = P(t_0) prod_{i=1}^{L} P(t_i | t_{0:i-1})                      (eq 85)

The paper trains 64 such layers, and gets there with three auxiliary losses (its section 2):

1. **Multiple positions**: every position of the segment predicts its next character, not only
   the last one. The loss is then -(1/L) sum_i log P(t_i | t_{0:i-1}), eq 85 with the segment's
   first character given: the model has no start symbol, so P(t_0) is not modelled.
2. **Intermediate layers**: the output of every layer, not only the last, predicts the next
   characters too. "If there are n layers total, then the l-th intermediate layer stops
   contributing any loss after finishing l/2n of the training": layer l (1 .. n-1) counts while
   the fraction of training done is below l/(2n), so every intermediate loss is gone half-way
   through and the lowest layers go first. (The survey words it as the lower layers' weight
   being "progressively reduced"; the paper's schedule is this step per layer.)
3. **Multiple targets**: each position also predicts the character k steps ahead, k = 2 .. K
   (the paper: K = 2), each with a classifier of its own; "the losses of the extra targets get
   weighted by a multiplier of 0.5 before being added to their corresponding layer loss".

The paper also replaces the sinusoidal timing signal by a learned positional embedding added to
the input of *every* layer, as timing information may fade through 64 layers
(``per_layer_positions``), and evaluates with the final layer's next-character prediction.

Built on the GPT code: ``CharTransformerModel`` is a ``GPTModel`` (GPT-2's pre-LN blocks, the
toolkit's ``DecoderOnlyLayer`` in a ``DecoderOnlyStack``) whose forward adds a position table
before each layer and returns every layer's (normalised) output; ``CharTransformerLMHeadModel``
is a ``GPT2LMHeadModel`` (the tied next-character classifier, ``generate`` with its cache) with
the extra targets' classifiers and the objective ``deep_char_loss``. All the auxiliary losses
are switches of ``CharTransformerConfig``; with all of them off the model is a GPT-2 trained on
the last position of each segment.
"""
from __future__ import annotations


import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import stack, Tensor
from ..nn import LearnedPositionalEmbedding, Linear, ModuleList, init
from ..nn.outputs import ModelOutput
from .gpt import IGNORE_INDEX, GPT2LMHeadModel, GPTModel, causal_lm_loss
from .configs.char_transformer import CharTransformerConfig, _check_fraction

__all__ = ["CharTransformerConfig", "CharTransformerLMHeadModel", "CharTransformerModel",
           "deep_char_loss", "intermediate_layer_weights"]


# ---- the objective (eq 85 and the three auxiliary losses) ----------------------------------------
def intermediate_layer_weights(num_layers, progress, intermediate_stop=0.5):
    """The weight (0 or 1) of each of ``num_layers`` layers' losses when a fraction ``progress``
    of training is done: layer l < n (1-based) counts while progress < l / n *
    ``intermediate_stop`` (the paper's l/(2n) with 0.5); the final layer always counts."""
    checks.positive_int(num_layers, "num_layers", "intermediate_layer_weights")
    _check_fraction(progress, "progress", "intermediate_layer_weights")
    _check_fraction(intermediate_stop, "intermediate_stop", "intermediate_layer_weights",
                    low_open=True)
    return [1.0 if layer == num_layers or progress < layer / num_layers * intermediate_stop
            else 0.0 for layer in range(1, num_layers + 1)]


@cookbook.equation(85)
def deep_char_loss(logits, labels, *, progress=0.0, all_positions=True, intermediate_stop=0.5,
                   extra_target_weight=0.5):
    """The training loss of Al-Rfou et al.: -log of eq 85's factors, with the three auxiliary
    losses (see the module docstring).

    ``logits`` (layers, targets, batch, T, V): layer l's scores (the last layer last) of the
    character k = 1 .. targets steps after each position. ``labels`` (batch, T): the segment's
    characters (the model's input ids), shifted inside: position i is scored on labels[i + k]
    for target k; -100 is never predicted. Per layer, the loss is the mean over the positions of
    -log P(t_{i+1} | t_{0:i}) plus ``extra_target_weight`` times the same for each further k;
    ``all_positions=False`` scores the last position that has a target only. The layers' losses
    are summed, each intermediate one while ``progress`` (the fraction of training done) is
    below its share (``intermediate_layer_weights``). A single layer and a single target with
    every position is ``gpt.causal_lm_loss``: -(1/L) log P(t_{1:L} | t_0).
    """
    if logits.ndim != 5:
        raise ValueError(f"deep_char_loss: logits must be (layers, targets, batch, T, V), got "
                         f"shape {tuple(logits.shape)}")
    layers, targets, batch, time, _ = logits.shape
    labels = np.asarray(labels)
    if labels.shape != (batch, time):
        raise ValueError(f"deep_char_loss: labels of shape {labels.shape} must be (batch, T) = "
                         f"{(batch, time)}")
    if targets >= time:
        raise ValueError(f"deep_char_loss: a segment of {time} characters has no target "
                         f"{targets} steps ahead; give fewer targets or a longer segment")
    weights = intermediate_layer_weights(layers, progress, intermediate_stop)
    total = None
    for layer, layer_weight in enumerate(weights):
        if not layer_weight:
            continue
        for k in range(1, targets + 1):
            scores, truth = logits[layer, k - 1, :, :time - k], labels[:, k:]
            if not all_positions:
                scores, truth = scores[:, -1:], truth[:, -1:]
            loss = F.cross_entropy(scores, truth, ignore_index=IGNORE_INDEX)
            term = loss if k == 1 else extra_target_weight * loss
            total = term if total is None else total + term
    return total


# ---- the model -----------------------------------------------------------------------------------
class CharTransformerModel(GPTModel):
    """GPT-2's body with a learned position table added before every layer
    (``config.per_layer_positions``; layer 0 uses ``wpe``, the others ``layer_positions``).

    ``forward`` returns ``last_hidden_state`` and ``hidden_states``: every layer's output after
    the final LayerNorm, the states the paper's intermediate classifiers read (the last one is
    ``last_hidden_state``)."""

    def __init__(self, config: CharTransformerConfig) -> None:
        super().__init__(config)
        extra = config.n_layer - 1 if config.per_layer_positions else 0
        self.layer_positions = ModuleList([
            LearnedPositionalEmbedding(config.n_positions, config.n_embd,
                                       std=config.initializer_range) for _ in range(extra)])

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None, cache=None):
        """``input_ids`` (batch, time); ``attention_mask`` (batch, keys) 1 on characters, 0 on
        padding; ``position_ids`` default to the positions after those in ``cache`` (from
        ``new_cache()``, filled in place)."""
        ids, start, mask = self.checked_inputs(input_ids, attention_mask, position_ids, cache)
        tables = [self.wpe, *self.layer_positions]
        x, states = self.drop(self.wpe(self.wte(ids), start=start, position_ids=position_ids)), []
        for i, layer in enumerate(self.blocks.layers):
            if 0 < i < len(tables):
                x = tables[i](x, start=start, position_ids=position_ids)
            x = layer(x, key_mask=mask, cache=None if cache is None else cache[i])
            states.append(self.blocks.norm(x))
        return ModelOutput(last_hidden_state=states[-1], hidden_states=tuple(states),
                           past_key_values=cache)


class CharTransformerLMHeadModel(GPT2LMHeadModel):
    """The character language model: ``CharTransformerModel``, the tied next-character
    classifier (GPT's ``lm_logits``) and one classifier per extra target (``target_heads``).

    ``model(ids, labels=ids)`` gives ``logits`` (batch, T, V) of the next character and, with
    labels, ``loss``: in training mode ``deep_char_loss`` with the auxiliary losses the config
    switches on, at the fraction of training set by ``set_training_progress``; in eval mode the
    final layer's next-character loss alone (what bits per character measure, as the paper
    evaluates). ``generate`` continues a text (GPT-2's, with the key/value cache)."""

    body_class = CharTransformerModel

    def __init__(self, config: CharTransformerConfig) -> None:
        super().__init__(config)
        self.target_heads = ModuleList([Linear(config.n_embd, config.vocab_size)
                                        for _ in range(config.num_targets - 1)])
        for head in self.target_heads:
            init.normal_(head.weight, std=config.initializer_range)
            init.zeros_(head.bias)
        self.training_progress = 0.0

    def set_training_progress(self, fraction):
        """Tell the model that ``fraction`` (0 .. 1) of its training is done: the intermediate
        layers' losses follow it (``intermediate_layer_weights``)."""
        _check_fraction(fraction, "fraction", f"{type(self).__name__}.set_training_progress")
        self.training_progress = float(fraction)

    def target_logits(self, hidden):
        """(targets, batch, T, V): the scores of the characters 1 .. num_targets ahead."""
        return stack([self.transformer.lm_logits(hidden)]
                     + [head(hidden) for head in self.target_heads])

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None, cache=None):
        out = self.transformer(input_ids, attention_mask, position_ids, cache)
        logits = self.transformer.lm_logits(out.last_hidden_state)
        loss = None
        if labels is not None and not self.training:
            loss = causal_lm_loss(logits, labels)
        elif labels is not None:
            config = self.config
            states = out.hidden_states if config.intermediate_losses else out.hidden_states[-1:]
            loss = deep_char_loss(
                stack([self.target_logits(h) for h in states]), labels,
                progress=self.training_progress, all_positions=config.all_positions,
                intermediate_stop=config.intermediate_stop,
                extra_target_weight=config.extra_target_weight)
        return ModelOutput(loss=loss, logits=logits, past_key_values=cache,
                           hidden_states=out.hidden_states)
