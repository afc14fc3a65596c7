"""The ``minitorch-nlp`` command.

``minitorch-nlp demo``       the main job: train a small GPT on the built-in corpus, then sample
``minitorch-nlp train``      train a GPT or a BERT on your own text (``--resume`` continues a run)
``minitorch-nlp generate``   continue a prompt with a trained GPT (or fill [MASK]s with a BERT)
``minitorch-nlp equations``  the paper's equations, the code that implements each and its tests
``minitorch-nlp example``    a worked example of the engine: an MLP learns the two-spirals task
``minitorch-nlp check``      property-test your own implementation of an equation
``minitorch-nlp course``     write a student workspace of stubs, or grade one
"""

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
from minitorch_nlp.testing.commands import add_testing_commands


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    return args.run(args, parser)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minitorch-nlp",
        description="minitorch_nlp: a NumPy-first deep-learning framework for teaching, "
        "with the equations of The NLP Cookbook implemented and property-tested.",
    )
    commands = parser.add_subparsers(title="commands", dest="command", required=True)

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
    _add_language_model_commands(commands)
    add_testing_commands(commands)
    return parser


# ---------------------------------------------------------------------------------------------
# equations


def _select(text: str | None, parser: argparse.ArgumentParser) -> list[cookbook.Equation]:
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
        parser.error(
            f"no equation is in section {text!r}: give a chapter that has equations "
            f"(sec3..sec9, 3..9 or III..IX) or a word from one of the headings:\n  "
            + "\n  ".join(headings)
        )
    return selected


def _equations(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    selected = _select(args.section, parser)
    skipped = cookbook.import_all()
    if skipped:
        print(
            "not imported (an optional dependency is missing): " + ", ".join(skipped),
            file=sys.stderr,
        )
    tests = cookbook.tests_by_equation()
    rows = [
        {
            "number": eq.number,
            "section": eq.section,
            "description": eq.description,
            "implementations": cookbook.implementations(eq.number),
            "tests": tests.get(eq.number, []),
        }
        for eq in selected
    ]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        _print_table(rows)
    return 0


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
    implemented = sum(bool(row["implementations"]) for row in rows)
    tested = sum(bool(row["tests"]) for row in rows)
    print(f"{len(rows)} equations: {implemented} with code registered, {tested} with tests")


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
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.log_every is not None and args.log_every < 1:
        parser.error(f"--log-every must be at least 1, got {args.log_every}")
    try:
        chosen = get_backend(args.backend)
    except (ValueError, RuntimeError) as error:
        parser.error(str(error))
    with backend(chosen):
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


def _add_run_options(command, out) -> None:
    """The options every training command takes."""
    command.add_argument("--backend", default=training.TrainConfig.backend,
                         help="array backend (%(default)s)")
    command.add_argument("--out", default=out,
                         help="output directory (%(default)s)" if out else "output directory "
                         "(runs/MODEL)")
    command.add_argument("--threads", type=int, default=1,
                         help="threads for BLAS and Numba (%(default)s: small matrices run "
                         "fastest on one, and on a busy machine more threads spin against each "
                         "other)")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_language_model_commands(commands) -> None:
    defaults = training.TrainConfig()
    demo = commands.add_parser(
        "demo",
        help="train a small GPT on the standard library's docstrings, then generate text",
        description="The main job: a GPT-2-style character model (4 layers, d 128, context 128) "
        "trained on the Python standard library's docstrings (no download), with a progress bar, "
        "validation loss, a loss-curve PNG, a checkpoint and generated samples, all in --out. "
        "Under 6 minutes on 2 CPU cores.",
    )
    demo.add_argument("--steps", type=int, help=f"training steps ({defaults.steps}; --smoke: 20)")
    demo.add_argument("--seed", type=int, default=0, help="seed (%(default)s)")
    demo.add_argument("--smoke", action="store_true",
                      help="a tiny model for a few steps: checks the pipeline in seconds")
    _add_run_options(demo, "runs/demo")
    demo.set_defaults(run=_demo)

    train = commands.add_parser(
        "train",
        help="train a GPT (next token) or a BERT (masked LM) on a text file",
        description="Train a language model on a UTF-8 text file (default: the built-in corpus). "
        "Writes checkpoint.npz, loss.png, metrics.json and (GPT) samples.txt to --out; "
        "--resume DIR continues a stopped run exactly where it stopped.",
    )
    train.add_argument("model", choices=training.MODELS, help="gpt or bert")
    train.add_argument("--text", metavar="FILE", help="UTF-8 text to train on (built-in corpus)")
    train.add_argument("--max-chars", type=int, default=defaults.max_chars,
                       help="characters of the built-in corpus to use (%(default)s)")
    train.add_argument("--tokenizer", choices=training.TOKENIZERS,
                       help="char (gpt default), bpe (byte-level BPE) or wordpiece (bert default)")
    train.add_argument("--vocab-size", type=int, default=defaults.vocab_size,
                       help="vocabulary size of a trained bpe / wordpiece (%(default)s)")
    for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "steps",
                 "warmup_steps", "eval_every", "seed"):
        train.add_argument("--" + name.replace("_", "-"), type=int,
                           default=getattr(defaults, name), help="(%(default)s)")
    for name in ("lr", "dropout", "weight_decay"):
        train.add_argument("--" + name.replace("_", "-"), type=float,
                           default=getattr(defaults, name), help="(%(default)s)")
    train.add_argument("--resume", metavar="DIR", help="continue the run saved in DIR")
    train.add_argument("--stop-at", type=int, metavar="STEP",
                       help="stop (and save) after this step; --resume continues")
    train.add_argument("--checkpoint-every", type=int, metavar="N", help="also save every N steps")
    _add_run_options(train, None)
    train.set_defaults(run=_train)

    generate = commands.add_parser(
        "generate",
        help="continue a prompt with a trained GPT checkpoint, streaming tokens",
        description="Load a checkpoint written by `train`/`demo` (a file or its directory), or a "
        "HuggingFace directory (config.json, model.safetensors and the tokenizer's files), and "
        "continue --prompt, printing each token as it is produced. A BERT fills each [MASK] of "
        "the prompt instead.",
    )
    generate.add_argument("checkpoint", help="checkpoint.npz, its run directory, or a "
                          "HuggingFace model directory")
    generate.add_argument("--prompt", default="The ", help="text to continue (%(default)r)")
    generate.add_argument("--max-new-tokens", type=int, default=200, help="(%(default)s)")
    generate.add_argument("--temperature", type=float, default=0.8, help="(%(default)s)")
    generate.add_argument("--top-k", type=int, default=None, help="keep the k likeliest tokens")
    generate.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass")
    generate.add_argument("--repetition-penalty", type=float, default=1.0, help="(%(default)s)")
    generate.add_argument("--greedy", action="store_true", help="always take the likeliest token")
    generate.add_argument("--seed", type=int, default=0, help="sampling seed (%(default)s)")
    generate.add_argument("--backend", default=None, help="array backend (the checkpoint's)")
    generate.set_defaults(run=_generate)


def _check_backend(name, parser):
    try:
        get_backend(name)
    except (ValueError, RuntimeError) as error:
        parser.error(str(error))


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_backend(args.backend, parser)
    mt.set_num_threads(args.threads)
    try:
        config = training.demo_config(steps=args.steps, backend=args.backend, seed=args.seed,
                                      smoke=args.smoke)
    except ValueError as error:
        parser.error(str(error))
    return _run_training(training.LanguageModelRun(config), args.out, None, args.no_progress, None)


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    mt.set_num_threads(args.threads)
    if args.resume:
        overrides = {"backend": args.backend} if args.backend != training.TrainConfig.backend \
            else {}
        run = training.LanguageModelRun.load(args.resume, **overrides)
        out = args.out or args.resume
    else:
        _check_backend(args.backend, parser)
        fields = ("text", "max_chars", "vocab_size", "n_layer", "n_head", "n_embd", "block_size",
                  "batch_size", "steps", "warmup_steps", "eval_every", "seed", "lr", "dropout",
                  "weight_decay", "backend")
        tokenizer = args.tokenizer or ("char" if args.model == "gpt" else "wordpiece")
        try:
            config = training.TrainConfig(model=args.model, tokenizer=tokenizer,
                                          **{name: getattr(args, name) for name in fields})
        except ValueError as error:
            parser.error(str(error))
        run = training.LanguageModelRun(config)
        out = args.out or f"runs/{args.model}"
    return _run_training(run, out, args.stop_at, args.no_progress, args.checkpoint_every)


def _run_training(run, out, stop_at, no_progress, checkpoint_every) -> int:
    config = run.config
    print(f"{config.model}: {run.model.num_parameters():,} parameters, {config.tokenizer} "
          f"tokenizer ({len(run.tokenizer)} tokens), {len(run.train_ids):,} training tokens, "
          f"backend {config.backend}, steps {run.step} -> {stop_at or config.steps}")
    start = time.perf_counter()
    val_loss = run.train(stop_at, progress=not no_progress,
                         checkpoint_path=os.path.join(out, training.CHECKPOINT_NAME),
                         checkpoint_every=checkpoint_every)
    seconds = time.perf_counter() - start
    report = training.write_report(run, out, seconds)
    print(f"step {run.step}: validation loss {val_loss:.4f} ({seconds:.1f} s); wrote {out}/: "
          + ", ".join(report["files"]))
    for sample in report.get("samples", []):
        print("-" * 72)
        print(sample)
    return 0


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    overrides = {} if args.backend is None else {"backend": args.backend}
    try:
        model, tokenizer, kind = training.load_for_inference(args.checkpoint, **overrides)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    if kind == "bert":
        print(training.fill_masks(model, tokenizer, args.prompt))
        return 0
    print(args.prompt, end="", flush=True)
    training.generate_text(model, tokenizer, args.prompt, max_new_tokens=args.max_new_tokens,
                           temperature=0.0 if args.greedy else args.temperature,
                           top_k=args.top_k, top_p=args.top_p,
                           repetition_penalty=args.repetition_penalty, seed=args.seed,
                           on_text=lambda piece: print(piece, end="", flush=True))
    print()
    return 0
