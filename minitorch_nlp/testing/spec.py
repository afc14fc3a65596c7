"""The contract of a checkable equation (:class:`Spec`) and how a candidate is named
(:func:`load_candidate`, :func:`load_file`); the specs themselves live in
:mod:`minitorch_nlp.testing.equation_specs`, one module per model family."""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st

__all__ = ["Spec", "load_candidate", "load_file"]

_loaded_files = itertools.count()


@dataclass(frozen=True)
class Spec:
    """What a candidate implementation of equation ``number`` must look like.

    ``arguments`` lists (name, description) in call order; the names in ``differentiable`` come
    first and are passed positionally, the rest by keyword. ``cases`` is a hypothesis strategy of
    dicts (argument name -> value); ``reference(**case)`` computes the expected output with
    ``autograd.numpy``; ``library`` (``"module:function"``) is the library's own implementation.

    An empty ``differentiable`` makes a values-only spec, for an equation with no float input
    whose gradient means anything (a search over token ids, a table of probabilities of n, a
    quantiser whose derivative is zero almost everywhere): every argument is passed by keyword,
    the candidate may return NumPy arrays, a ``Tensor`` or a tuple of them, and each part is
    compared with the reference's (a tuple of the same length). The spec's ``notes`` say why.
    """

    number: int
    function: str
    arguments: tuple[tuple[str, str], ...]
    returns: str
    differentiable: tuple[str, ...]
    cases: Callable[[], st.SearchStrategy]
    reference: Callable[..., np.ndarray]
    library: str
    notes: str = field(default="")

    @property
    def signature(self) -> str:
        names = [name for name, _ in self.arguments]
        static = [name for name in names if name not in self.differentiable]
        parts = list(self.differentiable) + (["*", *static] if static else [])
        return f"{self.function}({', '.join(parts)})"

    def describe(self) -> str:
        """The contract in words: signature, arguments, result, notes."""
        lines = [f"eq {self.number}: {self.signature}", "", "Arguments:"]
        lines += [f"  {name}: {what}" for name, what in self.arguments]
        lines += ["", f"Returns: {self.returns}"]
        if not self.differentiable:
            lines += ["", "Checked on values only: no argument is differentiated."]
        if self.notes:
            lines += ["", self.notes]
        return "\n".join(lines)

    def library_function(self) -> Callable:
        return load_candidate(self.library)


def load_file(path) -> ModuleType:
    """Import the Python file at ``path`` as a new module, with its folder on ``sys.path`` (as
    when it runs as a script, so that it can import the files beside it)."""
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"check: {str(path)!r} is not a Python file")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"_candidate_{next(_loaded_files)}_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_candidate(text: str, *, search_path: str | None = None) -> Callable:
    """The function named ``"package.module:function"`` or ``"path/to/file.py:function"``
    (``function`` may be dotted). ``search_path`` (the command line passes the working
    directory) is put first on ``sys.path``, as ``python -m`` does, before the module is
    imported."""
    source, sep, attribute = text.rpartition(":")
    if not sep or not source or not attribute:
        raise ValueError(f"check: name the candidate as 'package.module:function' or "
                         f"'path/to/file.py:function', got {text!r}")
    if source.endswith(".py"):
        target = load_file(source)
    else:
        if search_path is not None and search_path not in sys.path:
            sys.path.insert(0, search_path)
        target = importlib.import_module(source)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"check: {source!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"check: {text!r} is a {type(target).__name__}, not a function")
    return target
