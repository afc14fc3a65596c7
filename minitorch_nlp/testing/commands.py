"""The ``check`` and ``course`` commands of ``minitorch-nlp`` (registered by ``cli.entry``).

Parsing only: the work is in :mod:`.check` and :mod:`.course`, imported when a command runs, so
that the command line works without the ``test`` extra until one of these is used.
"""
from __future__ import annotations

import argparse

from . import import_extra


def add_testing_commands(commands) -> None:
    """Add ``check`` and ``course`` to the ``minitorch-nlp`` sub-command parser ``commands``."""
    check = commands.add_parser(
        "check",
        help="property-test your own implementation of an equation against the reference",
        description="Draw float64 inputs with hypothesis and compare the values and gradients of "
        "CANDIDATE with the reference maths of equation N (HIPS autograd differentiates the "
        "reference). Without CANDIDATE, print the signature a candidate must have.",
    )
    check.add_argument("number", type=int, metavar="N", help="the equation number")
    check.add_argument("candidate", nargs="?", metavar="MODULE:FUNCTION",
                       help="the function to check, e.g. mypackage.attention:attention_weights")
    check.add_argument("--max-examples", type=int, metavar="K", help="hypothesis examples (100)")
    check.add_argument("--numpy", action="store_true",
                       help="the candidate uses autograd.numpy on arrays, not Tensors")
    check.set_defaults(run=_check)

    course = commands.add_parser(
        "course", help="write a student workspace of stubs, or grade one",
        description="'course new DIR --sections sec3,sec4' writes a stub for each checkable "
        "equation of those chapters; 'course grade DIR' checks each and prints a grade table.")
    actions = course.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new", help="write a workspace of stubs into a new folder")
    new.add_argument("directory", metavar="DIR")
    new.add_argument("--sections", required=True, metavar="LIST",
                     help="comma-separated chapters, e.g. sec3,sec4")
    new.set_defaults(run=_course_new)
    grade = actions.add_parser("grade", help="check every task of a workspace")
    grade.add_argument("directory", metavar="DIR")
    grade.add_argument("--max-examples", type=int, metavar="K", help="hypothesis examples (100)")
    grade.set_defaults(run=_course_grade)


def _extra(submodule, parser):
    try:
        return import_extra(submodule)
    except ImportError as error:
        parser.error(str(error))


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check = _extra("check", parser)
    EquationMismatch, specs = check.EquationMismatch, check.specs
    if args.number not in specs:
        parser.error(f"equation {args.number} has no check; checkable: {sorted(specs)}")
    if args.candidate is None:
        print(specs[args.number].describe())
        return 0
    try:
        candidate = check.load_candidate(args.candidate)
    except (ImportError, ValueError, TypeError) as error:
        parser.error(str(error))
    try:
        result = check.check_equation(args.number, candidate, max_examples=args.max_examples,
                                inputs="numpy" if args.numpy else "tensors")
    except EquationMismatch as error:
        print(error)
        return 1
    compared = "values and gradients" if specs[args.number].differentiable else "values"
    print(f"eq {args.number}: {args.candidate} agrees with the reference on "
          f"{result.examples} examples ({compared}, float64)")
    return 0


def _course_new(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        tasks = _extra("course", parser).new_workspace(args.directory, args.sections)
    except (ValueError, FileExistsError) as error:
        parser.error(str(error))
    for task in tasks:
        print(f"eq {task['equation']:>3}  {task['file']}  {task['function']}")
    print(f"{len(tasks)} tasks in {args.directory}; grade with "
          f"'minitorch-nlp course grade {args.directory}'")
    return 0


def _course_grade(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    course = _extra("course", parser)
    try:
        grades = course.grade(args.directory, max_examples=args.max_examples)
    except FileNotFoundError as error:
        parser.error(str(error))
    print(course.format_grades(grades))
    return 0 if all(g.status == "done" for g in grades) else 1
