"""The ``equations`` command: the paper's equations, the code registered for each and its
tests, as a table or as JSON."""
from __future__ import annotations

import argparse
import json
import re
import sys

from .. import cookbook
from .common import UsageError

__all__ = ["add_equations_command", "coverage_line", "equation_rows"]


def add_equations_command(commands) -> None:
    """Add ``equations`` to the sub-command parser ``commands``."""
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


def _select(text: str | None) -> list[cookbook.Equation]:
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
        raise UsageError(
            f"--section {text}: no equation is in that section; give a chapter that has "
            f"equations (sec3..sec9, 3..9 or III..IX) or a word from one of the headings: "
            + "; ".join(headings)
        )
    return selected


def _equations(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    selected = _select(args.section)
    skipped = cookbook.import_all()
    if skipped:
        print(
            "not imported (an optional dependency is missing): " + ", ".join(skipped),
            file=sys.stderr,
        )
    rows = equation_rows(selected)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        _print_table(rows)
    return 0


def equation_rows(equations: list[cookbook.Equation]) -> list[dict]:
    """The table's rows: each equation with the code registered for it and its tests (found in
    a source checkout). Call ``cookbook.import_all()`` first to see every registration."""
    tests = cookbook.tests_by_equation()
    return [
        {
            "number": eq.number,
            "section": eq.section,
            "description": eq.description,
            "implementations": cookbook.implementations(eq.number),
            "tests": tests.get(eq.number, []),
        }
        for eq in equations
    ]


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
    print(coverage_line(rows))


def coverage_line(rows: list[dict]) -> str:
    """How many of ``rows`` (the table's) have code registered and tests: the README quotes it
    for all the equations, and a test checks that it matches."""
    implemented = sum(bool(row["implementations"]) for row in rows)
    tested = sum(bool(row["tests"]) for row in rows)
    return f"{len(rows)} equations: {implemented} with code registered, {tested} with tests"
