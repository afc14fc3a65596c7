"""The specs of the checkable equations (:class:`~minitorch_nlp.testing.spec.Spec`), one module
per model family, named after the library's module (``seq2seq``, ``transformer``, ``gpt`` ...).

A module lists its specs in a tuple ``SPECS``; :func:`collect` imports every module of this
package, so adding a family's specs means adding its module here and nothing else.
"""
from __future__ import annotations

import importlib
import pkgutil

__all__ = ["collect"]


def collect() -> dict:
    """Every module's ``SPECS``, by equation number (an equation specified twice is an error)."""
    found = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for spec in module.SPECS:
            if spec.number in found:
                raise ValueError(f"equation {spec.number} has two specs: in {module.__name__} "
                                 f"and another module of {__name__}")
            found[spec.number] = spec
    return dict(sorted(found.items()))
