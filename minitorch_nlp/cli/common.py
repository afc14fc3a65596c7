"""What the ``minitorch-nlp`` commands share: the error style (one line naming the option, exit
status 2), the checks of options, and running a training command (``train``, ``demo``,
``distill``). The packages' sub-command modules import these names; this module imports none of
them (``cli.entry`` assembles the commands)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np

from .. import training
from ..backends import get_backend
from ..checks import SettingError
from ..distributed import fail_together
from ..io.run_lock import FolderInUse, hold_folder

__all__ = ["PROG", "Parser", "UsageError", "add_resumable_run_options", "add_run_options",
           "at_least", "backend_named", "check_run_options", "describe_run", "option",
           "owned_folder", "print_error", "refuse_overwrite", "run_folder", "run_training",
           "setting_usage_error"]

PROG = "minitorch-nlp"


class UsageError(Exception):
    """A command line that cannot work as given: the message names the option to change."""


class Parser(argparse.ArgumentParser):
    """argparse with the command's one error style: ``minitorch-nlp: error: ...`` on one line,
    exit status 2."""

    def error(self, message):
        print_error(message)
        raise SystemExit(2)


def print_error(message):
    print(f"{PROG}: error: " + " ".join(str(message).split()), file=sys.stderr)


def option(setting: str) -> str:
    """The option of a setting: ``n_layer`` -> ``--n-layer``."""
    return "--" + setting.replace("_", "-")


def at_least(low, **values) -> None:
    """Each given value (None: not given) is at least ``low``; else a usage error naming it."""
    for setting, value in values.items():
        if value is not None and value < low:
            raise UsageError(f"{option(setting)} must be at least {low}, got {value}")


def backend_named(name):
    """The backend ``--backend NAME`` names; a usage error saying why it cannot run otherwise."""
    try:
        return get_backend(name)
    except (ValueError, RuntimeError, ImportError) as error:
        raise UsageError(f"--backend {name}: {error}") from error


def setting_usage_error(error: SettingError) -> UsageError:
    """A run setting that cannot work, told as a usage error naming its option."""
    return UsageError(error.about(option(error.setting)))


def add_resumable_run_options(command, what="run") -> None:
    """``--resume``, ``--overwrite`` and ``--stop-at``: the options of a command whose run can
    stop and continue (``train``, ``distill``); ``what`` names the run in the help."""
    command.add_argument("--resume", metavar="PATH",
                         help=f"continue the {what} saved in PATH (its folder or "
                         "checkpoint.npz); --steps N moves its end to step N")
    command.add_argument("--overwrite", action="store_true",
                         help="start afresh in an --out folder that holds a run, replacing it")
    command.add_argument("--stop-at", type=int, metavar="STEP",
                         help="stop (and save) after this step; --resume continues")


def add_run_options(command, out) -> None:
    """The options every training command takes."""
    command.add_argument("--backend", help=f"array backend ({training.TrainConfig.backend}; "
                         "on --resume: the checkpoint's)")
    command.add_argument("--out", default=out,
                         help="output directory (%(default)s)" if out else "output directory "
                         "(runs/MODEL; on --resume: the checkpoint's directory)")
    command.add_argument("--threads", type=int, default=1,
                         help="threads for BLAS and Numba (%(default)s: small matrices run "
                         "fastest on one, and on a busy machine more threads spin against each "
                         "other)")
    command.add_argument("--checkpoint-every", type=int, metavar="N",
                         help="also save the run every N steps")
    command.add_argument("--checkpoint-minutes", type=float, default=5.0, metavar="M",
                         help="save the run whenever M minutes of training have passed since "
                         "the last save (%(default)s; 0: only at the end and on Ctrl-C)")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")


def check_run_options(args) -> None:
    at_least(1, stop_at=getattr(args, "stop_at", None), checkpoint_every=args.checkpoint_every,
              threads=args.threads)
    cores = os.cpu_count() or 1
    if args.threads > cores:
        raise UsageError(f"--threads {args.threads} is more than the {cores} cores of this "
                         f"machine; give at most {cores} (more threads than cores only wait on "
                         "each other)")
    if not args.checkpoint_minutes >= 0:
        raise UsageError(f"--checkpoint-minutes must be >= 0 (0: no timed saves), got "
                         f"{args.checkpoint_minutes}")


@contextlib.contextmanager
def owned_folder(folder, command, *, option_name="--out", writes=True):
    """Hold ``folder`` for this process while the ``with`` block writes it (``io.run_lock``):
    another live process writing it is a usage error naming ``option_name``. With ``writes``
    False (a rank other than 0 of a parallel run) nothing is held."""
    if not writes:
        yield
        return
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"{option_name} {folder} is a file; give a folder (it is created if "
                         "need be)")
    try:
        with hold_folder(folder, f"{PROG} {command}"):
            yield
    except FolderInUse as error:
        raise UsageError(f"{option_name} {error}") from error


def run_folder(args, default) -> str:
    """The folder a training command writes: ``--out``, else the resumed run's folder, else
    ``default``."""
    if args.out:
        return args.out
    if getattr(args, "resume", None):
        return os.path.dirname(os.path.abspath(training.checkpoint_file(args.resume)))
    return default


def describe_run(folder) -> str:
    """What the run in ``folder`` is, read from its ``metrics.json`` when there is one: "a gpt
    run (step 800 of 800)"."""
    try:
        with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as file:
            metrics = json.load(file)
        config = metrics.get("config", {})
        return (f"a {config.get('model', '?')} run (step {metrics.get('step', '?')} of "
                f"{config.get('steps', '?')})")
    except (OSError, ValueError, AttributeError):
        return "a run"


def refuse_overwrite(out, overwrite, *, resumable=True, marker=training.CHECKPOINT_NAME,
                     what=None):
    """A usage error when the folder ``out`` holds a run (its file ``marker``) and
    ``--overwrite`` was not given; it says what is there (``what``, default read from the run)
    and, for a ``resumable`` run, how to continue it."""
    path = os.path.join(out, marker)
    if os.path.exists(path) and not overwrite:
        keep = f"continue it with --resume {out}, or " if resumable else ""
        raise UsageError(f"--out {out} already holds {what or describe_run(out)} ({path}); "
                         f"{keep}start afresh there with --overwrite (what is there is then "
                         "lost), or choose another --out")


def run_training(run, out, stop_at, args) -> int:
    """Train ``run``; with several ranks every rank runs this, rank 0 prints, shows the progress
    bar and writes the files, and an error on any rank ends them all with its message."""
    config, writes = run.config, run.parallel.writes
    with fail_together(run.parallel.comm):
        if writes:
            print(f"{config.model}: {run.parallel.num_parameters(run.model):,} parameters, "
                  f"{config.tokenizer} tokenizer ({len(run.tokenizer)} tokens), "
                  f"{len(run.train_ids):,} training tokens, backend {config.backend}, steps "
                  f"{run.step} -> {stop_at or config.steps}"
                  + (f", {run.parallel.describe()}" if run.parallel.is_parallel else ""))
        checkpoint = os.path.join(out, training.CHECKPOINT_NAME)
        start = time.perf_counter()
        try:
            with np.errstate(over="ignore", invalid="ignore"):   # divergence is told below
                val_loss = run.train(stop_at, progress=writes and not args.no_progress,
                                     checkpoint_path=checkpoint,
                                     checkpoint_every=args.checkpoint_every,
                                     checkpoint_seconds=60 * args.checkpoint_minutes or None)
        except training.RunDiverged as error:
            raise UsageError(str(error)) from error
        seconds = time.perf_counter() - start
        model = run.dense_model()
    if not writes:
        return 130 if run.interrupted else 0
    if run.interrupted:
        print(f"\ninterrupted: saved step {run.step} in {checkpoint}\n"
              f"resume with: {PROG} {run.COMMAND} --resume {out}", file=sys.stderr)
        return 130
    report = training.write_report(run, out, seconds, model=model)
    print(f"step {run.step}: validation loss {val_loss:.4f} ({seconds:.1f} s); wrote {out}/: "
          + ", ".join(report["files"]))
    for sample in report.get("samples", []):
        print("-" * 72)
        print(sample)
    return 0
