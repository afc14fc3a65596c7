"""The plumbing every script in ``examples/`` shares, so that each script holds its lesson and
nothing else: the options every example takes (``--smoke``, ``--out``, ``--seed`` and, where the
example has them, ``--steps``, ``--backend``, ``--text``), starting a run (its settings, backend,
seed and output folder) and writing its ``metrics.json``. The figure styles are in
``minitorch_nlp.plots``. ``fit_classifier`` is the short training loop of the examples that
fine-tune a classifier on arrays."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .autograd.random import manual_seed
from .backends import set_backend

__all__ = ["example_parser", "fit_classifier", "start", "write_metrics"]


def example_parser(name, description, *, steps=None, backend=True, text=None):
    """The parser of ``examples/NAME.py``: ``--smoke`` (tiny, seconds, what the tests run),
    ``--out`` (default ``runs/NAME``), ``--seed``; ``--steps`` when ``steps`` gives its help
    ("training steps (1500; smoke: 10)"), ``--backend`` (numpy default) unless ``backend`` is
    False, and ``--text`` when ``text`` gives its help. The example adds its own options."""
    parser = _ExampleParser(description=description)
    parser.add_argument("--smoke", action="store_true", help="tiny, runs in seconds")
    parser.add_argument("--out", default=f"runs/{name}", help=f"output folder (runs/{name})")
    parser.add_argument("--seed", type=int, default=0, help="seed for data and weights (0)")
    if steps is not None:
        parser.add_argument("--steps", type=int, help=steps)
    if backend:
        parser.add_argument("--backend", default="numpy", help="numpy, numba or cupy (numpy)")
    if text is not None:
        parser.add_argument("--text", help=text)
    return parser


class _ExampleParser(argparse.ArgumentParser):
    """Ignores the Jupyter kernel's own command line (``ipykernel_launcher.py -f FILE ...``), so
    that an example opened as a notebook (``jupytext --to ipynb``) runs top to bottom with its
    defaults; a first cell that sets ``sys.argv`` (``["x.py", "--smoke"]``) still chooses them."""

    def parse_args(self, args=None, namespace=None):
        if args is None and sys.argv and sys.argv[0].endswith("ipykernel_launcher.py"):
            args = []
        return super().parse_args(args, namespace)


def start(args, settings=None):
    """Begin the run that ``args`` asks for: ``settings["smoke"]`` or ``settings["full"]`` (None
    without ``settings``), the backend (when the example takes ``--backend``), the seed, and the
    ``--out`` folder, created. Returns (the chosen settings, the output folder as a ``Path``)."""
    if getattr(args, "backend", None) is not None:
        set_backend(args.backend)
    manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return None if settings is None else settings["smoke" if args.smoke else "full"], out


def write_metrics(out, metrics):
    """``metrics`` as ``out/metrics.json`` (indented, for reading); returns ``metrics``."""
    (Path(out) / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    return metrics


def fit_classifier(model, inputs, labels, steps, *, batch, lr, rng, extra_loss=None,
                   param_groups=None):
    """``steps`` AdamW steps on ``model(inputs[rows], labels=labels[rows]).loss`` (plus
    ``extra_loss()`` when given: a penalty) over shuffled mini-batches of ``batch`` rows drawn by
    ``rng`` (a NumPy generator), the model in training mode. ``param_groups`` (AdamW's groups,
    e.g. a faster learning rate for some parameters) replaces all of the model's parameters at
    ``lr``. Returns the loss of every step."""
    from . import optim

    optimizer = optim.AdamW(model.parameters() if param_groups is None else param_groups, lr=lr)
    model.train()
    losses = []
    while len(losses) < steps:
        order = rng.permutation(len(inputs))
        for start in range(0, len(inputs) - batch + 1, batch):
            rows = order[start:start + batch]
            loss = model(inputs[rows], labels=labels[rows]).loss
            if extra_loss is not None:
                loss = loss + extra_loss()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses
