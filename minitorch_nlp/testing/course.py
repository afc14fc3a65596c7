"""Course mode: a student workspace of stubs, graded by :func:`check_equation`.

``new_workspace(directory, ["sec3", "sec4"])`` writes one file per chapter (``sec3.py`` ...) with
a stub for every checkable equation of that chapter: the library function's signature, its
docstring, the contract of the check, and a body that raises :class:`TaskNotDone` ("implement eq
N"). ``grade(directory)`` imports the student's files and runs ``check_equation`` on each
function. The stubs exist only in the student's folder; the library never contains one.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from minitorch_nlp import cookbook

from .check import EquationMismatch, TaskNotDone, check_equation, specs

__all__ = ["Grade", "format_grades", "grade", "new_workspace", "parse_sections"]

MANIFEST = "course.json"

_HEADER = '''"""Chapter {chapter} of The NLP Cookbook: {title}.

Replace each stub's body with your implementation, written with minitorch_nlp tensors (the
arguments listed first arrive as float64 Tensors that require gradients). Then grade:

    minitorch-nlp course grade {directory}
"""
import numpy as np

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp.testing import TaskNotDone
'''

_STUB = '''

def {function}{signature}:
    r"""{doc}
    """
    raise TaskNotDone("implement {task}")
'''


def parse_sections(text: str) -> list[int]:
    """``"sec3,sec4"`` (or ``"3,4"``) -> [3, 4], each a chapter that has checkable equations."""
    available = sorted({cookbook.EQUATIONS[n].chapter for n in specs})
    chapters = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"(?:sec)?(\d+)", item.lower())
        if not match or int(match.group(1)) not in available:
            raise ValueError(f"course: unknown section {item!r}; sections with checkable "
                             f"equations: {', '.join(f'sec{c}' for c in available)}")
        chapters.append(int(match.group(1)))
    if not chapters:
        raise ValueError("course: name at least one section, e.g. --sections sec3,sec4")
    return sorted(set(chapters))


def _stub(numbered_specs) -> str:
    """One stub for the specs that check the same library function (eq 64 and 65 both check
    ``cls_projection``): its docstring carries every one of their contracts."""
    first = numbered_specs[0]
    library = first.library_function()
    doc = inspect.cleandoc(library.__doc__ or "")
    for spec in numbered_specs:
        doc += f"\n\nThe check (minitorch-nlp check {spec.number} MODULE:{spec.function}):\n\n" \
               f"{spec.describe()}"
    task = " and ".join(f"eq {spec.number} ({cookbook.EQUATIONS[spec.number].description})"
                        for spec in numbered_specs)
    return _STUB.format(function=first.function, signature=inspect.signature(library),
                        doc=textwrap.indent(doc, "    ").lstrip(), task=task)


def new_workspace(directory, sections) -> list[dict]:
    """Write the workspace for ``sections`` (chapters as ints or ``"sec3,sec4"``) into the new
    or empty ``directory``; returns its tasks (equation, file, function)."""
    directory = Path(directory)
    chapters = parse_sections(sections) if isinstance(sections, str) else sorted(set(sections))
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"course new: {directory} is not empty; pick a new folder")
    directory.mkdir(parents=True, exist_ok=True)
    tasks = []
    for chapter in chapters:
        numbers = sorted(n for n in specs if cookbook.EQUATIONS[n].chapter == chapter)
        file = f"sec{chapter}.py"
        source = _HEADER.format(chapter=chapter, title=cookbook.CHAPTERS[chapter],
                                directory=directory)
        by_function = {}
        for n in numbers:
            by_function.setdefault(specs[n].function, []).append(specs[n])
        source += "".join(_stub(shared) for shared in by_function.values())
        (directory / file).write_text(source)
        tasks += [{"equation": n, "file": file, "function": specs[n].function} for n in numbers]
    (directory / MANIFEST).write_text(json.dumps({"tasks": tasks}, indent=2) + "\n")
    return tasks


@dataclass(frozen=True)
class Grade:
    """One task's outcome: ``status`` is "done", "not done", "wrong" or "error"."""

    equation: int
    function: str
    status: str
    detail: str


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"course_{path.stem}_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grade(directory, max_examples: int | None = None) -> list[Grade]:
    """Check every task of the workspace in ``directory``."""
    directory = Path(directory)
    manifest = directory / MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(f"course grade: {manifest} not found; make a workspace with "
                                "'minitorch-nlp course new DIR --sections sec3'")
    grades, modules = [], {}
    for task in json.loads(manifest.read_text())["tasks"]:
        number, function = task["equation"], task["function"]
        try:
            if task["file"] not in modules:
                modules[task["file"]] = _load(directory / task["file"])
            candidate = getattr(modules[task["file"]], function)
        except Exception as error:   # noqa: BLE001 - a broken student file is a grade, not a crash
            grades.append(Grade(number, function, "error", f"{type(error).__name__}: {error}"))
            continue
        try:
            result = check_equation(number, candidate, max_examples=max_examples)
        except TaskNotDone as error:
            grades.append(Grade(number, function, "not done", str(error)))
        except EquationMismatch as error:
            grades.append(Grade(number, function, "wrong", str(error)))
        else:
            grades.append(Grade(number, function, "done", f"{result.examples} examples agree"))
    return grades


def format_grades(grades: list[Grade]) -> str:
    """The grade table, then the counter-example of each wrong task."""
    width = max([len(g.function) for g in grades] + [8])
    lines = [f" eq  {'function':<{width}}  status    detail"]
    for g in grades:
        first = g.detail.splitlines()[0] if g.detail else ""
        lines.append(f"{g.equation:>3}  {g.function:<{width}}  {g.status:<8}  {first}")
    done = sum(g.status == "done" for g in grades)
    lines.append(f"{done} of {len(grades)} tasks done")
    for g in grades:
        if g.status == "wrong":
            lines += ["", g.detail]
    return "\n".join(lines)
