"""The ``minitorch-nlp`` command.

``minitorch-nlp demo``       the main job: train a small GPT on the built-in corpus, then sample
``minitorch-nlp train``      train a registered model family (gpt, bert, t5, xl ...) on your own
                             text (``--resume`` continues a run; ``--parallel`` under ``mpirun``)
``minitorch-nlp generate``   continue a prompt with a trained model (or fill [MASK]s with a BERT)
``minitorch-nlp equations``  the paper's equations, the code that implements each and its tests
``minitorch-nlp example``    a worked example of the engine: an MLP learns the two-spirals task
``minitorch-nlp check``      property-test your own implementation of an equation
``minitorch-nlp course``     write a student workspace of stubs, or grade one
``minitorch-nlp compress``   a smaller model of a trained run: layers dropped, heads pruned, int8
``minitorch-nlp distill``    train a DistilBERT, TinyBERT or MobileBERT student from a BERT run
``minitorch-nlp index``      build a passage index from a text file, or search one
``minitorch-nlp ask``        answer a question from an index's best passages
``minitorch-nlp plan``       memory and communication per device of a parallel layout"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np

import minitorch_nlp as mt
from minitorch_nlp import cookbook, nn, optim, training
from minitorch_nlp import functional as F
from minitorch_nlp.backends import backend, get_backend
from minitorch_nlp.compress.commands import add_compress_commands
from minitorch_nlp.compress.distill_commands import add_distill_commands
from minitorch_nlp.distributed import fail_together
from minitorch_nlp.distributed.commands import (add_parallel_options, add_plan_commands,
                                                parallel_training)
from minitorch_nlp.models import registry
from minitorch_nlp.retrieval.commands import add_retrieval_commands
from minitorch_nlp.testing.commands import add_testing_commands


PROG = "minitorch-nlp"


class UsageError(Exception):
    """A command line that cannot work as given: the message names the option to change."""


class _Parser(argparse.ArgumentParser):
    """argparse with the command's one error style: ``minitorch-nlp: error: ...`` on one line,
    exit status 2."""

    def error(self, message):
        _print_error(message)
        raise SystemExit(2)


def _print_error(message):
    print(f"{PROG}: error: " + " ".join(str(message).split()), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status: 0
    done, 1 failed, 2 a usage error, 130 stopped by Ctrl-C. Errors are one line on stderr,
    ``minitorch-nlp: error: ...``; ``--debug`` shows the traceback instead."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:   # --help (0) or a usage error already printed (2)
        return exit.code
    debug = getattr(args, "debug", False)   # --debug before or after the command
    try:
        return args.run(args, parser)
    except UsageError as error:
        if debug:
            raise
        _print_error(error)
        return 2
    except (ValueError, TypeError, OSError, RuntimeError, ImportError) as error:
        if debug:
            raise
        _print_error(error)
        return 1
    except KeyboardInterrupt:   # Ctrl-C outside a training loop (which saves and returns 130)
        if debug:
            raise
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error")
    parser = _Parser(
        prog=PROG, parents=[common],
        description="minitorch_nlp: a NumPy-first deep-learning framework for teaching, "
        "with the equations of The NLP Cookbook implemented and property-tested.",
    )
    commands = parser.add_subparsers(title="commands", dest="command", required=True,
                                     parser_class=lambda **kw: _Parser(parents=[common], **kw))
    _add_equations_command(commands)
    _add_example_command(commands)
    _add_demo_command(commands)
    _add_train_command(commands)
    _add_generate_command(commands)
    add_testing_commands(commands)
    add_compress_commands(commands)
    add_distill_commands(commands)
    add_retrieval_commands(commands)
    add_plan_commands(commands)
    return parser


def _add_equations_command(commands) -> None:
    equations = commands.add_parser(
        "equations",
        help="list the paper's equations with the code and tests for each",
        description="For each of the paper's 111 numbered equations: its section, the code "
        "registered with @cookbook.equation(n) and, in a source checkout, the tests marked "
        "@pytest.mark.eq(n).",
    )
    equations.add_argument("--json", action="store_true", help="print JSON for machines")
    equations.add_argument(
        "--section",
        metavar="TEXT",
        help="only the sections whose heading contains TEXT (case-insensitive); "
        "a chapter as 'sec4', '4' or 'IV' selects that whole chapter",
    )
    equations.set_defaults(run=_equations)


def _add_example_command(commands) -> None:
    example = commands.add_parser(
        "example",
        help="fit a small MLP on the two-spirals task and print the loss going down",
        description="Fit a 2-64-64-2 MLP (nn.Linear, functional.relu, functional.cross_entropy, "
        "optim.Adam) to two interleaved spirals made with NumPy, printing the training loss "
        "and then the accuracy on fresh points from the same spirals.",
    )
    example.add_argument("--steps", type=int, default=300, help="full-batch Adam steps (300)")
    example.add_argument("--seed", type=int, default=0, help="seed for data and weights (0)")
    example.add_argument(
        "--backend",
        metavar="NAME",
        help="array backend, e.g. numpy (default: MINITORCH_NLP_BACKEND or numpy)",
    )
    example.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (0.01)")
    example.add_argument(
        "--log-every", type=int, metavar="N", help="print the loss every N steps (steps/10)"
    )
    example.set_defaults(run=_example)


# ---------------------------------------------------------------------------------------------
# equations


def _select(text: str | None) -> list[cookbook.Equation]:
    """The equations that ``--section TEXT`` selects: a chapter, or a word of the heading."""
    equations = list(cookbook.EQUATIONS.values())
    if text is None:
        return equations
    if re.fullmatch(r"(?i)(?:sec)?\d+", text):
        chapter = int(text.lower().removeprefix("sec"))
        selected = [eq for eq in equations if eq.chapter == chapter]
    elif re.fullmatch(r"(?i)[IVX]+", text):
        chapter = cookbook.Equation(0, text.upper(), "").chapter
        selected = [eq for eq in equations if eq.chapter == chapter]
    else:
        selected = [eq for eq in equations if text.lower() in eq.section.lower()]
    if not selected:
        headings = dict.fromkeys(eq.section for eq in equations)
        raise UsageError(
            f"--section {text}: no equation is in that section; give a chapter that has "
            f"equations (sec3..sec9, 3..9 or III..IX) or a word from one of the headings: "
            + "; ".join(headings)
        )
    return selected


def _equations(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    selected = _select(args.section)
    skipped = cookbook.import_all()
    if skipped:
        print(
            "not imported (an optional dependency is missing): " + ", ".join(skipped),
            file=sys.stderr,
        )
    rows = equation_rows(selected)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        _print_table(rows)
    return 0


def equation_rows(equations: list[cookbook.Equation]) -> list[dict]:
    """The table's rows: each equation with the code registered for it and its tests (found in
    a source checkout). Call ``cookbook.import_all()`` first to see every registration."""
    tests = cookbook.tests_by_equation()
    return [
        {
            "number": eq.number,
            "section": eq.section,
            "description": eq.description,
            "implementations": cookbook.implementations(eq.number),
            "tests": tests.get(eq.number, []),
        }
        for eq in equations
    ]


def _print_table(rows: list[dict]) -> None:
    """One block per section heading; a cell with several entries continues on the next lines."""
    header = ("eq", "what", "implemented by", "tests")
    cells = [
        (
            str(row["number"]),
            row["description"],
            row["implementations"] or ["-"],
            row["tests"] or ["-"],
        )
        for row in rows
    ]
    widths = [
        max([len(header[0])] + [len(c[0]) for c in cells]),
        max([len(header[1])] + [len(c[1]) for c in cells]),
        max([len(header[2])] + [len(name) for c in cells for name in c[2]]),
    ]

    def line(eq: str, what: str, implementation: str, test: str) -> str:
        return "  ".join(
            [eq.rjust(widths[0]), what.ljust(widths[1]), implementation.ljust(widths[2]), test]
        ).rstrip()

    print(line(*header))
    section = None
    for row, (eq, what, implementations, tests) in zip(rows, cells):
        if row["section"] != section:
            section = row["section"]
            print(section)
        for i in range(max(len(implementations), len(tests))):
            print(
                line(
                    eq if i == 0 else "",
                    what if i == 0 else "",
                    implementations[i] if i < len(implementations) else "",
                    tests[i] if i < len(tests) else "",
                )
            )
    print(coverage_line(rows))


def coverage_line(rows: list[dict]) -> str:
    """How many of ``rows`` (the table's) have code registered and tests: the README quotes it
    for all the equations, and a test checks that it matches."""
    implemented = sum(bool(row["implementations"]) for row in rows)
    tested = sum(bool(row["tests"]) for row in rows)
    return f"{len(rows)} equations: {implemented} with code registered, {tested} with tests"


# ---------------------------------------------------------------------------------------------
# example


def two_spirals(n: int, rng: np.random.Generator, turns: float = 2.0, noise: float = 0.05):
    """``n`` points on two interleaved spirals (float32, inside about [-1, 1]^2) and their labels.

    Class k lies at radius r and angle 2*pi*turns*r + k*pi, plus Gaussian noise: the classes are
    not linearly separable, so the hidden layers must bend the decision boundary around the
    spirals.
    """
    labels = rng.integers(0, 2, n)
    radius = np.sqrt(rng.uniform(0.05, 1.0, n))
    angle = 2 * np.pi * turns * radius + np.pi * labels
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    points += noise * rng.standard_normal(points.shape)
    return points.astype(np.float32), labels.astype(np.int64)


class SpiralClassifier(nn.Module):
    """A 2-hidden-layer MLP: 2 coordinates in, 2 class logits out."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 2)

    def forward(self, x):
        return self.out(F.relu(self.fc2(F.relu(self.fc1(x)))))


def _accuracy(model: nn.Module, points: np.ndarray, labels: np.ndarray) -> float:
    with mt.no_grad():
        logits = model(mt.tensor(points))
    return float((logits.numpy().argmax(axis=1) == labels).mean())


def _example(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _at_least(1, steps=args.steps, log_every=args.log_every)
    with backend(_backend(args.backend)):
        return _fit(args.steps, args.seed, args.lr, args.log_every or max(1, args.steps // 10))


def _fit(steps: int, seed: int, lr: float, log_every: int) -> int:
    rng = np.random.default_rng(seed)
    train_points, train_labels = two_spirals(512, rng)
    test_points, test_labels = two_spirals(512, rng)
    mt.manual_seed(seed)
    model = SpiralClassifier()
    optimizer = optim.Adam(model.parameters(), lr=lr)
    inputs, targets = mt.tensor(train_points), mt.tensor(train_labels)
    print(
        f"two spirals: {len(train_points)} training points, MLP 2-64-64-2 "
        f"({sum(p.size for p in model.parameters())} parameters), Adam lr={lr}, "
        f"backend {inputs.backend.name}"
    )
    start = time.perf_counter()
    for step in range(1, steps + 1):
        loss = F.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 1 or step % log_every == 0 or step == steps:
            print(f"step {step:5d}  loss {loss.item():.4f}")
    seconds = time.perf_counter() - start
    print(
        f"accuracy: train {_accuracy(model, train_points, train_labels):.1%}, "
        f"fresh points {_accuracy(model, test_points, test_labels):.1%} "
        f"({steps} steps in {seconds:.1f} s)"
    )
    return 0


# ---------------------------------------------------------------------------------------------
# demo, train, generate


# ---------------------------------------------------------------------------------------------
# checks every command shares


def _option(setting: str) -> str:
    return "--" + setting.replace("_", "-")


def _at_least(low, **values) -> None:
    """Each given value (None: not given) is at least ``low``; else a usage error naming it."""
    for setting, value in values.items():
        if value is not None and value < low:
            raise UsageError(f"{_option(setting)} must be at least {low}, got {value}")


def _backend(name):
    """The backend ``--backend NAME`` names; a usage error saying why it cannot run otherwise."""
    try:
        return get_backend(name)
    except (ValueError, RuntimeError, ImportError) as error:
        raise UsageError(f"--backend {name}: {error}") from error


# ---------------------------------------------------------------------------------------------
# demo, train, generate


def _add_run_options(command, out) -> None:
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


def _add_demo_command(commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="train a small GPT on the standard library's docstrings, then generate text",
        description="The main job: a GPT-2-style character model (4 layers, d 128, context 128) "
        "trained on the Python standard library's docstrings (no download), with a progress bar, "
        "validation loss, a loss-curve PNG, a checkpoint and generated samples, all in --out "
        "(each demo starts afresh there). Under 6 minutes on 2 CPU cores. Ctrl-C saves the run; "
        "`minitorch-nlp train --resume DIR` continues it.",
    )
    demo.add_argument("--steps", type=int,
                      help=f"training steps ({training.TrainConfig.steps}; --smoke: 20)")
    demo.add_argument("--seed", type=int, default=0, help="seed (%(default)s)")
    demo.add_argument("--smoke", action="store_true",
                      help="a tiny model for a few steps: checks the pipeline in seconds")
    _add_run_options(demo, "runs/demo")
    demo.set_defaults(run=_demo)


# The TrainConfig fields that `train` takes as options; all but the RESUMABLE ones are fixed by
# a checkpoint, so that `--resume` refuses a different value.
_TRAIN_INTS = ("max_chars", "vocab_size", "n_layer", "n_head", "n_embd", "block_size",
               "batch_size", "steps", "warmup_steps", "eval_every", "seed", "experts")
_TRAIN_FLOATS = ("lr", "dropout", "weight_decay")


def _add_train_command(commands) -> None:
    defaults = training.TrainConfig()
    families = registry.families()
    train = commands.add_parser(
        "train",
        help="train a language model (" + ", ".join(families) + ") on a text file",
        description="Train a language model on a UTF-8 text file (default: the built-in corpus): "
        + "; ".join(f"{name}: {family.summary}" for name, family in families.items())
        + ". Writes checkpoint.npz, loss.png, metrics.json and samples.txt (models that "
        "generate text) to --out, saving the run every few minutes and on Ctrl-C. A folder "
        "that holds a run is not overwritten without --overwrite; --resume DIR continues the "
        "run exactly where it stopped.",
    )
    train.add_argument("model", nargs="?", choices=list(families),
                       help="the model family (on --resume: the checkpoint's)")
    train.add_argument("--text", metavar="FILE", help="UTF-8 text to train on (built-in corpus)")
    train.add_argument("--tokenizer", choices=training.TOKENIZERS,
                       help="char, bpe (byte-level BPE), wordpiece or unigram (SentencePiece's "
                       "Unigram LM); default: " + ", ".join(
                           f"{family.default_tokenizer} for {name}"
                           for name, family in families.items()))
    warmup = f"min({training.DEFAULT_WARMUP_STEPS}, steps / 10)"
    for name in _TRAIN_INTS:
        default = warmup if name == "warmup_steps" else getattr(defaults, name)
        train.add_argument(_option(name), type=int, help=f"({default})")
    for name in _TRAIN_FLOATS:
        train.add_argument(_option(name), type=float, help=f"({getattr(defaults, name)})")
    train.add_argument("--resume", metavar="PATH",
                       help="continue the run saved in PATH (its folder or checkpoint.npz); "
                       "--steps N moves its end to step N")
    train.add_argument("--overwrite", action="store_true",
                       help="start afresh in an --out folder that holds a run, replacing it")
    train.add_argument("--stop-at", type=int, metavar="STEP",
                       help="stop (and save) after this step; --resume continues")
    _add_run_options(train, None)
    add_parallel_options(train)
    train.set_defaults(run=_train)


def _add_generate_command(commands) -> None:
    generate = commands.add_parser(
        "generate",
        help="continue a prompt with a trained model, streaming tokens (or fill masks)",
        description="Load a checkpoint written by `train`/`demo` (a file or its directory), or a "
        "HuggingFace directory (config.json, model.safetensors and the tokenizer's files), and "
        "continue --prompt, printing each token as it is produced; past the model's context the "
        "window slides (the model reads the last half-context of text). A masked LM (bert, "
        "roberta) fills each mask token of the prompt instead.",
    )
    generate.add_argument("checkpoint", help="checkpoint.npz, its run directory, or a "
                          "HuggingFace model directory")
    generate.add_argument("--prompt", default="The ", help="text to continue (%(default)r)")
    generate.add_argument("--max-new-tokens", type=int, default=200, help="(%(default)s)")
    generate.add_argument("--temperature", type=float, default=0.8,
                          help="(%(default)s; 0: greedy, the likeliest token every step)")
    generate.add_argument("--top-k", type=int, default=None, help="keep the k likeliest tokens")
    generate.add_argument("--top-p", type=float, default=None,
                          help="nucleus sampling: keep the likeliest tokens of this total "
                          "probability, in (0, 1]")
    generate.add_argument("--repetition-penalty", type=float, default=1.0,
                          help="(%(default)s; > 1 discourages repeats)")
    generate.add_argument("--greedy", action="store_true", help="always take the likeliest token")
    generate.add_argument("--seed", type=int, default=0, help="sampling seed (%(default)s)")
    generate.add_argument("--backend", default=None, help="array backend (the checkpoint's)")
    generate.set_defaults(run=_generate)


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _at_least(1, steps=args.steps)
    _check_run_options(args)
    backend_name = args.backend or training.TrainConfig.backend
    _backend(backend_name)
    mt.set_num_threads(args.threads)
    config = _config(training.demo_config, steps=args.steps, backend=backend_name,
                     seed=args.seed, smoke=args.smoke)
    return _run_training(_start(config), args.out, None, args)


def _check_run_options(args) -> None:
    _at_least(1, stop_at=getattr(args, "stop_at", None), checkpoint_every=args.checkpoint_every,
              threads=args.threads)
    if not args.checkpoint_minutes >= 0:
        raise UsageError(f"--checkpoint-minutes must be >= 0 (0: no timed saves), got "
                         f"{args.checkpoint_minutes}")


def _config(make, **values):
    """``make(**values)`` (a ``TrainConfig``), its setting errors as usage errors naming the
    option."""
    try:
        return make(**values)
    except training.SettingError as error:
        raise UsageError(error.about(_option(error.setting))) from error


def _start(config, parallel=None, **load):
    """The run of ``config`` (or, with ``load``, the run saved at ``load["path"]``) laid out as
    ``parallel`` says (default: one process), its text and setting errors as usage errors
    naming the option."""
    try:
        if load:
            path = load.pop("path")
            return training.LanguageModelRun.load(path, parallel=parallel, **load)
        return training.LanguageModelRun(config, parallel=parallel)
    except training.TextFileError as error:
        raise UsageError(f"--text: {error}") from error
    except training.SettingError as error:
        raise UsageError(error.about(_option(error.setting))) from error


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_run_options(args)
    mt.set_num_threads(args.threads)
    if args.backend is not None:
        _backend(args.backend)
    parallel = _config(parallel_training, parallel=args.parallel, zero=args.zero)
    if args.resume:
        run, out = _resume(args, parallel)
    else:
        if args.model is None:
            raise UsageError("give the model to train (" + ", ".join(registry.families())
                             + "), or --resume PATH to continue a run")
        out = args.out or f"runs/{args.model}"
        _refuse_overwrite(out, args.overwrite)
        given = {name: getattr(args, name) for name in (*_TRAIN_INTS, *_TRAIN_FLOATS, "text",
                                                        "tokenizer", "backend")}
        config = _config(training.TrainConfig, model=args.model,
                         **{name: value for name, value in given.items() if value is not None})
        run = _start(config, parallel)
    if args.stop_at is not None and not run.step < args.stop_at <= run.config.steps:
        raise UsageError(f"--stop-at {args.stop_at} must lie after the run's current step "
                         f"{run.step} and at most at its end, step {run.config.steps} (--steps)")
    return _run_training(run, out, args.stop_at, args)


def _refuse_overwrite(out, overwrite):
    path = os.path.join(out, training.CHECKPOINT_NAME)
    if os.path.exists(path) and not overwrite:
        raise UsageError(f"--out {out} already holds a run ({path}); continue it with "
                         f"--resume {out}, or start afresh there with --overwrite")


def _resume(args, parallel):
    """The run that ``--resume`` names and the folder to write to; the options that would
    change what it was trained with are refused, naming each."""
    if args.overwrite:
        raise UsageError("--overwrite starts afresh and --resume continues: give one of them")
    path = training.checkpoint_file(args.resume)
    try:
        saved = training.read_checkpoint(path)["config"]
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(f"--resume {args.resume}: {error}") from error
    given = {name: getattr(args, name) for name in (*_TRAIN_INTS, *_TRAIN_FLOATS, "tokenizer")}
    given["text"] = args.text and os.path.abspath(args.text)
    conflicts = [f"{_option(name)} {value} (the run has {saved[name]})"
                 for name, value in given.items()
                 if value is not None and name not in training.LanguageModelRun.RESUMABLE
                 and value != saved[name]]
    if args.model is not None and args.model != saved["model"]:
        conflicts.insert(0, f"{args.model} (the run is a {saved['model']})")
    if conflicts:
        raise UsageError(f"--resume {args.resume}: these options differ from the run's and "
                         "cannot change on resume: " + ", ".join(conflicts)
                         + "; leave them out, or start a new run in another --out")
    overrides = {name: getattr(args, name) for name in training.LanguageModelRun.RESUMABLE
                 if getattr(args, name) is not None}
    run = _start(None, parallel, path=path, **overrides)
    if run.step >= run.config.steps:
        raise UsageError(f"--resume {args.resume}: the run finished at step {run.step}; give "
                         f"--steps N (more than {run.step}) to train it further")
    return run, args.out or os.path.dirname(os.path.abspath(path))


def _run_training(run, out, stop_at, args) -> int:
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
        val_loss = run.train(stop_at, progress=writes and not args.no_progress,
                             checkpoint_path=checkpoint, checkpoint_every=args.checkpoint_every,
                             checkpoint_seconds=60 * args.checkpoint_minutes or None)
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


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _at_least(1, max_new_tokens=args.max_new_tokens, top_k=args.top_k)
    if not args.temperature >= 0:
        raise UsageError(f"--temperature must be >= 0 (0: greedy), got {args.temperature}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must lie in (0, 1], got {args.top_p}")
    if not args.repetition_penalty > 0:
        raise UsageError(f"--repetition-penalty must be > 0, got {args.repetition_penalty}")
    if args.backend is not None:
        _backend(args.backend)
    overrides = {} if args.backend is None else {"backend": args.backend}
    try:
        model, tokenizer, family = training.load_for_inference(args.checkpoint, **overrides)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(f"{args.checkpoint}: {error}" if args.checkpoint not in str(error)
                         else str(error)) from error
    if not family.objective.generates_text:
        print(family.objective.respond(model, tokenizer, args.prompt))
        return 0
    print(args.prompt, end="", flush=True)
    family.objective.respond(model, tokenizer, args.prompt, max_new_tokens=args.max_new_tokens,
                             temperature=0.0 if args.greedy else args.temperature,
                             top_k=args.top_k, top_p=args.top_p,
                             repetition_penalty=args.repetition_penalty, seed=args.seed,
                             on_text=lambda piece: print(piece, end="", flush=True))
    print()
    return 0
