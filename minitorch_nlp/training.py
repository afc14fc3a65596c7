"""Training a language model on a text, end to end: what ``minitorch-nlp demo``, ``train`` and
``generate`` run.

A ``LanguageModelRun`` holds everything a run needs to continue exactly where it stopped: the
tokenizer, the model, AdamW and its learning-rate schedule, the random streams (batches and
masks; dropout draws from the default generator) and the loss history. ``save`` writes all of it
to one ``.npz`` checkpoint (``minitorch_nlp.io``, never pickle); ``LanguageModelRun.load``
rebuilds it, so that training for k steps, stopping and resuming gives, at step n, the same
parameters bit for bit as training n steps at once.

Two kinds of model:

* ``gpt``: a GPT-2-style decoder (``models.gpt``) trained on next-token prediction over random
  windows of the text (eq 18, L1);
* ``bert``: a BERT encoder (``models.bert``) trained with the masked-LM objective on random
  windows, the masks redrawn every time a window is drawn (RoBERTa's dynamic masking).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from dataclasses import dataclass

import numpy as np

from . import io, optim
from .autograd import Generator, no_grad, random as mt_random, tensor
from .backends import backend as use_backend, get_backend
from .data.corpus import load_text
from .data.masking import MaskedLMCollator
from .data.tokenizers import tokenizer_from_state

__all__ = ["LanguageModelRun", "TrainConfig", "CHECKPOINT_NAME"]

CHECKPOINT_NAME = "checkpoint.npz"
FORMAT = "minitorch-nlp-language-model"
MODELS = ("gpt", "bert")
TOKENIZERS = ("char", "bpe", "wordpiece")


@dataclass
class TrainConfig:
    """Everything that defines a run. ``text`` is a UTF-8 file (None: the built-in corpus, the
    standard library's docstrings, the first ``max_chars`` characters of it)."""

    model: str = "gpt"
    text: str | None = None
    max_chars: int | None = 1_000_000
    tokenizer: str = "char"
    vocab_size: int = 1000            # bpe / wordpiece only; char takes every character it sees
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 128
    dropout: float = 0.0
    batch_size: int = 16
    steps: int = 1500
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 8
    validation_fraction: float = 0.1
    mask_prob: float = 0.15          # bert only
    seed: int = 0
    backend: str = "numba"

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"TrainConfig: model must be one of {MODELS}, got {self.model!r}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"TrainConfig: tokenizer must be one of {TOKENIZERS}, got "
                             f"{self.tokenizer!r}")
        for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "steps",
                     "eval_every", "eval_batches", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig: {name} must be a positive int, got {value!r}")
        if self.model == "bert" and self.tokenizer == "char":
            raise ValueError("TrainConfig: a BERT needs [CLS], [SEP] and [MASK] tokens: use the "
                             "wordpiece or bpe tokenizer, not char")
        if self.n_embd % self.n_head:
            raise ValueError(f"TrainConfig: n_head={self.n_head} must divide n_embd={self.n_embd}")
        if not 0 < self.validation_fraction < 1:
            raise ValueError("TrainConfig: validation_fraction must lie in (0, 1), got "
                             f"{self.validation_fraction}")
        if self.warmup_steps < 0 or self.warmup_steps >= self.steps:
            raise ValueError(f"TrainConfig: warmup_steps must lie in [0, steps={self.steps}), got "
                             f"{self.warmup_steps}")


def _read_text(config):
    text = load_text(config.text)
    return text if config.max_chars is None or config.text else text[:config.max_chars]


def _train_tokenizer(config, text):
    from .data import tokenizers
    if config.tokenizer == "char":
        return tokenizers.CharTokenizer.train(text)
    if config.tokenizer == "bpe":   # RoBERTa's special tokens (<s> </s> <mask> ...) for a BERT
        return tokenizers.ByteLevelBPETokenizer.train(
            text, vocab_size=config.vocab_size,
            style="roberta" if config.model == "bert" else "gpt2")
    return tokenizers.WordPieceTokenizer.train(text, vocab_size=config.vocab_size)


def _build_model(config, vocab_size, tokenizer):
    if config.model == "gpt":
        from .models.gpt import GPT2LMHeadModel, GPTConfig
        return GPT2LMHeadModel(GPTConfig.gpt2(
            vocab_size=vocab_size, n_positions=config.block_size, n_embd=config.n_embd,
            n_layer=config.n_layer, n_head=config.n_head, resid_pdrop=config.dropout,
            embd_pdrop=config.dropout, attn_pdrop=config.dropout,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=None))  # generate never stops early
    from .models.bert import BertConfig, BertForMaskedLM
    return BertForMaskedLM(BertConfig(
        vocab_size=vocab_size, hidden_size=config.n_embd, num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head, intermediate_size=4 * config.n_embd,
        max_position_embeddings=config.block_size, hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout, pad_token_id=tokenizer.pad_token_id))


def _decay_groups(model, weight_decay):
    """Weight decay on every parameter of two or more dimensions (weights, embeddings, the
    position table), none on biases and LayerNorm gains, as nanoGPT does."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


class LanguageModelRun:
    """A language model being trained on one text; see the module docstring."""

    def __init__(self, config, *, state=None, text=None):
        self.config = config
        text = _read_text(config) if text is None else text
        self.text_digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if state is not None and state["text_sha256"] != self.text_digest:
            raise ValueError("LanguageModelRun: the text differs from the one this checkpoint was "
                             "trained on (its SHA-256 changed); resume with the same --text and "
                             "--max-chars")
        self.tokenizer = (tokenizer_from_state(state["tokenizer"]) if state is not None
                          else _train_tokenizer(config, text))
        ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False), dtype=np.int64)
        window = self._window_length()
        split = int(len(ids) * (1 - config.validation_fraction))
        self.train_ids, self.val_ids = ids[:split], ids[split:]
        for name, part in (("training", self.train_ids), ("validation", self.val_ids)):
            if len(part) <= window:
                raise ValueError(f"LanguageModelRun: the {name} part of the text has {len(part)} "
                                 f"tokens, not more than block_size={config.block_size}; give a "
                                 "longer text or a smaller --block-size")
        self.backend = get_backend(config.backend)
        with use_backend(self.backend):
            mt_random.manual_seed(config.seed)
            self.model = _build_model(config, len(self.tokenizer), self.tokenizer)
        self.optimizer = optim.AdamW(_decay_groups(self.model, config.weight_decay), lr=config.lr,
                                     betas=(0.9, 0.95))
        self.scheduler = optim.CosineWarmupDecayLR(self.optimizer, config.warmup_steps,
                                                   config.steps, min_lr_ratio=config.min_lr_ratio)
        self.rng = np.random.default_rng(config.seed)
        if config.model == "bert":
            self.collator = MaskedLMCollator.from_tokenizer(self.tokenizer,
                                                            mlm_probability=config.mask_prob)
        # the validation windows (and their masks) are drawn once, so every evaluation is the same
        self.val_batches = [self._batch(self.val_ids, np.random.default_rng([config.seed, i]))
                            for i in range(config.eval_batches)]
        self.step, self.history = 0, {"step": [], "loss": [], "val_step": [], "val_loss": []}
        if state is not None:
            self._restore(state)

    # ---- data ------------------------------------------------------------------------------------
    def _window_length(self):
        """Tokens drawn per example: GPT reads block_size tokens and predicts each from the ones
        before it; BERT reads block_size tokens, [CLS] and [SEP] included."""
        return self.config.block_size if self.config.model == "gpt" else \
            self.config.block_size - 2

    def _batch(self, ids, rng):
        """A batch of random windows of ``ids``: (input_ids, labels) as NumPy int arrays."""
        length = self._window_length()
        starts = rng.integers(0, len(ids) - length, size=self.config.batch_size)
        windows = np.stack([ids[s:s + length] for s in starts])
        if self.config.model == "gpt":
            return windows, windows   # the model shifts the labels: token t+1 from tokens <= t
        tok = self.tokenizer
        column = np.ones((len(windows), 1), dtype=np.int64)
        ids = np.concatenate([column * tok.cls_token_id, windows, column * tok.sep_token_id],
                             axis=1)
        masked = self.collator(ids, rng=rng)   # a fresh mask each time (dynamic masking)
        return masked["input_ids"], masked["labels"]

    # ---- training --------------------------------------------------------------------------------
    def loss(self, input_ids, labels):
        out = self.model(input_ids=tensor(input_ids, backend=self.backend),
                         labels=tensor(labels, backend=self.backend))
        return out.loss

    def evaluate(self):
        """The mean loss over the fixed validation batches, without dropout."""
        self.model.eval()
        with no_grad(), use_backend(self.backend):
            losses = [self.loss(*batch).item() for batch in self.val_batches]
        self.model.train()
        return float(np.mean(losses))

    def train(self, until=None, *, progress=True, checkpoint_path=None, checkpoint_every=None):
        """Train until step ``until`` (default: ``config.steps``), evaluating every
        ``config.eval_every`` steps and at the last, and saving to ``checkpoint_path`` every
        ``checkpoint_every`` steps and at the end. Returns the validation loss at the end.

        Evaluation draws no random numbers (its batches are fixed), so where a run stops and
        resumes does not change it."""
        until = self.config.steps if until is None else until
        if until > self.config.steps:
            raise ValueError(f"LanguageModelRun.train: until={until} is past the run's "
                             f"{self.config.steps} steps (the learning-rate schedule ends there)")
        bar = _progress_bar(self.step, until, enabled=progress)
        self.model.train()
        val_loss = self.history["val_loss"][-1] if self.history["val_loss"] else math.nan
        with use_backend(self.backend):
            while self.step < until:
                loss = self.loss(*self._batch(self.train_ids, self.rng))
                self.optimizer.zero_grad()
                loss.backward()
                optim.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
                self.optimizer.step()
                self.scheduler.step()
                self.step += 1
                self.history["step"].append(self.step)
                self.history["loss"].append(loss.item())
                if self.step % self.config.eval_every == 0 or self.step == self.config.steps:
                    val_loss = self.evaluate()
                    self.history["val_step"].append(self.step)
                    self.history["val_loss"].append(val_loss)
                if checkpoint_path and checkpoint_every and self.step % checkpoint_every == 0:
                    self.save(checkpoint_path)
                bar.update(1)
                shown = {"loss": f"{self.history['loss'][-1]:.3f}"}
                if not math.isnan(val_loss):
                    shown["val"] = f"{val_loss:.3f}"
                bar.set_postfix(shown)
        bar.close()
        if checkpoint_path:
            self.save(checkpoint_path)
        if self.history["val_step"][-1:] != [self.step]:
            val_loss = self.evaluate()   # stopped between evaluations: report, do not record
        return val_loss

    # ---- checkpoints -----------------------------------------------------------------------------
    def state_dict(self):
        return {"format": FORMAT, "config": dataclasses.asdict(self.config),
                "text_sha256": self.text_digest, "tokenizer": self.tokenizer.state_dict(),
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "step": self.step,
                "batch_rng": self.rng.bit_generator.state,
                "default_generator": mt_random.default_generator().get_state(),
                "history": self.history}

    def _restore(self, state):
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.rng.bit_generator.state = state["batch_rng"]
        mt_random.default_generator().set_state(state["default_generator"])
        self.history = {key: list(value) for key, value in state["history"].items()}

    def save(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        io.save(self.state_dict(), path)

    @classmethod
    def load(cls, path, *, text=None, **overrides):
        """The run saved at ``path`` (a checkpoint file or the directory holding
        ``checkpoint.npz``), ready to continue. ``overrides`` change settings that do not alter
        the model (``backend``, ``eval_every``)."""
        state = read_checkpoint(path)
        allowed = {"backend", "eval_every"}
        if set(overrides) - allowed:
            raise ValueError(f"LanguageModelRun.load: only {sorted(allowed)} can change on "
                             f"resume, not {sorted(set(overrides) - allowed)}")
        config = TrainConfig(**{**state["config"], **overrides})
        return cls(config, state=state, text=text)


def read_checkpoint(path):
    """The state saved by ``LanguageModelRun.save`` at ``path`` (file or run directory)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}; train one with `minitorch-nlp train` "
                                "or `minitorch-nlp demo`")
    state = io.load(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a language-model checkpoint written by "
                         "minitorch-nlp train/demo")
    return state


def _progress_bar(start, total, enabled):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not enabled:
        return _NoBar()
    return tqdm(total=total, initial=start, desc="training", unit="step", dynamic_ncols=True)


class _NoBar:
    def update(self, n):
        pass

    def set_postfix(self, values):
        pass

    def close(self):
        pass


# ---- the demo, reports and inference -------------------------------------------------------------
def demo_config(steps=None, backend="numba", seed=0, smoke=False):
    """The main job's settings: a 4-layer GPT-2-style character model (d 128, 4 heads, context
    128, 0.8M parameters) on the first million characters of the built-in corpus, 1500 AdamW
    steps of 16 windows. ``smoke``: a 1-layer model on 50 000 characters, seconds."""
    if smoke:
        return TrainConfig(max_chars=50_000, n_layer=1, n_head=2, n_embd=32, block_size=32,
                           batch_size=8, steps=steps or 20, warmup_steps=2, eval_every=10,
                           eval_batches=2, seed=seed, backend=backend)
    steps = steps or TrainConfig.steps
    return TrainConfig(steps=steps, warmup_steps=min(TrainConfig.warmup_steps, steps // 10),
                       seed=seed, backend=backend)


def write_report(run, out, seconds):
    """Write what a finished (or stopped) run produced to ``out``: ``metrics.json``, ``loss.png``
    (when matplotlib is installed) and, for a GPT, ``samples.txt``. Returns the metrics."""
    import json
    os.makedirs(out, exist_ok=True)
    history = run.history
    metrics = {"step": run.step, "seconds": round(seconds, 2),
               "train_loss": history["loss"][-1] if history["loss"] else None,
               "val_loss": history["val_loss"][-1] if history["val_loss"] else None,
               "parameters": run.model.num_parameters(), "config": dataclasses.asdict(run.config),
               "files": [CHECKPOINT_NAME, "metrics.json"]}
    if _plot_losses(history, os.path.join(out, "loss.png"), run.config):
        metrics["files"].append("loss.png")
    if run.config.model == "gpt":
        prompts = ("The ", "Return the ", "This module ")
        metrics["samples"] = [generate_text(run.model, run.tokenizer, prompt, max_new_tokens=200,
                                            temperature=0.8, top_k=40, seed=i)
                              for i, prompt in enumerate(prompts)]
        with open(os.path.join(out, "samples.txt"), "w", encoding="utf-8") as file:
            file.write("\n\n".join(metrics["samples"]) + "\n")
        metrics["files"].append("samples.txt")
    with open(os.path.join(out, "metrics.json"), "w", encoding="utf-8") as file:
        json.dump(metrics, file, indent=2)
    return metrics


def _plot_losses(history, path, config):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    losses = np.asarray(history["loss"])
    ax.plot(history["step"], losses, alpha=0.3, label="training batch")
    if len(losses) >= 20:
        window = max(1, len(losses) // 50)
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax.plot(history["step"][window - 1:], smooth, label=f"training (mean of {window})")
    ax.plot(history["val_step"], history["val_loss"], "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title(f"{config.model}: {config.n_layer} layers, d {config.n_embd}, "
                 f"{config.tokenizer} tokens")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def load_for_inference(path, backend=None):
    """(model in eval mode, tokenizer, model kind "gpt" or "bert") from a checkpoint written by
    ``LanguageModelRun`` (the file or its run directory), or from a HuggingFace directory
    (``config.json`` + ``model.safetensors`` + the tokenizer's files, e.g. one written by
    ``save_pretrained`` and ``tokenizer.save``)."""
    from .data.tokenizers import load_tokenizer
    from .io.huggingface import CONFIG_NAME, from_pretrained
    if os.path.isfile(os.path.join(os.fspath(path), CONFIG_NAME)):
        from .models.bert import BertForMaskedLM   # RobertaForMaskedLM is one too
        from .models.gpt import GPTLMHeadModel
        model = from_pretrained(path, backend=backend)
        if isinstance(model, GPTLMHeadModel):
            return model, load_tokenizer(path), "gpt"
        if isinstance(model, BertForMaskedLM):
            return model, load_tokenizer(path), "bert"
        raise ValueError(f"{path} holds a {type(model).__name__}, which neither generates text "
                         "nor fills masks; give a GPT/GPT-2 LM head or a masked-LM checkpoint")
    state = read_checkpoint(path)
    config = TrainConfig(**{**state["config"], **({} if backend is None else
                                                   {"backend": backend})})
    tokenizer = tokenizer_from_state(state["tokenizer"])
    with use_backend(get_backend(config.backend)):
        model = _build_model(config, len(tokenizer), tokenizer)
    model.load_state_dict(state["model"])
    return model.eval(), tokenizer, config.model


def generate_text(model, tokenizer, prompt, *, max_new_tokens=200, temperature=0.8, top_k=None,
                  top_p=None, repetition_penalty=1.0, seed=0, on_text=None):
    """``prompt`` and its continuation by a GPT (``temperature=0``: greedy); ``on_text`` receives
    each new piece of text as soon as its tokens decode to whole characters (streaming)."""
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    if not prompt_ids:
        raise ValueError("generate_text: the prompt is empty after tokenization; give some text")
    room = model.config.n_positions - len(prompt_ids)
    if room < 1:
        raise ValueError(f"generate_text: the prompt has {len(prompt_ids)} tokens, the model "
                         f"reads at most {model.config.n_positions}; shorten it")
    new_ids, printed = [], [0]

    def stream(step_ids):
        new_ids.append(int(step_ids[0]))
        text = tokenizer.decode(new_ids)
        if on_text is not None and not text.endswith("\ufffd"):   # wait for a whole character
            on_text(text[printed[0]:])
            printed[0] = len(text)

    with use_backend(next(iter(model.parameters())).backend):
        model.generate(np.asarray([prompt_ids]), min(max_new_tokens, room),
                       do_sample=temperature > 0, temperature=temperature or 1.0, top_k=top_k,
                       top_p=top_p, repetition_penalty=repetition_penalty,
                       generator=Generator(seed), streamer=stream)
    return prompt + tokenizer.decode(new_ids)


def fill_masks(model, tokenizer, text):
    """``text`` with each [MASK] replaced by the BERT's likeliest token."""
    ids = tokenizer.encode(text)
    with no_grad():
        logits = model(input_ids=np.asarray([ids])).logits.numpy()[0]
    filled = [int(logits[i].argmax()) if token == tokenizer.mask_token_id else token
              for i, token in enumerate(ids)]
    return tokenizer.decode(filled, skip_special_tokens=True)
