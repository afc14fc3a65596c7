"""Training a language model on a text, end to end: what ``minitorch-nlp demo``, ``train`` and
``generate`` run.

A ``LanguageModelRun`` holds everything a run needs to continue exactly where it stopped: the
tokenizer, the model, AdamW and its learning-rate schedule, the random streams (batches and
masks; dropout draws from the default generator) and the loss history. ``save`` writes all of it
to one ``.npz`` checkpoint (``minitorch_nlp.io``, never pickle); ``LanguageModelRun.load``
rebuilds it, so that training for k steps, stopping and resuming gives, at step n, the same
parameters bit for bit as training n steps at once.

The model families come from ``minitorch_nlp.models.registry`` (``gpt``: next-token prediction
over random windows of the text, eq 18, L1; ``bert`` and ``roberta``: the masked-LM objective on
random windows, the masks redrawn every time a window is drawn, RoBERTa's dynamic masking;
``xl``: consecutive segments of ``batch_size`` parallel streams of the text, each layer's memory
of the previous segment carried from step to step and saved in the checkpoint). This
module holds no per-model code: each family says how to build its model, which tokenizers it
takes and how its objective makes a batch.

The same loop runs over MPI ranks (``mpirun -n 4 minitorch-nlp train gpt --parallel dp=2,tp=2
--zero 1``): ``parallel``, a ``distributed.training.ParallelTraining``, builds the rank's shards,
its optimizer, its share of each batch, the gradient averaging and clipping, and the gathered
checkpoints; by default it is one process and changes nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import math
import os
import signal
import threading
import time
from dataclasses import dataclass

import numpy as np

from . import checks, io, optim
from .autograd import no_grad, random as mt_random, tensor
from .backends import backend as use_backend, get_backend
from .checks import SettingError
from .data.corpus import TextFileError, load_text, read_text_file
from .data.tokenizers import tokenizer_from_state
from .distributed.training import ParallelTraining
from .io.runs import CHECKPOINT_NAME, FORMAT, checkpoint_file, read_checkpoint
from .models import registry
from .nn.moe import aux_losses

__all__ = ["CHECKPOINT_NAME", "LanguageModelRun", "RunDiverged", "TextFileError", "TrainConfig",
           "checkpoint_file", "demo_config", "read_checkpoint", "read_text_file", "saved_model",
           "write_report"]

TOKENIZERS = ("char", "bpe", "wordpiece", "unigram")
DEFAULT_WARMUP_STEPS = 100
MOE_AUX_WEIGHT = 0.01
CHECKPOINT_SECONDS = 300.0


@dataclass
class TrainConfig:
    """Everything that defines a run. ``text`` is a UTF-8 file, kept as an absolute path so that a
    run resumes from any directory (None: the built-in corpus, the standard library's docstrings,
    the first ``max_chars`` characters of it). ``tokenizer`` None: the model family's default.
    ``warmup_steps`` None: 100 steps, or a tenth of a shorter run."""

    model: str = "gpt"
    text: str | None = None
    max_chars: int | None = 1_000_000
    tokenizer: str | None = None
    vocab_size: int = 1000            # bpe / wordpiece / unigram; char takes every character seen
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 128
    dropout: float = 0.0
    batch_size: int = 16
    steps: int = 1500
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int | None = None
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 8
    validation_fraction: float = 0.1
    mask_prob: float = 0.15          # masked-LM families only
    experts: int = 0                 # gpt only: GShard MoE layers of this many experts (0: none)
    seed: int = 0
    backend: str = "numba"

    RULES = (
        checks.positive("n_layer", "n_head", "n_embd", "block_size", "batch_size", "steps",
                        "eval_every", "eval_batches", "vocab_size"),
        checks.positive("max_chars", optional=True),
        checks.ints_at_least(0, "seed", "experts"),
        checks.divides("n_head", "n_embd"),
        checks.positive_numbers("lr", "grad_clip"),
        checks.numbers_in(0, math.inf, "weight_decay"),
        checks.numbers_in(0, 1, "dropout", high_open=True),
        checks.numbers_in(0, 1, "min_lr_ratio"),
        checks.numbers_in(0, 1, "mask_prob", "validation_fraction", low_open=True,
                          high_open=True),
    )

    def __post_init__(self):
        try:
            family = registry.family(self.model)
        except ValueError as error:
            raise SettingError("model", str(error).removeprefix("unknown model ")) from None
        if self.tokenizer is None:
            self.tokenizer = family.default_tokenizer
        if self.tokenizer not in TOKENIZERS:
            raise SettingError("tokenizer", f"must be one of {', '.join(TOKENIZERS)}, got "
                               f"{self.tokenizer!r}")
        try:
            family.check_tokenizer(self.tokenizer)
        except ValueError as error:
            raise SettingError("tokenizer", f"{self.tokenizer}: {error}") from None
        if self.text is not None:
            self.text = os.path.abspath(os.fspath(self.text))
        checks.validate(self)
        if self.experts == 1:
            raise SettingError("experts", "must be 0 (no mixture of experts) or an int >= 2 "
                               "(GShard's top-2 routing), got 1")
        if self.experts and not family.takes_experts:
            names = [name for name, other in registry.families().items() if other.takes_experts]
            raise SettingError("experts", f"={self.experts}: mixture-of-experts layers are built "
                               f"for the {', '.join(names)} family, not {self.model}")
        if self.experts and self.n_layer < 2:
            raise SettingError("experts", f"={self.experts} replaces the feed-forward network of "
                               f"every other layer (the 2nd, 4th ...): give --n-layer 2 or more, "
                               f"got {self.n_layer}")
        objective = family.objective
        least = objective.extra_tokens + (2 if objective.generates_text else 1)
        if self.block_size < least:
            why = ("a window must hold a token and the next one, which it learns to predict"
                   if objective.generates_text else
                   f"{objective.extra_tokens} special tokens go around each window of text")
            raise SettingError("block_size", f"must be at least {least} for a {self.model} "
                               f"({why}), got {self.block_size}")
        if self.warmup_steps is None:
            self.warmup_steps = min(DEFAULT_WARMUP_STEPS, self.steps // 10)
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) \
                or not 0 <= self.warmup_steps < self.steps:
            raise SettingError("warmup_steps", f"must lie in [0, steps={self.steps}), got "
                               f"{self.warmup_steps!r}")


class RunDiverged(ArithmeticError):
    """The training loss (or a weight) stopped being a finite number: the run stops there and
    its last checkpoint, written before, is left as it was."""

    def __init__(self, what, step, lr, saved_step, path):
        kept = (f"the last good checkpoint (step {saved_step}) is kept in {path}"
                if saved_step is not None else "no checkpoint had been written yet")
        super().__init__(f"{what} at step {step}: the run diverged and stopped; {kept}. The "
                         f"usual cause is a learning rate too high for the model (--lr {lr:g}): "
                         "lower it, or warm up longer (--warmup-steps)")
        self.step, self.saved_step = step, saved_step


def _read_text(config):
    if config.text is not None:
        return read_text_file(config.text, config.max_chars)
    text = load_text(None)
    return text if config.max_chars is None else text[:config.max_chars]


def _train_tokenizer(config, text):
    from .data import tokenizers
    from .data.tokenizers.bpe import STYLES
    if config.tokenizer == "char":
        return tokenizers.CharTokenizer.train(text)
    if config.tokenizer == "bpe":
        return tokenizers.ByteLevelBPETokenizer.train(
            text, vocab_size=config.vocab_size, style=registry.family(config.model).bpe_style)
    if config.tokenizer == "unigram":
        # The special tokens and template a byte-level BPE gets for this family, so that the
        # families that train with bpe (masks, end of sequence ...) train with unigram too.
        style = STYLES[registry.family(config.model).bpe_style]
        return tokenizers.UnigramTokenizer.train(
            text, vocab_size=config.vocab_size, special_tokens=style.special_tokens,
            template=style.template(style.special_tokens))
    return tokenizers.WordPieceTokenizer.train(text, vocab_size=config.vocab_size)


def _decay_groups(parameters, weight_decay):
    """Weight decay on every parameter of two or more dimensions (weights, embeddings, the
    position table), none on biases and LayerNorm gains, as nanoGPT does."""
    params = [p for p in parameters if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


class LanguageModelRun:
    """A language model being trained on one text; see the module docstring.

    A subclass changes what is trained by overriding ``build_model`` (the model, and what else
    it needs beside it), ``trained_parameters`` and ``training_loss``, and adds to the
    checkpoint through ``state_dict`` / ``_restore``; ``COMMAND`` is the ``minitorch-nlp``
    command that writes and resumes its runs (``compress.distillation_run.DistillationRun``)."""

    COMMAND = "train"

    def __init__(self, config, *, state=None, text=None, tokenizer=None, parallel=None):
        self.config = config
        self.parallel = ParallelTraining() if parallel is None else parallel
        self.family = registry.family(config.model)
        text = _read_text(config) if text is None else text
        self.text_digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if state is not None and state["text_sha256"] != self.text_digest:
            raise ValueError("LanguageModelRun: the text differs from the one this checkpoint was "
                             "trained on (its SHA-256 changed); resume with the same --text and "
                             "--max-chars")
        if state is not None:
            self.tokenizer = tokenizer_from_state(state["tokenizer"])
        else:   # a given tokenizer: a student distilled from a teacher reads the teacher's
            self.tokenizer = _train_tokenizer(config, text) if tokenizer is None else tokenizer
        ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False), dtype=np.int64)
        window = self.family.objective.window_length(config.block_size)
        split = int(len(ids) * (1 - config.validation_fraction))
        self.train_ids, self.val_ids = ids[:split], ids[split:]
        for name, part in (("training", self.train_ids), ("validation", self.val_ids)):
            if len(part) <= window:
                raise SettingError("block_size", f"={config.block_size} is too long for the text: "
                                   f"its {name} part has {len(part)} tokens, and a window needs "
                                   f"more than {window}; give a longer text or a smaller "
                                   "--block-size")
        if self.family.objective.carries_memory \
                and len(self.train_ids) // config.batch_size < window:
            raise SettingError("batch_size", f"={config.batch_size} cuts the training text "
                               f"({len(self.train_ids)} tokens) into streams shorter than a "
                               f"segment of {window}; give a longer text or a smaller "
                               "--batch-size or --block-size")
        self.parallel.check(config, len(self.tokenizer))
        self.backend = get_backend(config.backend)
        with use_backend(self.backend):
            mt_random.manual_seed(config.seed)
            self.model = self.parallel.build(lambda: self.build_model(fresh=state is None))
        self.optimizer = self.parallel.optimizer(
            self.model, _decay_groups(self.trained_parameters(), config.weight_decay),
            lr=config.lr, betas=(0.9, 0.95))
        self.scheduler = optim.CosineWarmupDecayLR(
            self.parallel.scheduled(self.optimizer), config.warmup_steps, config.steps,
            min_lr_ratio=config.min_lr_ratio)
        self.rng = np.random.default_rng(config.seed)
        self._make_batch = self.family.objective.batcher(self.tokenizer, config.mask_prob)
        # the validation windows (and their masks) are drawn once, so every evaluation is the same
        self.val_batches = [self._batch(self.val_ids, np.random.default_rng([config.seed, i]))
                            for i in range(config.eval_batches)]
        self.step, self.history = 0, {"step": [], "loss": [], "val_step": [], "val_loss": []}
        # an objective that carries a memory: the next segment of each stream, the model's memory
        self.segment, self.memory = 0, None
        self.interrupted = False
        self.saved_step = None        # the step of the last checkpoint this process wrote
        if state is not None:
            self._restore(state)

    def build_model(self, fresh):
        """The model the run trains, made under the run's seed and backend; ``fresh``: False
        when a checkpoint's weights are about to replace its initial ones."""
        return self.family.build(self.config, self.tokenizer)

    def trained_parameters(self):
        """What the optimiser updates."""
        return self.model.parameters()

    def dense_model(self):
        """The trained model whole, in this process (gathered from the ranks' shards, a
        collective, for a tensor-parallel or ZeRO run; else ``model`` itself)."""
        with use_backend(self.backend):
            return self.parallel.dense_model(self.model, self.optimizer,
                                             lambda: self.build_model(fresh=False))

    # ---- data ------------------------------------------------------------------------------------
    def _batch(self, ids, rng):
        """A batch of random windows of ``ids`` made into (input_ids, labels) by the objective."""
        length = self.family.objective.window_length(self.config.block_size)
        starts = rng.integers(0, len(ids) - length, size=self.config.batch_size)
        return self._make_batch(np.stack([ids[s:s + length] for s in starts]), rng)

    def _next_segments(self):
        """The next segment of each of ``batch_size`` streams of the training text, as the
        objective's (input_ids, labels); back to the streams' beginnings, and to an empty
        memory, when they are used up."""
        length = self.family.objective.window_length(self.config.block_size)
        streams = len(self.train_ids) // self.config.batch_size
        if (self.segment + 1) * length > streams:
            self.segment, self.memory = 0, None
        rows = self.train_ids[:streams * self.config.batch_size].reshape(
            self.config.batch_size, streams)
        windows = rows[:, self.segment * length:(self.segment + 1) * length]
        self.segment += 1
        return self._make_batch(windows, self.rng)

    # ---- training --------------------------------------------------------------------------------
    def model_output(self, input_ids, labels, attention_mask=None, **model_state):
        """The model's output on a batch (``.loss`` ...); ``attention_mask`` when the objective
        pads its inputs (BART's noised texts differ in length), ``model_state`` the memory of an
        objective that carries one (``mems``)."""
        extra = {} if attention_mask is None else {"attention_mask": attention_mask}
        return self.model(input_ids=tensor(input_ids, backend=self.backend),
                          labels=tensor(labels, backend=self.backend), **extra, **model_state)

    def loss(self, input_ids, labels, attention_mask=None):
        """The model's loss on a batch (with no memory)."""
        return self.model_output(input_ids, labels, attention_mask).loss

    def evaluate(self):
        """The mean loss over the fixed validation batches, without dropout."""
        self.model.eval()
        with no_grad(), use_backend(self.backend), self.parallel.gathered(self.optimizer):
            losses = [self.loss(*batch).item() for batch in self.val_batches]
        self.model.train()
        return float(np.mean(losses))

    def train(self, until=None, *, progress=True, checkpoint_path=None, checkpoint_every=None,
              checkpoint_seconds=CHECKPOINT_SECONDS):
        """Train until step ``until`` (default: ``config.steps``), evaluating every
        ``config.eval_every`` steps and at the last. With ``checkpoint_path``, the run is saved
        there every ``checkpoint_every`` steps, whenever ``checkpoint_seconds`` of training have
        passed since the last save (None: never), and at the end. Returns the validation loss
        at the end.

        Ctrl-C (SIGINT, in the main thread) stops the run after the step under way, saves it to
        ``checkpoint_path`` and returns with ``self.interrupted`` set; a second Ctrl-C
        interrupts at once. Evaluation draws no random numbers (its batches are fixed), so where
        a run stops and resumes does not change it."""
        until = self.config.steps if until is None else until
        if until > self.config.steps:
            raise ValueError(f"LanguageModelRun.train: until={until} is past the run's "
                             f"{self.config.steps} steps (the learning-rate schedule ends there)")
        bar = _progress_bar(self.step, until, enabled=progress)
        self.model.train()
        val_loss = self.history["val_loss"][-1] if self.history["val_loss"] else math.nan
        last_save = time.monotonic()
        with use_backend(self.backend), _sigint_stops_after_the_step() as stop:
            while self.step < until and not stop:
                self._train_step()
                if not math.isfinite(self.history["loss"][-1]):
                    bar.close()
                    raise RunDiverged(f"the training loss became {self.history['loss'][-1]}",
                                      self.step, self.config.lr, self.saved_step,
                                      checkpoint_path)
                if self.step % self.config.eval_every == 0 or self.step == self.config.steps:
                    val_loss = self.evaluate()
                    self.history["val_step"].append(self.step)
                    self.history["val_loss"].append(val_loss)
                due = (checkpoint_every and self.step % checkpoint_every == 0) or (
                    checkpoint_seconds is not None
                    and time.monotonic() - last_save >= checkpoint_seconds)
                due, stopping = self.parallel.agree(due, stop)   # every rank takes the same turn
                if stopping and not stop:
                    stop.append("another rank")
                if checkpoint_path and due:
                    self.save(checkpoint_path)
                    last_save = time.monotonic()
                bar.update(1)
                shown = {"loss": f"{self.history['loss'][-1]:.3f}"}
                if not math.isnan(val_loss):
                    shown["val"] = f"{val_loss:.3f}"
                bar.set_postfix(shown)
        bar.close()
        self.interrupted = bool(stop)
        if checkpoint_path:
            self.save(checkpoint_path)
        if not self.interrupted and self.history["val_step"][-1:] != [self.step]:
            val_loss = self.evaluate()   # stopped between evaluations: report, do not record
        return val_loss

    def training_loss(self, *batch):
        """The loss a training step minimises on ``batch``: the model's own (``loss``)."""
        return self.loss(*batch)

    def _train_step(self):
        if self.family.progress is not None:
            self.family.progress(self.model, self.step / self.config.steps)
        self.optimizer.zero_grad()
        with self.parallel.gathered(self.optimizer):
            if self.family.objective.carries_memory:
                out = self.model_output(*self._next_segments(), mems=self.memory)
                self.memory, loss = out.mems, out.loss
            else:                                                 # this rank's share
                loss = self.training_loss(*self.parallel.local(
                    self._batch(self.train_ids, self.rng)))
            if self.config.experts:             # GShard's load balancing, weight 0.01
                loss = loss + MOE_AUX_WEIGHT * aux_losses(self.model)
            loss.backward()
        self.parallel.step(list(self.trained_parameters()), self.optimizer, self.config.grad_clip)
        self.scheduler.step()
        self.step += 1
        self.history["step"].append(self.step)
        self.history["loss"].append(self.parallel.mean(loss.item()))

    def report_metrics(self):
        """What ``write_report`` adds to ``metrics.json`` beside the losses."""
        return {}

    # ---- checkpoints -----------------------------------------------------------------------------
    def state_dict(self):
        """Everything to continue the run; a parallel run's whole model and optimizer state,
        gathered from its ranks (every rank must call it)."""
        model, optimizer = self.parallel.state(self.model, self.optimizer)
        return {"format": FORMAT, "command": self.COMMAND,
                "config": dataclasses.asdict(self.config),
                "text_sha256": self.text_digest, "tokenizer": self.tokenizer.state_dict(),
                "model": model, "optimizer": optimizer,
                "scheduler": self.scheduler.state_dict(), "step": self.step,
                "batch_rng": self.rng.bit_generator.state,
                "default_generator": mt_random.default_generator().get_state(),
                "history": self.history, "segment": self.segment,
                "memory": [] if self.memory is None else [m.numpy() for m in self.memory]}

    def _restore(self, state):
        self.parallel.load_state(self.model, self.optimizer, state["model"], state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scheduler.total_steps != self.config.steps:   # --steps N extends the schedule
            self.scheduler.load_state_dict({**self.scheduler.state_dict(),
                                            "total_steps": self.config.steps})
        self.step = int(state["step"])
        self.rng.bit_generator.state = state["batch_rng"]
        mt_random.default_generator().set_state(state["default_generator"])
        self.history = {key: list(value) for key, value in state["history"].items()}
        self.segment = int(state.get("segment", 0))
        memory = state.get("memory") or []
        dtype = next(iter(self.model.parameters())).dtype
        self.memory = [tensor(np.asarray(m), dtype=dtype, backend=self.backend)
                       for m in memory] or None

    def save(self, path):
        """Write the run to ``path``; a parallel run gathers it (every rank must call this) and
        rank 0 writes the one file, which resumes on any number of ranks. Weights that are no
        longer finite are never written: the run has diverged (``RunDiverged``)."""
        if not all(np.isfinite(parameter.numpy()).all()
                   for parameter in self.trained_parameters()):
            raise RunDiverged("the weights stopped being finite numbers", self.step,
                              self.config.lr, self.saved_step, path)
        state = self.state_dict()
        if self.parallel.writes:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            io.save(state, path)
        self.parallel.comm.barrier()
        self.saved_step = self.step

    RESUMABLE = ("backend", "eval_every", "steps")

    @classmethod
    def load(cls, path, *, text=None, parallel=None, **overrides):
        """The run saved at ``path`` (a checkpoint file or the directory holding
        ``checkpoint.npz``), ready to continue. ``overrides`` change settings that do not alter
        what has been trained (``RESUMABLE``): ``backend``, ``eval_every``, and ``steps``, which
        moves the end of the run (and of the cosine schedule, so the learning rate from the
        current step on follows the longer schedule) to a step at or after the current one.
        A text file given by a relative path (older checkpoints) is looked for next to the
        checkpoint when it is not found from the current directory."""
        config, state = cls.saved(path, **overrides)
        return cls(config, state=state, text=text, parallel=parallel)

    @classmethod
    def saved(cls, path, **overrides):
        """(``TrainConfig``, state) of the run saved at ``path`` with ``overrides``, as ``load``
        takes them; a run written by another command (``distill``) is refused here, since only
        that command continues it the way it was trained."""
        path = checkpoint_file(path)
        state = read_checkpoint(path)
        if state.get("compression") is not None:
            raise ValueError(f"{path} holds a compressed model, made for inference (`generate` "
                             "loads it): training cannot resume from it; resume the run it "
                             "was compressed from")
        command = state.get("command", LanguageModelRun.COMMAND)
        if command != cls.COMMAND:
            raise ValueError(f"{path} was written by `minitorch-nlp {command}`; continue it "
                             f"with `minitorch-nlp {command} --resume`")
        refused = sorted(set(overrides) - set(cls.RESUMABLE))
        if refused:
            raise ValueError(f"LanguageModelRun.load: only {list(cls.RESUMABLE)} can change on "
                             f"resume, not {refused}")
        values = {**state["config"], **overrides}
        if "steps" in overrides and overrides["steps"] < int(state["step"]):
            raise SettingError("steps", f"={overrides['steps']} is before the checkpoint's step "
                               f"{int(state['step'])}; give a later end")
        beside = values["text"] and os.path.join(os.path.dirname(path), values["text"])
        if values["text"] and not os.path.exists(values["text"]) and os.path.exists(beside):
            values["text"] = beside
        return TrainConfig(**values), state


@contextlib.contextmanager
def _sigint_stops_after_the_step():
    """A list that becomes non-empty on Ctrl-C (SIGINT), so that the training loop stops between
    two steps and the checkpoint saved then holds whole steps; a second Ctrl-C raises
    ``KeyboardInterrupt`` at once. Outside the main thread signals cannot be caught: unchanged."""
    stop = []
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request_stop(signum, frame):
        if stop:
            raise KeyboardInterrupt
        stop.append(signum)

    previous = signal.signal(signal.SIGINT, request_stop)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _progress_bar(start, total, enabled):
    if importlib.util.find_spec("tqdm") is None or not enabled:
        return _NoBar()
    from .scripting import progress
    return progress(total=total, initial=start, desc="training", unit="step", dynamic_ncols=True)


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
    steps of 16 windows. ``smoke``: a 1-layer model on 50 000 characters, seconds. ``steps``
    None: 1500 (``smoke``: 20)."""
    if smoke:
        return TrainConfig(max_chars=50_000, n_layer=1, n_head=2, n_embd=32, block_size=32,
                           batch_size=8, steps=20 if steps is None else steps, eval_every=10,
                           eval_batches=2, seed=seed, backend=backend)
    return TrainConfig(steps=TrainConfig.steps if steps is None else steps, seed=seed,
                       backend=backend)


SAMPLE_PROMPTS = ("The ", "Return the ", "This module ")


def write_report(run, out, seconds, model=None):
    """Write what a finished (or stopped) run produced to ``out``: ``metrics.json``, ``loss.png``
    (when matplotlib is installed) and, for a model that generates text, ``samples.txt`` from
    ``model`` (default ``run.model``; a parallel run passes ``run.dense_model()``).
    Returns the metrics; ``vocab_size`` is the tokenizer's real size."""
    model = run.model if model is None else model
    import json
    os.makedirs(out, exist_ok=True)
    history = run.history
    metrics = {"step": run.step, "seconds": round(seconds, 2),
               "train_loss": history["loss"][-1] if history["loss"] else None,
               "val_loss": history["val_loss"][-1] if history["val_loss"] else None,
               "parameters": model.num_parameters(), "vocab_size": len(run.tokenizer),
               "config": dataclasses.asdict(run.config),
               "files": [CHECKPOINT_NAME, "metrics.json"], **run.report_metrics()}
    if _plot_losses(history, os.path.join(out, "loss.png"), run.config):
        metrics["files"].append("loss.png")
    if run.family.objective.generates_text:
        metrics["samples"] = [run.family.objective.respond(
            model, run.tokenizer, prompt, max_new_tokens=200, temperature=0.8, top_k=40,
            seed=i) for i, prompt in enumerate(SAMPLE_PROMPTS)]
        with open(os.path.join(out, "samples.txt"), "w", encoding="utf-8") as file:
            file.write("\n\n".join(metrics["samples"]) + "\n")
        metrics["files"].append("samples.txt")
    with open(os.path.join(out, "metrics.json"), "w", encoding="utf-8") as file:
        json.dump(finite_or_none(metrics), file, indent=2, allow_nan=False)
    return metrics


def finite_or_none(value):
    """``value`` with every NaN or infinite float replaced by None, so that it is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def _plot_losses(history, path, config):
    try:
        from . import plots
        plt = plots.pyplot()
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    plots.loss_curves(ax, history["step"], {"training batch": history["loss"]},
                      validation=(history["val_step"], history["val_loss"]),
                      title=f"{config.model}: {config.n_layer} layers, d {config.n_embd}, "
                            f"{config.tokenizer} tokens")
    plots.save(fig, path)
    return True


def saved_model(state, backend=None, restructure=None):
    """(model in eval mode, tokenizer, its ``registry.ModelFamily``) of a run's checkpoint
    ``state`` (``read_checkpoint``) on ``backend`` (None: the run's); ``restructure(model)``,
    when given, reshapes the freshly built model before its weights are loaded (a compressed
    run's pruned heads and int8 Linears)."""
    config = TrainConfig(**{**state["config"], **({} if backend is None else
                                                   {"backend": backend})})
    tokenizer = tokenizer_from_state(state["tokenizer"])
    family = registry.family(config.model)
    with use_backend(get_backend(config.backend)):
        model = family.build(config, tokenizer)
        if restructure is not None:
            restructure(model)
    model.load_state_dict(state["model"])
    return model.eval(), tokenizer, family
