"""GPT-1 and GPT-2: the survey's sections IV-B (GPT-I, eq 18-24) and V-A (GPT-II).

GPT-1 (Radford et al., 2018, "Improving Language Understanding by Generative Pre-Training") is a
stack of Transformer decoder blocks without cross-attention (masked self-attention and a
feed-forward network, post-LN), trained as a language model and then fine-tuned:

* h_0 = U W_e + W_p                                          (eq 20, learned positions)
* h_l = transformer_block(h_{l-1})   for l = 1 .. n          (eq 19)
* P(u) = softmax(h_n W_e^T)                                  (eq 21, the output tied to W_e)
* L_1(U) = sum_i log P(u_i | u_{i-k}, ..., u_{i-1}; theta)   (eq 18, k = n_positions)
* P(y | x^1 .. x^m) = softmax(h_l^m W_y)                     (eq 22, h_l^m: the last layer's state
                                                              at the last (extract) token)
* L_2(C) = sum_(x, y) log P(y | x^1 .. x^m)                  (eq 23)
* L_3(C) = L_2(C) + lambda * L_1(C)                          (eq 24, lambda = 0.5)

The survey's eq 19 writes "h_n = transformer_block(h_{n-1}) for all i in [1, n]"; the paper has
h_l = transformer_block(h_{l-1}) for all l in [1, n], one block per layer, which is what
``GPTModel`` does. Losses here are *minimised* means: ``causal_lm_loss`` is -L_1 / (number of
predicted tokens), the task loss -L_2 / (number of examples), and ``GPTForFineTuning`` minimises
task loss + lambda * LM loss, eq 24 with those two normalisations (as OpenAI's code does, up to
its per-sequence averaging of L_1).

GPT-2 (Radford et al., 2019, "Language Models are Unsupervised Multitask Learners", section 2.3)
is the same model with three changes, ``GPTConfig(variant="gpt2")``: LayerNorm moved to the input
of each sub-block (pre-LN) plus a final LayerNorm after the last block, and the weights of the
residual projections (attention output, second MLP layer) initialised N(0, (0.02 / sqrt(N))^2),
N = 2 * n_layer residual layers. Both use the tanh approximation of GELU, as OpenAI's code does
(HuggingFace's ``OpenAIGPTConfig(afn="gelu")`` is that approximation too).

The classes mirror HuggingFace's, so that checkpoints load and save (the key maps are in
``models/families/gpt.py``): ``GPTModel`` (``OpenAIGPTModel`` / ``GPT2Model``, either variant),
``GPTLMHeadModel`` (GPT-1, ``OpenAIGPTLMHeadModel``) and ``GPT2LMHeadModel`` (GPT-2, the same
code for a ``variant="gpt2"`` config): the LM objective and ``generate``; ``GPTDoubleHeadsModel``
(``OpenAIGPTDoubleHeadsModel``: LM head and multiple-choice head). ``GPTForFineTuning`` is the
paper's fine-tuning recipe with its four input transformations (``TaskFormatter``) and L_3.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import checks, cookbook, decoding
from .. import functional as F
from ..autograd import Tensor
from ..nn import (Dropout, Embedding, LearnedPositionalEmbedding, Linear, Module,
                  DecoderOnlyStack, column_major_, init)
from ..nn.outputs import ModelOutput
from .configs.gpt import GPTConfig

__all__ = ["GPT2LMHeadModel", "GPTConfig", "GPTDoubleHeadsModel", "GPTForFineTuning",
           "GPTLMHeadModel", "GPTModel", "TASKS", "TaskFormatter", "auxiliary_objective",
           "causal_lm_loss", "task_objective"]

TASKS = ("classification", "entailment", "similarity", "multiple_choice")
IGNORE_INDEX = -100


def _check_variant(model, config):
    """A model class with a HuggingFace counterpart is one paper's model (GPTLMHeadModel: GPT-1,
    GPT2LMHeadModel: GPT-2), so that ``save_pretrained`` knows which checkpoint to write."""
    if config.variant != model.variant:
        raise ValueError(f"{type(model).__name__} is a {model.variant} model, but config.variant="
                         f"{config.variant!r} (GPTLMHeadModel is GPT-1's language model, "
                         "GPT2LMHeadModel GPT-2's)")


# ---- the model -----------------------------------------------------------------------------------
@cookbook.equation(19, 20)
class GPTModel(Module):
    """The GPT body: token and position embeddings (eq 20), then n_layer decoder blocks (eq 19),
    returning the last layer's states h_n.

    A block is an ``nn.DecoderOnlyLayer``: masked multi-head
    self-attention and a position-wise feed-forward network, each in a residual connection;
    post-LN for GPT-1, pre-LN plus a final LayerNorm for GPT-2. As in OpenAI's code, dropout acts
    on the embeddings, on the attention weights and on each sub-block's output, not on the
    feed-forward hidden units.

    ``wte`` is W_e (vocab_size, n_embd), ``wpe.table`` is W_p (n_positions, n_embd).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = Embedding(config.vocab_size, config.n_embd)
        column_major_(self.wte.weight)  # it is also the LM head: logits = h W_e^T
        self.wpe = LearnedPositionalEmbedding(config.n_positions, config.n_embd)
        self.drop = Dropout(config.embd_pdrop)
        self.blocks = DecoderOnlyStack(
            config.n_layer, config.n_embd, config.n_head, config.d_ff, dropout=config.resid_pdrop,
            activation=config.activation, norm_first=config.pre_ln, final_norm=config.pre_ln,
            layer_norm_eps=config.layer_norm_epsilon, attention_dropout=config.attn_pdrop,
            activation_dropout=0.0)   # GPT drops the MLP's output, not its hidden units
        self.reset_parameters()

    def reset_parameters(self):
        """N(0, 0.02^2) weights, zero biases, unit LayerNorm gains (GPT-1, section 4.1); for GPT-2
        the residual projections get std 0.02 / sqrt(2 * n_layer) (GPT-2, section 2.3)."""
        std = self.config.initializer_range
        init.normal_(self.wte.weight, std=std)
        init.normal_(self.wpe.table, std=std)
        for layer in self.blocks.layers:
            attention, mlp = layer.self_attn, layer.feed_forward
            for linear in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj,
                           mlp.linear1, mlp.linear2):
                init.normal_(linear.weight, std=std)
                init.zeros_(linear.bias)
            if self.config.pre_ln:
                residual_std = std / math.sqrt(2 * self.config.n_layer)
                init.normal_(attention.out_proj.weight, std=residual_std)
                init.normal_(mlp.linear2.weight, std=residual_std)

    def new_cache(self):
        """Empty key/value caches, one dict per block, for ``forward(..., cache=...)``."""
        return self.blocks.new_cache()

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None, cache=None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False):
        """``input_ids`` (batch, time) -> ``last_hidden_state`` h_n (batch, time, n_embd).

        ``attention_mask`` (batch, keys): 1 on tokens, 0 on padding. ``token_type_ids`` are
        embedded with W_e and added, as HuggingFace does. ``position_ids`` default to
        ``start .. start + time - 1``, ``start`` being the number of positions in ``cache``.
        ``cache`` (``new_cache()``) is filled in place with each block's keys and values, so that
        the next call feeds only the new tokens; it is returned as ``past_key_values``.
        ``head_mask`` (n_layer, n_head) scales each head's output (0 prunes it);
        ``output_hidden_states`` / ``output_attentions`` add ``hidden_states`` (n_layer + 1 of
        them) and ``attentions`` (each block's weights) to the output, as in HuggingFace.
        """
        name = type(self).__name__
        ids, start, mask = self.checked_inputs(input_ids, attention_mask, position_ids, cache)
        x = self.wte(ids)                                                    # U W_e
        if token_type_ids is not None:
            x = x + self.wte(checks.token_ids(token_type_ids, self.config.vocab_size, name,
                                                   name="token_type_ids"))
        h = self.drop(self.wpe(x, start=start, position_ids=position_ids))  # + W_p (eq 20)
        out = self.blocks(h, key_mask=mask, cache=cache, head_mask=head_mask,          # eq 19
                          output_hidden_states=output_hidden_states,
                          output_attentions=output_attentions)
        return ModelOutput(last_hidden_state=out.last_hidden_state, past_key_values=cache,
                           hidden_states=out.hidden_states, attentions=out.attentions)

    def checked_inputs(self, input_ids, attention_mask, position_ids, cache):
        """(ids, the position after ``cache``, the key mask (batch, start + time)) for
        ``forward``; a sequence longer than n_positions without ``position_ids`` is an error."""
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        start = 0 if cache is None else self.blocks.cache_length(cache)
        if position_ids is None and start + ids.shape[1] > self.config.n_positions:
            raise ValueError(f"{name}: a sequence of {start + ids.shape[1]} tokens is longer "
                             f"than n_positions={self.config.n_positions}")
        mask = checks.attention_mask(attention_mask, (ids.shape[0], start + ids.shape[1]), name)
        return ids, start, mask

    @cookbook.equation(21)
    def lm_logits(self, hidden):
        """h_n W_e^T, the logits of P(u) = softmax(h_n W_e^T) (eq 21): the output layer is the
        token embedding matrix itself (the same Parameter, no copy)."""
        return F.linear(hidden, self.wte.weight)


@cookbook.equation(18)
def causal_lm_loss(logits, labels):
    """-L_1 / (number of predictions), L_1 = sum_i log P(u_i | u_{i-k} .. u_{i-1}) (eq 18).

    ``logits`` (..., time, vocab) predict the token after each position, so the labels are
    shifted inside, as in HuggingFace: position t is scored on ``labels[..., t + 1]``. Labels
    equal to -100 (padding, prompts) are not predicted. The context window k is the whole
    prefix (at most n_positions tokens)."""
    labels = np.asarray(labels)
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"causal_lm_loss: labels of shape {labels.shape} must match the ids, "
                         f"{logits.shape[:-1]}")
    # the labels move one step left and the last position gets none, rather than the logits
    # losing their last position: a slice of the logits would be copied whole (the GPT-2 step's
    # 50257-way logits twice, forward and backward, 10 % of its time)
    ignored = np.full(labels.shape[:-1] + (1,), IGNORE_INDEX, dtype=labels.dtype)
    next_labels = np.concatenate([labels[..., 1:], ignored], axis=-1)
    return F.cross_entropy(logits, next_labels, ignore_index=IGNORE_INDEX)


class GPTLMHeadModel(Module):
    """GPT-1's language model (HuggingFace's ``OpenAIGPTLMHeadModel``): ``GPTModel`` and the tied
    output layer (eq 21), trained on L_1 (eq 18); ``GPT2LMHeadModel`` is the same for GPT-2.

    ``model(input_ids, labels=input_ids)`` gives ``.loss`` (the labels are shifted inside;
    -100 is ignored) and ``.logits`` (batch, time, vocab_size). ``generate`` continues prompts.
    """

    variant = "gpt1"
    body_class = GPTModel   # a subclass may read the text with a GPTModel of its own

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        _check_variant(self, config)
        self.config = config
        self.transformer = self.body_class(config)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None, cache=None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False):
        out = self.transformer(input_ids, attention_mask, token_type_ids, position_ids, cache,
                               head_mask, output_hidden_states, output_attentions)
        logits = self.transformer.lm_logits(out.last_hidden_state)
        loss = None if labels is None else causal_lm_loss(logits, labels)
        return ModelOutput(loss=loss, logits=logits, past_key_values=cache,
                           hidden_states=out.hidden_states, attentions=out.attentions)

    def generate(self, input_ids, max_new_tokens=20, *, do_sample=False, temperature=1.0,
                 top_k=None, top_p=None, repetition_penalty=1.0, eos_token_id=None,
                 pad_token_id=None, generator=None, streamer=None, use_cache=True,
                 attention_mask=None):
        """Continue the prompts ``input_ids`` (batch, time) by up to ``max_new_tokens`` tokens;
        returns the prompts and their continuations, int64 (batch, time + new). Prompts of
        different lengths are padded on the left, with ``attention_mask`` (batch, time) 0 on the
        padding, as for HuggingFace: positions then count real tokens only, so each row continues
        exactly as it would alone.

        Each step turns the last position's logits into the next token with
        ``decoding.next_tokens``: the repetition penalty (CTRL), then with ``do_sample`` the
        temperature, top-k and top-p filters and one draw from ``generator`` (a
        ``minitorch_nlp.Generator``, for reproducible samples); without it the argmax (greedy).
        A row stops after emitting ``eos_token_id`` (an id or a list of ids; default
        ``config.eos_token_id``) and is padded with ``pad_token_id`` (default: the first stop
        id) until every row has stopped. ``streamer(ids)`` is called with each step's new tokens
        (batch,) as soon as they are chosen, e.g. to print text as it is generated.

        ``use_cache`` keeps every block's keys and values, so a step feeds one token through the
        model; without it each step runs the whole sequence again (same result, slower). The
        prompt plus ``max_new_tokens`` must fit ``n_positions``.
        """
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
                or max_new_tokens < 0:
            raise ValueError(f"{name}.generate: max_new_tokens must be an int >= 0, got "
                             f"{max_new_tokens!r}")
        if ids.shape[1] + max_new_tokens > self.config.n_positions:
            raise ValueError(f"{name}.generate: the prompt ({ids.shape[1]} tokens) plus "
                             f"max_new_tokens={max_new_tokens} is longer than n_positions="
                             f"{self.config.n_positions}")
        eos = self.config.eos_token_id if eos_token_id is None else eos_token_id
        stop = np.array([] if eos is None else np.ravel(eos), dtype=np.int64)
        pad = pad_token_id if pad_token_id is not None else int(stop[0]) if stop.size else 0
        finished = np.zeros(ids.shape[0], dtype=bool)
        mask = (np.ones(ids.shape, dtype=bool) if attention_mask is None
                else np.asarray(attention_mask).astype(bool))
        if mask.shape != ids.shape:
            raise ValueError(f"{name}.generate: attention_mask of shape {mask.shape} must match "
                             f"input_ids {ids.shape}")
        with self.inference():
            cache = self.transformer.new_cache() if use_cache else None
            feed = ids
            for _ in range(max_new_tokens):
                positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)    # real tokens before
                logits = self(feed, attention_mask=mask, cache=cache,
                              position_ids=positions[:, -feed.shape[1]:]).logits[:, -1].numpy()
                new = decoding.next_tokens(
                    logits, ids, do_sample=do_sample, temperature=temperature, top_k=top_k,
                    top_p=top_p, repetition_penalty=repetition_penalty, generator=generator)
                new = np.where(finished, pad, new)
                ids = np.concatenate([ids, new[:, None]], axis=1)
                mask = np.concatenate([mask, np.ones((len(ids), 1), dtype=bool)], axis=1)
                if streamer is not None:
                    streamer(new)
                finished |= np.isin(new, stop)
                if finished.all():
                    break
                feed = new[:, None] if use_cache else ids
        return ids


class GPT2LMHeadModel(GPTLMHeadModel):
    """GPT-2's language model (HuggingFace's ``GPT2LMHeadModel``): ``GPTLMHeadModel`` for a
    ``GPTConfig(variant="gpt2")``."""

    variant = "gpt2"


# ---- fine-tuning (eq 22-24) ----------------------------------------------------------------------
@dataclass(frozen=True)
class TaskFormatter:
    """The paper's input transformations (Radford et al., 2018, section 3.3 and Figure 1): every
    task becomes one or more token sequences the pre-trained model can read, wrapped in a start
    token <s> and an extract token <e> (whose final state h_l^m feeds the classifier), with a
    delimiter $ between the parts.

    ============== =========================================== =================================
    task           example                                     sequences
    ============== =========================================== =================================
    classification text                                        <s> text <e>
    entailment     (premise, hypothesis)                       <s> premise $ hypothesis <e>
    similarity     (a, b)                                      <s> a $ b <e>,  <s> b $ a <e>
    multiple_choice (context, [answer_1 .. answer_K])          <s> context $ answer_k <e>, each k
    ============== =========================================== =================================

    Texts are lists of token ids; ``start``, ``delimiter`` and ``extract`` are the ids of the
    special tokens (new, randomly initialised rows of W_e in the paper), ``pad`` the id that
    fills short sequences (masked out). ``formatter(examples)`` returns the batch as the
    keyword arguments of ``GPTForFineTuning``: ``input_ids`` (batch, K, time),
    ``attention_mask`` (batch, K, time) and ``extract_positions`` (batch, K).
    """

    task: str
    start: int
    delimiter: int
    extract: int
    pad: int = 0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"TaskFormatter: task must be one of {TASKS}, got {self.task!r}")

    def transform(self, example):
        """The token sequences (a list of lists of ids) of one example."""
        s, d, e = [self.start], [self.delimiter], [self.extract]
        if self.task == "classification":
            return [s + list(example) + e]
        first, second = example
        if self.task == "entailment":
            return [s + list(first) + d + list(second) + e]
        if self.task == "similarity":
            return [s + list(first) + d + list(second) + e, s + list(second) + d + list(first) + e]
        return [s + list(first) + d + list(answer) + e for answer in second]

    def __call__(self, examples):
        sequences = [self.transform(example) for example in examples]
        choices = {len(group) for group in sequences}
        if len(choices) != 1:
            raise ValueError(f"TaskFormatter: every example needs the same number of choices, got "
                             f"{sorted(choices)}")
        length = max(len(seq) for group in sequences for seq in group)
        input_ids = np.full((len(sequences), choices.pop(), length), self.pad, dtype=np.int64)
        attention_mask = np.zeros(input_ids.shape, dtype=np.int64)
        extract_positions = np.zeros(input_ids.shape[:2], dtype=np.int64)
        for b, group in enumerate(sequences):
            for k, seq in enumerate(group):
                input_ids[b, k, :len(seq)] = seq
                attention_mask[b, k, :len(seq)] = 1
                extract_positions[b, k] = len(seq) - 1
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "extract_positions": extract_positions}


class SequenceSummary(Module):
    """The classifier W_y of eq 22 on the extract token's state: dropout then a linear layer
    (HuggingFace's ``SequenceSummary`` with ``summary_type="cls_index"``, whose ``summary`` is
    this Linear)."""

    def __init__(self, n_embd: int, num_outputs: int, dropout: float, std: float = 0.02) -> None:
        super().__init__()
        self.summary = Linear(n_embd, num_outputs)
        self.first_dropout = Dropout(dropout)
        init.normal_(self.summary.weight, std=std)
        init.zeros_(self.summary.bias)

    def forward(self, h: Tensor):
        return self.summary(self.first_dropout(h))


def _run_choices(transformer, input_ids, extract_positions, attention_mask, model,
                 token_type_ids=None, position_ids=None):
    """Run the K sequences of each example through ``transformer``: ids (batch, K, time) ->
    (hidden (batch, K, time, n_embd), h_l^m (batch, K, n_embd) at ``extract_positions``
    (batch, K); the last position when None)."""
    config = transformer.config
    ids = checks.token_ids(input_ids, config.vocab_size, model,
                           axes="(batch, choices, time)")
    batch, choices, time = ids.shape
    if extract_positions is None:
        positions = np.full((batch, choices), time - 1, dtype=np.int64)
    else:
        positions = checks.ids_array(extract_positions, "extract positions", model)
        if positions.shape != (batch, choices):
            raise ValueError(f"{model}: extract positions of shape {positions.shape} must be "
                             f"(batch, choices) = {(batch, choices)}")
        if positions.size and (positions.min() < 0 or positions.max() >= time):
            raise ValueError(f"{model}: extract position {int(positions.max())} or "
                             f"{int(positions.min())} is outside the sequence [0, {time})")

    def flat(value):
        return None if value is None else np.asarray(value).reshape(batch * choices, -1)

    hidden = transformer(ids.reshape(batch * choices, time), flat(attention_mask),
                         flat(token_type_ids), flat(position_ids)).last_hidden_state
    hidden = hidden.reshape(batch, choices, time, config.n_embd)
    rows, columns = np.meshgrid(np.arange(batch), np.arange(choices), indexing="ij")
    return ids, hidden, hidden[rows, columns, positions]


class GPTDoubleHeadsModel(Module):
    """HuggingFace's ``OpenAIGPTDoubleHeadsModel``: the LM head (eq 21) and a multiple-choice
    head (eq 22 with one score per choice) on the same ``GPTModel``.

    ``input_ids`` (batch, choices, time); ``mc_token_ids`` (batch, choices) the position of each
    choice's extract token (default: the last). Returns ``logits`` (batch, choices, time,
    vocab_size), ``mc_logits`` (batch, choices), and with ``labels`` (batch, choices, time) the LM
    loss ``loss``, with ``mc_labels`` (batch,) the choice loss ``mc_loss``, as HuggingFace
    (the paper's L_3 is ``mc_loss + 0.5 * loss``; ``GPTForFineTuning`` computes it).
    """

    variant = "gpt1"

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        _check_variant(self, config)
        self.config = config
        self.transformer = GPTModel(config)
        self.multiple_choice_head = SequenceSummary(config.n_embd, 1,
                                                    config.summary_first_dropout,
                                                    config.initializer_range)

    def forward(self, input_ids: Tensor | np.ndarray,
                mc_token_ids: Tensor | np.ndarray | None = None,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None,
                mc_labels: Tensor | np.ndarray | None = None):
        _, hidden, extracted = _run_choices(self.transformer, input_ids, mc_token_ids,
                                            attention_mask, type(self).__name__, token_type_ids,
                                            position_ids)
        logits = self.transformer.lm_logits(hidden)
        mc_logits = self.multiple_choice_head(extracted)[..., 0]
        return ModelOutput(
            loss=None if labels is None else causal_lm_loss(logits, labels),
            mc_loss=None if mc_labels is None else F.cross_entropy(mc_logits, mc_labels),
            logits=logits, mc_logits=mc_logits)


@cookbook.equation(22)
class GPTForFineTuning(Module):
    """GPT-1's supervised fine-tuning (section 3.2-3.3): a linear layer W_y on the final state of
    the extract token, h_l^m, gives P(y | x^1 .. x^m) = softmax(h_l^m W_y) (eq 22); the loss is
    -L_2 (eq 23) plus ``lm_coef`` (the paper's lambda = 0.5) times the language-modelling loss
    -L_1 on the same inputs (eq 24), which the paper found to improve generalisation and speed up
    convergence.

    ``transformer`` is a pre-trained ``GPTModel`` (e.g. ``lm_model.transformer``: the modules are
    shared, not copied). ``task`` picks how the K sequences of ``TaskFormatter`` meet W_y:
    classification and entailment have one sequence, W_y (n_embd, num_labels); similarity sums
    the states of both orderings, h^(a$b) + h^(b$a), before W_y; multiple choice scores each
    answer with W_y (n_embd, 1) and normalises over the K answers with a softmax.

    ``forward(input_ids, extract_positions, attention_mask=None, labels=None)`` returns
    ``logits`` (batch, num_labels) or (batch, K) for multiple choice, ``lm_logits``, and with
    ``labels`` (batch,) ``loss`` = task_loss + lm_coef * lm_loss, ``task_loss`` and ``lm_loss``.
    """

    def __init__(self, transformer, task: str, num_labels: int = 2, lm_coef: float = 0.5) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"GPTForFineTuning: task must be one of {TASKS}, got {task!r}")
        if task != "multiple_choice" and (not isinstance(num_labels, int) or num_labels < 2):
            raise ValueError(f"GPTForFineTuning: num_labels must be an int >= 2, got "
                             f"{num_labels!r}")
        self.config, self.task, self.lm_coef = transformer.config, task, lm_coef
        self.transformer = transformer
        self.head = SequenceSummary(self.config.n_embd,
                                    1 if task == "multiple_choice" else num_labels,
                                    self.config.summary_first_dropout,
                                    self.config.initializer_range)

    def forward(self, input_ids: Tensor | np.ndarray, extract_positions: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None):
        name = type(self).__name__
        ids, hidden, h = _run_choices(self.transformer, input_ids, extract_positions,
                                      attention_mask, name)
        expected = {"classification": 1, "entailment": 1, "similarity": 2}.get(self.task)
        if expected is not None and ids.shape[1] != expected:
            raise ValueError(f"{name}: a {self.task} example is {expected} sequence(s), got "
                             f"{ids.shape[1]} per example")
        if self.task == "similarity":
            h = h.sum(axis=1, keepdims=True)          # both orderings, summed before W_y
        scores = self.head(h)                          # h_l^m W_y (eq 22, before the softmax)
        logits = scores[..., 0] if self.task == "multiple_choice" else scores[:, 0]
        lm_logits = self.transformer.lm_logits(hidden)
        if labels is None:
            return ModelOutput(logits=logits, lm_logits=lm_logits)
        lm_labels = ids if attention_mask is None else np.where(
            np.asarray(attention_mask).astype(bool), ids, IGNORE_INDEX)
        task_loss = task_objective(logits, labels)                                    # -L_2
        lm_loss = causal_lm_loss(lm_logits, lm_labels)                                # -L_1
        return ModelOutput(loss=auxiliary_objective(task_loss, lm_loss, self.lm_coef),  # -L_3
                           logits=logits, task_loss=task_loss, lm_loss=lm_loss,
                           lm_logits=lm_logits)


@cookbook.equation(23)
def task_objective(logits, labels):
    """-L_2 / batch, L_2 = sum_(x, y) log P(y | x^1 .. x^m) (eq 23): the mean cross-entropy of
    the task ``logits`` (batch, labels) (eq 22 before its softmax) against ``labels`` (batch,)."""
    return F.cross_entropy(logits, labels)


@cookbook.equation(24)
def auxiliary_objective(task_loss, lm_loss, lm_coef):
    """-L_3 = -L_2 + lambda (-L_1) (eq 24): the task loss plus ``lm_coef`` (the paper's
    lambda = 0.5) times the language-modelling loss on the same inputs. Both are means (per
    example, per predicted token), as the library trains them."""
    return task_loss + lm_coef * lm_loss
