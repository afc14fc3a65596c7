"""The ``distill`` command of ``minitorch-nlp`` (registered by ``cli.entry``): parsing and usage
errors; the run is :class:`minitorch_nlp.compress.distillation_run.DistillationRun`, trained and
reported by the same code as ``minitorch-nlp train``."""
from __future__ import annotations

import argparse
import contextlib
import json
import os

from .. import training
from ..backends.threads import set_num_threads
from ..checks import SettingError
from ..cli.common import (UsageError, add_resumable_run_options, add_run_options,
                          backend_named, check_run_options, option, owned_folder,
                          refuse_overwrite, run_folder, run_training, setting_usage_error)
from .distillation_run import STUDENTS, DistillationRun, student_config

# the TrainConfig fields `distill` takes as options (the teacher's, unless given)
_INTS = ("n_layer", "n_embd", "batch_size", "steps", "warmup_steps", "eval_every", "seed")
_FLOATS = ("lr", "weight_decay")


def add_distill_commands(commands) -> None:
    """Add ``distill`` to the ``minitorch-nlp`` sub-command parser ``commands``."""
    distill = commands.add_parser(
        "distill",
        help="train a DistilBERT, TinyBERT or MobileBERT student from a trained BERT run",
        description="Distil the model of a `minitorch-nlp train bert` run (--teacher) into a "
        "smaller student on the teacher's text and tokenizer: distilbert (half the layers, "
        "initialised from every other teacher layer, DistilBERT's triple loss), tinybert (half "
        "the layers and width, TinyBERT's layer-wise loss, eq 40-44) or mobilebert (a "
        "bottlenecked MobileBERT as deep and wide as the teacher, feature-map and attention "
        "transfer with the pre-training distillation loss, eq 46-48). Writes a run of the "
        "student's family to --out (checkpoint.npz, loss.png, metrics.json with the teacher's "
        "validation loss beside the student's) that `generate` loads; saves every few minutes "
        "and on Ctrl-C; --resume DIR continues it exactly.")
    distill.add_argument("--teacher", metavar="RUN_DIR",
                         help="the teacher: a run directory of `train bert` (on --resume: the "
                         "checkpoint's; give it if the teacher moved)")
    distill.add_argument("--student", choices=list(STUDENTS),
                         help="the student's architecture (on --resume: the checkpoint's)")
    for name in _INTS:
        distill.add_argument(option(name), type=int,
                             help="(the student's default)" if name in ("n_layer", "n_embd")
                             else "(the teacher run's)")
    for name in _FLOATS:
        distill.add_argument(option(name), type=float, help="(the teacher run's)")
    distill.add_argument("--temperature", type=float,
                         help="of the soft targets (distilbert 2, tinybert 1; mobilebert: 1, "
                         "fixed)")
    add_resumable_run_options(distill, "distillation")
    add_run_options(distill, None)
    distill.set_defaults(run=_distill)


@contextlib.contextmanager
def _usage_errors():
    """A setting or text problem of the run, as a usage error naming the option."""
    try:
        yield
    except SettingError as error:
        raise setting_usage_error(error) from error
    except training.TextFileError as error:
        raise UsageError(f"--teacher: the teacher's text: {error}") from error


def _distill(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_run_options(args)
    set_num_threads(args.threads)
    if args.backend is not None:
        backend_named(args.backend)
    if args.temperature is not None and not args.temperature > 0:
        raise UsageError(f"--temperature must be a number > 0, got {args.temperature}")
    settings = {name: getattr(args, name) for name in (*_INTS, *_FLOATS)}
    if args.resume is None and (args.teacher is None or args.student is None):
        raise UsageError("give --teacher RUN_DIR and --student (distilbert, tinybert or "
                         "mobilebert), or --resume PATH to continue a distillation")
    out = run_folder(args, f"runs/{args.student}")
    folder_option = "--resume" if args.resume and not args.out else "--out"
    with owned_folder(out, "distill", option_name=folder_option):
        with _usage_errors():
            if args.resume:
                run = _resume(args, settings, DistillationRun)
            else:
                refuse_overwrite(out, args.overwrite)
                config = student_config(args.teacher, args.student, backend=args.backend,
                                        **settings)
                run = DistillationRun(config, teacher=args.teacher, student=args.student,
                                      temperature=args.temperature)
        if args.stop_at is not None and not run.step < args.stop_at <= run.config.steps:
            raise UsageError(f"--stop-at {args.stop_at} must lie after the run's current step "
                             f"{run.step} and at most at its end, step {run.config.steps} "
                             "(--steps)")
        print(f"distilling {run.teacher_dir} ({run.teacher.num_parameters():,} parameters) "
              f"into a {run.student} student")
        status = run_training(run, out, args.stop_at, args)
    if status == 0:
        with open(os.path.join(out, "metrics.json"), encoding="utf-8") as file:
            teacher_loss = json.load(file)["distillation"]["teacher_val_loss"]
        print(f"the teacher's validation loss on the same batches: {teacher_loss:.4f}")
    return status


def _resume(args, settings, run_class):
    """The distillation that ``--resume`` names; the options that would change what it was
    trained with are refused, naming each."""
    if args.overwrite:
        raise UsageError("--overwrite starts afresh and --resume continues: give one of them")
    fixed = [option(name) for name, value in settings.items()
             if value is not None and name not in run_class.RESUMABLE]
    fixed += [option for option, value in (("--student", args.student),
                                           ("--temperature", args.temperature)) if value]
    if fixed:
        raise UsageError(f"--resume {args.resume}: {', '.join(fixed)} cannot change on resume; "
                         "leave them out, or start a new distillation in another --out")
    overrides = {name: value for name, value in (("steps", args.steps),
                                                ("eval_every", args.eval_every),
                                                ("backend", args.backend)) if value is not None}
    path = training.checkpoint_file(args.resume)
    try:
        run = run_class.load(path, teacher=args.teacher, **overrides)
    except SettingError:
        raise                  # names its option: _usage_errors tells it
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(f"--resume {args.resume}: {error}") from error
    if run.step >= run.config.steps:
        raise UsageError(f"--resume {args.resume}: the run finished at step {run.step}; give "
                         f"--steps N (more than {run.step}) to train it further")
    return run
