"""A student distilled from a trained BERT run, end to end: what ``minitorch-nlp distill`` runs.

``DistillationRun`` is a ``training.LanguageModelRun`` (same text, batches, AdamW and schedule,
progress bar, checkpoints and exact resume) whose model is a student trained beside a frozen
teacher, the model of a ``minitorch-nlp train bert`` run, on that run's text and tokenizer:

* ``distilbert`` (Sanh et al., 2019): the teacher's width, half its layers, initialised from every
  other teacher layer (``models.distilbert.distilbert_from_teacher``), trained with DistilBERT's
  triple loss (``compress.distillation.TripleLoss``: eq 37 with T^2 on the masked-LM logits, the
  masked-LM loss, the cosine loss on the last hidden states);
* ``tinybert`` (Jiao et al., 2020): a BERT with half the layers and half the width (the teacher's
  heads, which eq 41 compares one by one), random init, trained with the layer-wise objective of
  eq 40 (``compress.tinybert.TinyBertLoss``: embeddings, attention scores and hidden states
  through the learnt W_e, W_h, and the prediction layer), general and prediction distillation in
  one stage on the teacher's text; its W_e and W_h are trained and checkpointed with it;
* ``mobilebert`` (Sun et al., 2020): a MobileBERT (``models.mobilebert``) as deep and as wide
  (inter-block width) as the teacher, so that its feature maps and attention maps line up with
  the teacher's layer by layer; random init, trained with Sun et al.'s auxiliary strategy (all
  parts at once): eq 46 + eq 47 on every layer plus eq 48 (the masked-LM loss and the teacher's
  masked-LM distribution at T = 1; no NSP)
  (``compress.mobilebert_losses.MobileBertTransferLoss``).

The student's checkpoint is a language-model checkpoint of its family (``distilbert``, ``bert``,
``mobilebert``), so ``minitorch-nlp generate`` loads it as any run; ``distill --resume`` continues
it, and refuses a teacher whose vocabulary or weights differ from the one it was distilled from.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from .. import training
from ..checks import SettingError
from ..io.runs import read_checkpoint
from ..autograd import no_grad, tensor
from ..backends import backend as use_backend
from ..data.tokenizers import tokenizer_from_state
from ..models.distilbert import distilbert_from_teacher
from ..nn import Module
from .distillation import Distiller, TripleLoss
from .mobilebert_losses import MobileBertTransferLoss
from .tinybert import TinyBertLoss

__all__ = ["STUDENTS", "DistillationRun", "StudentKind", "student_config"]

TEACHER_FAMILY = "bert"
# a student trains on the teacher's text with its tokenizer and context: these are not options
TEACHER_FIXED = ("text", "max_chars", "tokenizer", "vocab_size", "block_size", "mask_prob",
                 "validation_fraction", "eval_batches", "n_head")


@dataclass(frozen=True)
class StudentKind:
    """One kind of student, as ``distill --student NAME`` builds and trains it.

    ``family``: the model family its checkpoint belongs to; ``shape(depth, width, heads,
    teacher_dir)``: for ``n_layer`` and ``n_embd``, (the default, whether a given value fits,
    what fits), from the teacher's depth, width and heads; ``objective(student, teacher,
    temperature)``: the distillation loss; ``initialise(student, teacher, n_layer)``: what a
    fresh student starts from (None: its random init); ``fixed_temperature``: why the
    temperature cannot be given (None: it can)."""

    family: str
    shape: Callable
    objective: Callable
    initialise: Callable | None = None
    fixed_temperature: str | None = None


def _distilbert_shape(depth, width, heads, teacher_dir):
    return {"n_layer": ((depth + 1) // 2, lambda n: 1 <= n <= depth,
                        f"1 to the teacher's {depth} layers"),
            "n_embd": (width, lambda n: n == width, f"the teacher's width {width} "
                       "(DistilBERT keeps it: its layers are copied from the teacher)")}


def _tinybert_shape(depth, width, heads, teacher_dir):
    return {"n_layer": ((depth + 1) // 2, lambda n: 1 <= n <= depth,
                        f"1 to the teacher's {depth} layers (eq 40 maps each student layer to "
                        "one of them)"),
            "n_embd": (max(heads, width // 2 // heads * heads),
                       lambda n: n >= heads and n % heads == 0,
                       f"a multiple of the teacher's {heads} heads (eq 41 compares the "
                       "attention head by head)")}


def _mobilebert_shape(depth, width, heads, teacher_dir):
    if width // 4 < 1 or (width // 4) % heads:
        raise SettingError(
            "teacher", f"{teacher_dir}: a mobilebert student has the teacher's width {width} "
            f"and {heads} heads, which must divide its bottleneck width {width} // 4 = "
            f"{width // 4}; distil another student, or train a teacher of a width that is a "
            f"multiple of {4 * heads}")
    return {"n_layer": (depth, lambda n: n == depth, f"the teacher's {depth} layers "
                        "(eq 46-47 transfer layer l to layer l)"),
            "n_embd": (width, lambda n: n == width, f"the teacher's width {width} (eq 46 "
                       "compares the feature maps at the inter-block width)")}


def _every_other_teacher_layer(student, teacher, n_layer):
    """Sanh et al.: the student's layers start as one teacher layer in two."""
    depth = teacher.config.num_hidden_layers
    layers = [i * depth // n_layer for i in range(n_layer)]
    student.load_state_dict(distilbert_from_teacher(teacher, layers).state_dict())


STUDENTS = {
    "distilbert": StudentKind(
        family="distilbert", shape=_distilbert_shape,
        objective=lambda student, teacher, temperature: TripleLoss(
            **({} if temperature is None else {"temperature": temperature})),
        initialise=_every_other_teacher_layer),
    "tinybert": StudentKind(
        family="bert", shape=_tinybert_shape,
        objective=lambda student, teacher, temperature: TinyBertLoss(
            student.config, teacher.config, temperature=1.0 if temperature is None
            else temperature)),
    "mobilebert": StudentKind(
        family="mobilebert", shape=_mobilebert_shape,
        objective=lambda student, teacher, temperature: MobileBertTransferLoss(),
        fixed_temperature="MobileBERT's transfer distils the masked-LM distribution at T = 1 "
        "(eq 48)"),
}


def _teacher_state(teacher_dir):
    """The checkpoint of the teacher run ``teacher_dir``; a ``SettingError`` on ``teacher``
    saying what is wrong with it otherwise."""
    try:
        state = read_checkpoint(teacher_dir)
    except (FileNotFoundError, ValueError) as error:
        raise SettingError("teacher", f"{teacher_dir}: {error}") from None
    if state.get("command", training.LanguageModelRun.COMMAND) != "train" \
            or state["config"]["model"] != TEACHER_FAMILY:
        raise SettingError(
            "teacher", f"{teacher_dir}: a {state['config']['model']} run written by "
            f"`minitorch-nlp {state.get('command', 'train')}`; the teacher is a run of "
            f"`minitorch-nlp train {TEACHER_FAMILY}`")
    return state


def _student_kind(student):
    if student not in STUDENTS:
        raise SettingError("student", f"{student!r}: choose one of {', '.join(STUDENTS)}")
    return STUDENTS[student]


def student_config(teacher_dir, student, *, n_layer=None, n_embd=None, **settings):
    """The ``TrainConfig`` of a ``student`` (one of ``STUDENTS``) of the teacher run
    ``teacher_dir``: the teacher's text, tokenizer, context and heads; its depth and width
    (``n_layer``, ``n_embd``, None: the student's default, see the module docstring); the other
    ``settings`` (``steps``, ``lr`` ... None: the teacher's, ``warmup_steps`` None: the
    default for the run's length). A ``SettingError`` names the setting that cannot work."""
    kind = _student_kind(student)
    teacher = _teacher_state(teacher_dir)["config"]
    rules = kind.shape(teacher["n_layer"], teacher["n_embd"], teacher["n_head"], teacher_dir)
    shape = {}
    for name, given in (("n_layer", n_layer), ("n_embd", n_embd)):
        default, fits, told = rules[name]
        if given is not None and not fits(given):
            raise SettingError(name, f"{given}: a {student} student has {told}")
        shape[name] = default if given is None else given
    values = {**teacher, **{name: teacher[name] for name in TEACHER_FIXED}, **shape,
              "model": kind.family, "warmup_steps": None}
    values.update((name, value) for name, value in settings.items() if value is not None)
    return training.TrainConfig(**values)


def _digest(model):
    """SHA-256 of ``model``'s weights, in the order of its state dict."""
    digest = hashlib.sha256()
    for name, value in model.state_dict().items():
        digest.update(name.encode("utf-8"))
        digest.update(np.ascontiguousarray(np.asarray(value)).tobytes())
    return digest.hexdigest()


class DistillationRun(training.LanguageModelRun):
    """A student (``STUDENTS``) being distilled from the teacher run ``teacher`` (a directory or
    its checkpoint); see the module docstring. ``config``: from ``student_config``.
    ``temperature``: of the soft targets (None: DistilBERT's 2, TinyBERT's 1; MobileBERT's
    transfer distils at T = 1 and takes none). ``load(path, teacher=None)`` resumes a run; its
    teacher is the saved path unless another is given (the same teacher, moved)."""

    COMMAND = "distill"

    def __init__(self, config, *, teacher=None, student=None, temperature=None, state=None,
                 text=None):
        if state is not None:
            saved = state["distillation"]
            student, temperature = saved["student"], saved["temperature"]
            teacher = saved["teacher"] if teacher is None else teacher
        self.kind = _student_kind(student)
        if self.kind.fixed_temperature and temperature is not None:
            raise SettingError("temperature", f"{temperature}: {self.kind.fixed_temperature}")
        self.student, self.temperature = student, temperature
        self.teacher_dir = os.path.abspath(os.fspath(teacher))
        teacher_state = _teacher_state(self.teacher_dir)
        self.teacher, tokenizer, _ = training.saved_model(teacher_state, backend=config.backend)
        self.teacher_digest = _digest(self.teacher)
        if state is not None:
            self._check_same_teacher(tokenizer, state)
        super().__init__(config, state=state, text=text, tokenizer=tokenizer)
        if state is None and self.text_digest != teacher_state["text_sha256"]:
            raise SettingError("teacher", f"{self.teacher_dir}: its text "
                               f"({config.text or 'the built-in corpus'}) changed since the "
                               "teacher was trained on it")

    def _check_same_teacher(self, tokenizer, state):
        saved = tokenizer_from_state(state["tokenizer"])
        if list(saved.id_to_token) != list(tokenizer.id_to_token):
            raise SettingError(
                "teacher", f"{self.teacher_dir}: its vocabulary ({len(tokenizer)} tokens) "
                f"differs from the student's ({len(saved)} tokens); distillation compares the "
                "two models token by token: give the teacher this run was distilled from")
        if self.teacher_digest != state["distillation"]["teacher_sha256"]:
            raise SettingError(
                "teacher", f"{self.teacher_dir}: its weights differ from those of the teacher "
                f"this run was distilled from ({state['distillation']['teacher']}); give that "
                "teacher")

    @classmethod
    def load(cls, path, *, teacher=None, text=None, **overrides):
        config, state = cls.saved(path, **overrides)
        return cls(config, state=state, teacher=teacher, text=text)

    # ---- the student and what it learns from ----------------------------------------------------
    def build_model(self, fresh):
        student = self.family.build(self.config, self.tokenizer)
        if fresh and self.kind.initialise is not None:
            self.kind.initialise(student, self.teacher, self.config.n_layer)
        objective = self.kind.objective(student, self.teacher, self.temperature)
        self.distiller = Distiller(self.teacher, student, objective)
        return student

    def trained_parameters(self):
        """The student's parameters and the objective's (TinyBERT's W_e and W_h)."""
        return self.distiller.parameters()

    def training_loss(self, input_ids, labels):
        """The distillation objective on a masked-LM batch (the teacher reads it too)."""
        return self.distiller({"input_ids": tensor(input_ids, backend=self.backend),
                               "labels": tensor(labels, backend=self.backend)}).loss

    def teacher_loss(self):
        """The teacher's masked-LM loss on the run's validation batches, beside the student's
        (``evaluate``)."""
        with no_grad(), use_backend(self.backend):
            return float(np.mean([self.teacher(
                input_ids=tensor(ids, backend=self.backend),
                labels=tensor(labels, backend=self.backend)).loss.item()
                for ids, labels in self.val_batches]))

    def report_metrics(self):
        return {"distillation": {
            "student": self.student, "teacher": self.teacher_dir,
            "teacher_parameters": self.teacher.num_parameters(),
            "teacher_val_loss": self.teacher_loss(), "temperature": self.temperature}}

    # ---- checkpoints -----------------------------------------------------------------------------
    def state_dict(self):
        objective = self.distiller.objective
        saved = {"student": self.student, "teacher": self.teacher_dir,
                 "teacher_sha256": self.teacher_digest, "temperature": self.temperature}
        if isinstance(objective, Module):
            saved["objective"] = objective.state_dict()
        return {**super().state_dict(), "distillation": saved}

    def _restore(self, state):
        super()._restore(state)
        if isinstance(self.distiller.objective, Module):
            self.distiller.objective.load_state_dict(state["distillation"]["objective"])
