"""The contract of a checkable equation (:class:`Spec`) and how a candidate is named
(:func:`load_candidate`); the specs themselves live in :mod:`minitorch_nlp.testing.equation_specs`,
one module per model family."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from hypothesis import strategies as st

__all__ = ["Spec", "load_candidate"]


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


def load_candidate(text: str) -> Callable:
    """The function named ``"package.module:function"`` (``function`` may be dotted)."""
    module_name, sep, attribute = text.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"check: name the candidate as 'package.module:function', got {text!r}")
    target = importlib.import_module(module_name)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"check: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"check: {text!r} is a {type(target).__name__}, not a function")
    return target
