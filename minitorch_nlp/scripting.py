"""The plumbing every script in ``examples/`` shares, so that each script holds its lesson and
nothing else: the options every example takes (``--smoke``, ``--out``, ``--seed`` and, where the
example has them, ``--steps``, ``--backend``, ``--text``), reading them from the command line or,
in a notebook, from the first cell's ``SMOKE``; starting a run (its settings, backend, seed and
output folder, where ``settings.json`` records them) and writing its ``metrics.json``; progress
bars that render in a terminal and in Jupyter. The figure styles are in ``minitorch_nlp.plots``.
``fit_classifier`` is the short training loop of the examples that fine-tune a classifier on
arrays.

Every example opens with the cell ``SMOKE = False  # True: tiny settings, seconds``: run as a
script, ``--smoke`` chooses the tiny settings; opened as a notebook (``jupytext --to ipynb``), the
kernel's command line is ignored and that cell chooses them."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
from pathlib import Path

from .autograd.random import manual_seed
from .backends import set_backend

__all__ = ["arguments", "definitions", "example_parser", "fit_classifier", "in_notebook",
           "progress", "start", "write_metrics"]


def example_parser(name, description, *, steps=None, backend=True, text=None):
    """The parser of ``examples/NAME.py``: ``--smoke`` (tiny, seconds, what the tests run),
    ``--out`` (default ``runs/NAME``), ``--seed``; ``--steps`` when ``steps`` gives its help
    ("training steps (1500; smoke: 10)"), ``--backend`` (numpy default) unless ``backend`` is
    False, and ``--text`` when ``text`` gives its help. The example adds its own options."""
    parser = argparse.ArgumentParser(description=description)
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


def in_notebook():
    """True inside a Jupyter kernel (a notebook, or nbclient executing one), False in a script
    or a terminal IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in shell.config


def arguments(parser, smoke=False):
    """The options of ``parser``: from the command line in a script; in a notebook, whose kernel
    has its own command line (``ipykernel_launcher.py -f FILE``), the defaults. ``smoke`` (the
    notebook's first cell, ``SMOKE = True``) chooses the tiny settings as ``--smoke`` does."""
    args = parser.parse_args([] if in_notebook() else None)
    args.smoke = args.smoke or smoke
    return args


def progress(iterable=None, **options):
    """A tqdm progress bar over ``iterable`` (``options`` as tqdm's: ``desc``, ``total`` ...):
    a widget in a notebook where ipywidgets is installed, otherwise a text bar (in a terminal and
    in a notebook without ipywidgets, where tqdm's widget would only print a warning)."""
    if in_notebook() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(iterable, **options)


def definitions(path):
    """The imports, functions, classes and UPPER_CASE constants of the example at ``path``, as a
    namespace, without running the rest of its cells (its data, training and figures): for
    reusing or testing a lesson's helpers."""
    path = Path(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def kept(node):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
            return True
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names = [n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        return bool(names) and all(n.id.isupper() for n in names)

    tree.body = [node for node in tree.body if kept(node)]
    namespace = {"__name__": path.stem, "__file__": str(path)}
    exec(compile(tree, str(path), "exec"), namespace)
    return argparse.Namespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})


def start(args, settings=None):
    """Begin the run that ``args`` asks for: ``settings["smoke"]`` or ``settings["full"]`` (None
    without ``settings``), the backend (when the example takes ``--backend``), the seed, and the
    ``--out`` folder, created, where ``settings.json`` records the options and the chosen
    settings (``docs/make_results.py`` copies them into the results). Returns (the chosen
    settings, the output folder as a ``Path``)."""
    if getattr(args, "backend", None) is not None:
        set_backend(args.backend)
    manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = None if settings is None else settings["smoke" if args.smoke else "full"]
    record = dict(options=vars(args), settings=chosen)
    (out / "settings.json").write_text(json.dumps(record, indent=2, default=str),
                                       encoding="utf-8")
    return chosen, out


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
