"""Course mode: a student workspace of stubs, graded by :func:`check_equation`.

``new_workspace(directory, "sec3,sec4")`` (or ``equations="9,10,11"``) writes one file per
chapter (``sec3.py`` ...) with a stub for every chosen checkable equation of that chapter: the
library function's signature, its docstring and the contract of its check (without the sentences
that name the library's solution), and a body that raises :class:`TaskNotDone` ("implement eq
N"); ``course.json`` lists the tasks and each one's points (its difficulty in
:mod:`.syllabus`). ``grade(directory)`` imports the student's files, refuses any that lies
outside the workspace, and runs ``check_equation`` on each function; a function that is, or
calls, the library's own implementation is graded not done and says so. ``grades_json`` is the
stable machine-readable form (schema ``SCHEMA``). The stubs exist only in the student's folder;
the library never contains one.
"""
from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import textwrap
import types
from dataclasses import asdict, dataclass
from pathlib import Path

import minitorch_nlp as mt
from minitorch_nlp import cookbook

from .check import EquationMismatch, TaskNotDone, check_equation, specs
from .spec import load_file
from .syllabus import TASKS

__all__ = ["SCHEMA", "Grade", "format_grades", "grade", "grades_json", "new_workspace",
           "parse_equations", "parse_sections"]

MANIFEST = "course.json"
SCHEMA = "minitorch-nlp/course-grades/1"

_HEADER = '''"""Chapter {chapter} of The NLP Cookbook: {title}.

Replace each stub's body with your implementation, written with minitorch_nlp tensors (the
arguments listed first arrive as float64 Tensors that require gradients). Then, from this
folder, check one function or grade them all:

    minitorch-nlp check {first_number} {file}:{first_function}
    minitorch-nlp course grade .
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


def parse_equations(text: str) -> list[int]:
    """``"9,10,11"`` or ``"9-11,35"`` -> the equation numbers, each one that has a check."""
    numbers = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not match:
            raise ValueError(f"course: {item!r} is not an equation number or a range like 40-44")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise ValueError(f"course: the range {item!r} runs backwards")
        for number in range(first, last + 1):
            if number not in specs:
                raise ValueError(f"course: equation {number} has no check; checkable "
                                 f"equations: {min(specs)}-{max(specs)}")
            numbers.append(number)
    if not numbers:
        raise ValueError("course: name at least one equation, e.g. --equations 9,10,11")
    return sorted(set(numbers))


_POINTS_TO_SOLUTION = re.compile(
    r"^the library\b|\bthe library's (?:side\b|``|:class:|:func:)|\blibrary registers\b",
    re.IGNORECASE)


def _without_solution(text: str) -> str:
    """``text`` without the sentences that point to the library's implementation ("The
    library's ``nn.RNN`` computes it ...", "The library's side is ..."), which would hand the
    student the answer; a paragraph that loses a sentence is wrapped again."""
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        indent = re.match(r"\s*", paragraph).group()
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z`])", " ".join(paragraph.split()))
        kept = [sentence for sentence in sentences if not _POINTS_TO_SOLUTION.search(sentence)]
        if len(kept) == len(sentences):
            paragraphs.append(paragraph)
        elif kept:
            paragraphs.append(textwrap.fill(" ".join(kept), width=96, initial_indent=indent,
                                            subsequent_indent=indent))
    return "\n\n".join(paragraphs)


def _stub(numbered_specs, file) -> str:
    """One stub for the specs that check the same library function (eq 64 and 65 both check
    ``cls_projection``): its docstring carries every one of their contracts."""
    first = numbered_specs[0]
    library = first.library_function()
    doc = _without_solution(inspect.cleandoc(library.__doc__ or ""))
    for spec in numbered_specs:
        doc += f"\n\nThe check (minitorch-nlp check {spec.number} {file}:{spec.function}):\n\n" \
               f"{_without_solution(spec.describe())}"
    task = " and ".join(f"eq {spec.number} ({cookbook.EQUATIONS[spec.number].description})"
                        for spec in numbered_specs)
    return _STUB.format(function=first.function, signature=inspect.signature(library),
                        doc=textwrap.indent(doc.strip(), "    ").lstrip(), task=task)


def new_workspace(directory, sections=None, *, equations=None) -> list[dict]:
    """Write the workspace for ``sections`` (chapters as ints or ``"sec3,sec4"``) or
    ``equations`` (numbers or ``"9,10,11"``) into the new or empty ``directory``; returns its
    tasks (equation, file, function, points)."""
    directory = Path(directory)
    if (sections is None) == (equations is None):
        raise ValueError("course new: choose the tasks by sections or by equations (one of them)")
    if sections is not None:
        chapters = parse_sections(sections) if isinstance(sections, str) else sorted(set(sections))
        numbers = [n for n in specs if cookbook.EQUATIONS[n].chapter in chapters]
    else:
        numbers = parse_equations(equations) if isinstance(equations, str) else \
            parse_equations(",".join(map(str, equations)))
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise FileExistsError(f"course new: {directory} is not an empty folder; pick a new one")
    directory.mkdir(parents=True, exist_ok=True)
    tasks = []
    for chapter in sorted({cookbook.EQUATIONS[n].chapter for n in numbers}):
        chosen = sorted(n for n in numbers if cookbook.EQUATIONS[n].chapter == chapter)
        file = f"sec{chapter}.py"
        by_function = {}
        for n in chosen:
            by_function.setdefault(specs[n].function, []).append(specs[n])
        source = _HEADER.format(chapter=chapter, title=cookbook.CHAPTERS[chapter], file=file,
                                first_number=chosen[0], first_function=specs[chosen[0]].function)
        source += "".join(_stub(shared, file) for shared in by_function.values())
        (directory / file).write_text(source)
        tasks += [{"equation": n, "file": file, "function": specs[n].function,
                   "points": TASKS[n][0]} for n in chosen]
    (directory / MANIFEST).write_text(json.dumps({"tasks": tasks}, indent=2) + "\n")
    return tasks


@dataclass(frozen=True)
class Grade:
    """One task's outcome: ``status`` is "done", "not done", "wrong" or "error"; ``points`` is
    ``max_points`` when done, else 0."""

    equation: int
    file: str
    function: str
    status: str
    points: float
    max_points: float
    detail: str


def _manifest(directory: Path) -> list[dict]:
    """The tasks of ``course.json``, each checked before any student file runs: a checkable
    equation, a function name, points, and a file inside the workspace."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(f"course grade: {manifest} not found; make a workspace with "
                                "'minitorch-nlp course new DIR --sections sec3'")
    try:
        tasks = json.loads(manifest.read_text())["tasks"]
        if not isinstance(tasks, list):
            raise TypeError("'tasks' is not a list")
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"course grade: {manifest} is not a course manifest "
                         f"({type(error).__name__}: {error})") from None
    root = directory.resolve()
    for task in tasks:
        where = f"course grade: {manifest}: task {task!r}"
        if not isinstance(task, dict) or task.get("equation") not in specs:
            raise ValueError(f"{where} names no checkable equation")
        if not isinstance(task.get("function"), str) or not task["function"].isidentifier():
            raise ValueError(f"{where}: 'function' must be a Python name")
        points = task.setdefault("points", TASKS[task["equation"]][0])
        if isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
            raise ValueError(f"{where}: 'points' must be a number >= 0")
        file = task.get("file")
        if not isinstance(file, str) or Path(file).is_absolute() or \
                not (root / file).resolve().is_relative_to(root):
            raise ValueError(f"course grade: {manifest} names the file {file!r} (eq "
                             f"{task['equation']}), which is not inside the workspace {directory}; "
                             "only files inside it are run")
    return tasks


def _resolve(module, node):
    """The object a name or dotted attribute in the student's ``module`` stands for, looked up
    in its globals (None for anything else: locals, calls, attributes of values)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in vars(module):
        return None
    target = vars(module)[node.id]
    for part in reversed(parts):
        if not isinstance(target, (types.ModuleType, type)):
            return None
        target = getattr(target, part, None)
    return target


_ANSWER_KEY = ("minitorch_nlp.testing.reference", "minitorch_nlp.testing.equation_specs")
"""The maths and adapters the grader checks against: no student's function may use them."""
_ANSWER_KEY_FOLDERS = tuple(str(Path(__file__).parent / name.rsplit(".", 1)[1])
                            for name in _ANSWER_KEY)


def _in_answer_key(target) -> bool:
    name = target.__name__ if isinstance(target, types.ModuleType) else \
        getattr(target, "__module__", None)
    return isinstance(name, str) and name.startswith(_ANSWER_KEY)


def _named_in_source(module, function, spec, versions) -> str | None:
    """Why the student's ``function`` counts as not their own, read from its source with
    ``ast``: it names one of the library's ``versions`` or the grader's reference maths, through
    any import alias (``"... (line 12: F.softmax)"``), or None."""
    try:
        tree = ast.parse(Path(module.__file__).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    definitions = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                   and node.name == function]
    for definition in definitions[-1:]:
        for node in ast.walk(definition):
            if not isinstance(node, (ast.Name, ast.Attribute)):
                continue
            target = _resolve(module, node)
            where = f"line {node.lineno}: {ast.unparse(node)}"
            if target is not None and any(inspect.unwrap(target) is version
                                          for version in versions):
                return f"{function} calls the library's own {spec.library} ({where})"
            if target is not None and _in_answer_key(target):
                return f"{function} uses the reference maths that grading checks against ({where})"
    return None


def _library_versions(spec) -> list:
    """The library's implementations of ``spec``'s equation: its function, and the ``Tensor``
    method of the same name that the function runs (``F.softmax`` is ``x.softmax()``)."""
    library = inspect.unwrap(spec.library_function())
    method = getattr(mt.Tensor, library.__name__, None)
    return [library] + ([method] if inspect.isfunction(method) else [])


class _LibraryWatch:
    """Calls ``candidate``, and notes whether the library's own code (``library_called``) or the
    grader's reference maths (``answer_key_called``) runs during its first ``watched`` calls: a
    profile hook on the code objects and files, which sees any alias, wrapper or helper."""

    def __init__(self, candidate, versions, watched=3):
        self.candidate = candidate
        self.codes = {version.__code__ for version in versions if hasattr(version, "__code__")}
        self.watched = watched
        self.library_called = self.answer_key_called = False

    def __call__(self, *args, **kwargs):
        if self.watched <= 0:
            return self.candidate(*args, **kwargs)
        self.watched -= 1

        def profile(frame, event, arg):
            if event != "call":
                return
            if frame.f_code in self.codes:
                self.library_called = True
            elif frame.f_code.co_filename.startswith(_ANSWER_KEY_FOLDERS):
                self.answer_key_called = True

        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            return self.candidate(*args, **kwargs)
        finally:
            sys.setprofile(previous)


def _uses_library(module, function, candidate, spec) -> str | None:
    """Why ``candidate`` counts as the library's own implementation (or the grader's), or
    None."""
    versions = _library_versions(spec)
    if any(inspect.unwrap(candidate) is version for version in versions):
        return f"{function} is the library's own {spec.library} (imported or assigned)"
    if _in_answer_key(inspect.unwrap(candidate)):
        return f"{function} is the reference maths that grading checks against"
    return _named_in_source(module, function, spec, versions)


def _grade_task(task, module, max_examples) -> Grade:
    number, function, file = task["equation"], task["function"], task["file"]
    spec = specs[number]

    def graded(status, detail):
        points = task["points"] if status == "done" else 0
        return Grade(number, file, function, status, points, task["points"], detail)

    candidate = getattr(module, function, None)
    if not callable(candidate):
        return graded("error", f"{file} defines no function {function}")
    reason = _uses_library(module, function, candidate, spec)
    if reason is not None:
        return graded("not done", f"{reason}: write it yourself")
    watch = _LibraryWatch(candidate, _library_versions(spec))
    try:
        result = check_equation(number, watch, max_examples=max_examples,
                                name=f"{file}:{function}")
    except TaskNotDone as error:
        return graded("not done", str(error))
    except EquationMismatch as error:
        outcome = graded("wrong", str(error))
    else:
        outcome = graded("done", f"{result.examples} examples agree")
    if watch.library_called:
        return graded("not done", f"{function} runs the library's own {spec.library} when it "
                      "is called: write it yourself")
    if watch.answer_key_called:
        return graded("not done", f"{function} runs the reference maths that grading checks "
                      "against when it is called: write it yourself")
    return outcome


def grade(directory, max_examples: int | None = None) -> list[Grade]:
    """Check every task of the workspace in ``directory``."""
    directory = Path(directory)
    tasks = _manifest(directory)
    grades, modules = [], {}
    for task in tasks:
        file = task["file"]
        if file not in modules:
            try:
                modules[file] = load_file(directory / file)
            except (Exception, SystemExit) as error:   # noqa: BLE001 - a broken file is a grade
                modules[file] = error
        if isinstance(modules[file], BaseException):
            error = modules[file]
            grades.append(Grade(task["equation"], file, task["function"], "error", 0,
                                task["points"], f"{type(error).__name__}: {error}"))
            continue
        grades.append(_grade_task(task, modules[file], max_examples))
    return grades


def grades_json(grades: list[Grade], directory) -> dict:
    """The grades as the documented JSON object (``SCHEMA``): totals, then one entry per
    task."""
    return {
        "schema": SCHEMA,
        "workspace": str(directory),
        "points": sum(g.points for g in grades),
        "max_points": sum(g.max_points for g in grades),
        "done": sum(g.status == "done" for g in grades),
        "tasks_total": len(grades),
        "tasks": [asdict(g) for g in grades],
    }


def format_grades(grades: list[Grade]) -> str:
    """The grade table, then the counter-example of each wrong task."""
    width = max([len(g.function) for g in grades] + [8])
    lines = [f" eq  {'function':<{width}}  status    points  detail"]
    for g in grades:
        first = g.detail.splitlines()[0] if g.detail else ""
        lines.append(f"{g.equation:>3}  {g.function:<{width}}  {g.status:<8}  "
                     f"{_number(g.points):>2}/{_number(g.max_points):<3} {first}")
    done = sum(g.status == "done" for g in grades)
    lines.append(f"{done} of {len(grades)} tasks done, "
                 f"{_number(sum(g.points for g in grades))} of "
                 f"{_number(sum(g.max_points for g in grades))} points")
    for g in grades:
        if g.status == "wrong":
            lines += ["", g.detail]
    return "\n".join(lines)


def _number(value) -> str:
    return f"{value:g}"
