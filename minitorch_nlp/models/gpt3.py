"""GPT-3 (Brown et al., 2020, "Language Models are Few-Shot Learners"): the survey's section V-F.

GPT-3 is GPT-2's model (pre-LN blocks, a final LayerNorm, the output tied to the token
embedding) made larger, with one change to the blocks (section 2.1): "alternating dense and
locally banded sparse attention patterns in the layers of the transformer, similar to the Sparse
Transformer". ``GPT3LMHeadModel`` is ``GPT2LMHeadModel`` whose odd-numbered blocks (1, 3, 5 ...)
attend through the toolkit's ``SlidingWindowAttention`` core: each position sees the
``attention_window`` positions before it and itself; the even blocks keep full causal attention.
The paper does not give the band's width; ``attention_window`` defaults to 256 (an eighth of the
2048-token context).

Table 2.1's eight sizes are ``GPT3Config.preset(name)`` (``GPT3_SIZES``), and
``parameter_shapes`` / ``count_parameters`` give their parameters from shapes alone, without
allocating a weight, so that the 175B model's count is a dictionary of shapes. Two rows of the
table do not fit n_heads x d_head = d_model: the XL model (24 heads of 128 on 2048) and the 13B
model (40 heads of 128 on 5140). We keep d_head and take n_heads = d_model / d_head (16 for XL),
and d_model = 5120 = 40 x 128 for 13B; the parameter count does not depend on the number of
heads, and either width rounds to the table's 13B.

In-context learning (section 2, Figure 2.1) needs no gradient: ``build_prompt`` writes a task
description, K demonstrations "context = completion" and the query; ``score_completions`` gives
each candidate completion's log-likelihood under the model (summed or per token), and
``evaluate_in_context`` measures zero-, one- and few-shot accuracy on a ``FewShotTask`` (made
from the synthetic tasks of ``minitorch_nlp.data`` by ``FewShotTask.from_pairs``), by likelihood
ranking of candidates or by greedy generation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import checks
from .. import functional as F
from ..autograd import no_grad
from ..nn import SlidingWindowAttention
from .gpt import GPT2LMHeadModel
from .configs.gpt3 import GPT3Config, GPT3_SIZES

__all__ = ["GPT3Config", "GPT3LMHeadModel", "GPT3_SIZES", "FewShotTask", "build_prompt",
           "count_parameters", "evaluate_in_context", "parameter_shapes", "score_completions"]


"""Table 2.1 of Brown et al. (2020), as printed; every model reads n_ctx = 2048 tokens."""


class GPT3LMHeadModel(GPT2LMHeadModel):
    """GPT-3's language model: ``GPT2LMHeadModel`` whose blocks 1, 3, 5 ... attend within a
    causal band of ``config.attention_window`` earlier positions (``SlidingWindowAttention``),
    blocks 0, 2, 4 ... to every earlier position."""

    def __init__(self, config: GPT3Config) -> None:
        if not isinstance(config, GPT3Config):
            raise TypeError(f"GPT3LMHeadModel needs a GPT3Config, got {type(config).__name__}")
        super().__init__(config)
        for layer in self.transformer.blocks.layers[1::2]:
            layer.self_attn.core = SlidingWindowAttention(config.attention_window,
                                                          dropout=config.attn_pdrop)


def parameter_shapes(config):
    """Every parameter of ``GPT3LMHeadModel(config)`` (or a GPT-2 of that config), by its name in
    ``named_parameters()``, as a shape -- computed from the config, nothing allocated."""
    d, d_ff = config.n_embd, config.d_ff
    shapes = {"transformer.wte.weight": (config.vocab_size, d),
              "transformer.wpe.table": (config.n_positions, d)}
    for i in range(config.n_layer):
        layer = f"transformer.blocks.layers.{i}."
        for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[f"{layer}self_attn.{projection}.weight"] = (d, d)
            shapes[f"{layer}self_attn.{projection}.bias"] = (d,)
        for norm in ("norm1", "norm2"):
            shapes[f"{layer}{norm}.weight"] = shapes[f"{layer}{norm}.bias"] = (d,)
        shapes[f"{layer}feed_forward.linear1.weight"] = (d_ff, d)
        shapes[f"{layer}feed_forward.linear1.bias"] = (d_ff,)
        shapes[f"{layer}feed_forward.linear2.weight"] = (d, d_ff)
        shapes[f"{layer}feed_forward.linear2.bias"] = (d,)
    shapes["transformer.blocks.norm.weight"] = shapes["transformer.blocks.norm.bias"] = (d,)
    return shapes


def count_parameters(config):
    """How many numbers ``GPT3LMHeadModel(config)`` holds (the output layer is W_e itself),
    from :func:`parameter_shapes`."""
    return sum(math.prod(shape) for shape in parameter_shapes(config).values())


# ---- in-context evaluation (zero-, one- and few-shot) --------------------------------------------
@dataclass(frozen=True)
class FewShotTask:
    """A task as GPT-3 is evaluated on it: a natural-language ``description`` and ``examples``,
    (context, completion) pairs of strings; demonstrations and queries are both drawn from
    them."""

    name: str
    description: str
    examples: tuple[tuple[str, str], ...]

    def __post_init__(self):
        if len(self.examples) < 2:
            raise ValueError(f"FewShotTask {self.name!r}: needs at least 2 examples (a query and "
                             f"a demonstration or a distractor), got {len(self.examples)}")

    @classmethod
    def from_pairs(cls, name, description, pairs, separator=""):
        """A task from ``minitorch_nlp.data`` pairs of token lists (``reverse_task``,
        ``sort_task``, ``addition_task`` ...), each list joined with ``separator``."""
        return cls(name, description, tuple((separator.join(source), separator.join(target))
                                            for source, target in pairs))


def build_prompt(task, query, demonstrations):
    """GPT-3's prompt (Figure 2.1): the task description, one "context = completion" line per
    demonstration, then the query's context followed by " =" for the model to complete. No
    demonstration is zero-shot, one is one-shot, K few-shot."""
    lines = [task.description]
    lines += [f"{context} = {completion}" for context, completion in demonstrations]
    return "\n".join(lines + [f"{query} ="])


def _encode(tokenizer, text):
    return list(tokenizer.encode(text, add_special_tokens=False))


def _check_fits(model, length, where):
    if length > model.config.n_positions:
        raise ValueError(f"{where}: the prompt and completion are {length} tokens, longer than "
                         f"the model's n_positions={model.config.n_positions}; use fewer "
                         f"demonstrations")


def score_completions(model, tokenizer, prompt, completions, per_token=False):
    """log P(completion | prompt) for each completion, summed over its tokens (or their mean
    with ``per_token``, which GPT-3 uses for most multiple-choice tasks, section 2.4); a
    completion is written after the prompt with a leading space. Returns a float64 array."""
    prompt_ids = _encode(tokenizer, prompt)
    scores = []
    with no_grad():
        for completion in completions:
            completion_ids = _encode(tokenizer, " " + completion)
            ids = np.asarray([prompt_ids + completion_ids])
            _check_fits(model, ids.shape[1], "score_completions")
            log_probs = F.log_softmax(model(ids).logits, axis=-1).numpy()[0]
            start = len(prompt_ids)
            picked = [log_probs[start - 1 + i, token] for i, token in enumerate(completion_ids)]
            total = float(np.sum(picked, dtype=np.float64))
            scores.append(total / len(picked) if per_token else total)
    return np.asarray(scores)


def _greedy_completion(model, tokenizer, prompt, max_tokens, stop="\n"):
    ids = _encode(tokenizer, prompt)
    new = []
    with no_grad():
        for _ in range(max_tokens):
            _check_fits(model, len(ids) + 1, "evaluate_in_context")
            token = int(np.argmax(model(np.asarray([ids])).logits.numpy()[0, -1]))
            ids.append(token)
            new.append(token)
            if stop in tokenizer.decode(new):
                break
    return tokenizer.decode(new).split(stop)[0].strip()


METHODS = ("likelihood", "greedy")


def evaluate_in_context(model, tokenizer, task, shots, *, method="likelihood", num_queries=20,
                        num_candidates=4, per_token=False, seed=0):
    """Accuracy of ``model`` on ``num_queries`` queries of ``task`` with ``shots``
    demonstrations each (0: zero-shot, 1: one-shot, K: few-shot), drawn at random from the other
    examples (GPT-3 draws them from the training set; a query is never its own demonstration).

    ``method="likelihood"``: the correct completion and ``num_candidates - 1`` completions of other
    examples are ranked by ``score_completions``; right when the correct one scores strictly
    highest. ``"greedy"``: the model writes its completion token by token (argmax) until a new line;
    right when it equals the answer exactly."""
    where = "evaluate_in_context"
    shots = checks.int_at_least(shots, 0, "shots", where)
    num_queries = checks.positive_int(num_queries, "num_queries", where)
    if method not in METHODS:
        raise ValueError(f"{where}: method must be one of {METHODS}, got {method!r}")
    examples = task.examples
    if shots > len(examples) - 1:
        raise ValueError(f"{where}: {shots} demonstrations need at least {shots + 1} examples, "
                         f"task {task.name!r} has {len(examples)}")
    answers = sorted({completion for _, completion in examples})
    if method == "likelihood" and not 2 <= num_candidates <= len(answers):
        raise ValueError(f"{where}: num_candidates must be in [2, {len(answers)}] (the task's "
                         f"distinct completions), got {num_candidates!r}")
    rng = np.random.default_rng(seed)
    correct = 0
    for _ in range(num_queries):
        query = int(rng.integers(len(examples)))
        others = [i for i in range(len(examples)) if i != query]
        demonstrations = [examples[i] for i in rng.choice(others, size=shots, replace=False)]
        context, answer = examples[query]
        prompt = build_prompt(task, context, demonstrations)
        if method == "likelihood":
            distractors = [a for a in answers if a != answer]
            candidates = [answer] + list(rng.choice(distractors, size=num_candidates - 1,
                                                    replace=False))
            scores = score_completions(model, tokenizer, prompt, candidates, per_token)
            correct += int(scores[0] > scores[1:].max())      # a tie is not a success
        else:
            max_tokens = len(_encode(tokenizer, " " + answer)) + 1
            correct += int(_greedy_completion(model, tokenizer, prompt, max_tokens) == answer)
    return correct / num_queries
