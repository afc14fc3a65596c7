"""The ``example`` command: a worked example of the engine, a small MLP (``nn.Linear``,
``functional.relu``, ``functional.cross_entropy``, ``optim.Adam``) that learns to tell two
interleaved spirals apart."""
from __future__ import annotations

import argparse
import time

import numpy as np

from .. import nn, optim
from .. import functional as F
from ..autograd import manual_seed, no_grad, tensor
from ..backends import backend
from .common import at_least, backend_named

__all__ = ["SpiralClassifier", "add_example_command", "two_spirals"]


def add_example_command(commands) -> None:
    """Add ``example`` to the sub-command parser ``commands``."""
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
    with no_grad():
        logits = model(tensor(points))
    return float((logits.numpy().argmax(axis=1) == labels).mean())


def _example(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    at_least(1, steps=args.steps, log_every=args.log_every)
    with backend(backend_named(args.backend)):
        return _fit(args.steps, args.seed, args.lr, args.log_every or max(1, args.steps // 10))


def _fit(steps: int, seed: int, lr: float, log_every: int) -> int:
    rng = np.random.default_rng(seed)
    train_points, train_labels = two_spirals(512, rng)
    test_points, test_labels = two_spirals(512, rng)
    manual_seed(seed)
    model = SpiralClassifier()
    optimizer = optim.Adam(model.parameters(), lr=lr)
    inputs, targets = tensor(train_points), tensor(train_labels)
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
