"""The ``minitorch-nlp`` command.

``minitorch-nlp equations``  the paper's equations, the code that implements each and its tests
``minitorch-nlp example``    a worked example of the engine: an MLP learns the two-spirals task
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

import numpy as np

import minitorch_nlp as mt
from minitorch_nlp import cookbook, nn, optim
from minitorch_nlp import functional as F
from minitorch_nlp.backends import backend, get_backend


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
