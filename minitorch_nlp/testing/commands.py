"""The ``check`` and ``course`` commands of ``minitorch-nlp`` (registered by ``cli.entry``).

Parsing only: the work is in :mod:`.check` and :mod:`.course`, imported when a command runs, so
that the command line works without the ``test`` extra until one of these is used.
"""
from __future__ import annotations

import argparse
import json
import os

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
                       help="the function to check, e.g. mypackage.attention:attention_weights "
                       "(modules are found from the working directory) or hw1/sec4.py:"
                       "attention_weights")
    check.add_argument("--max-examples", type=_examples, metavar="K",
                       help="hypothesis examples (100)")
    check.add_argument("--numpy", action="store_true",
                       help="the candidate uses autograd.numpy on arrays, not Tensors")
    check.set_defaults(run=_check)

    course = commands.add_parser(
        "course", help="write a student workspace of stubs, or grade one",
        description="'course new DIR --sections sec3,sec4' (or '--equations 9,10,11') writes a "
        "stub for each chosen checkable equation; 'course grade DIR' checks each and prints a "
        "grade table (--json: points per task, for collecting a class).")
    actions = course.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new", help="write a workspace of stubs into a new folder")
    new.add_argument("directory", metavar="DIR")
    chosen = new.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--sections", metavar="LIST",
                        help="comma-separated chapters, e.g. sec3,sec4")
    chosen.add_argument("--equations", metavar="LIST",
                        help="comma-separated equation numbers or ranges, e.g. 9,10,11 or 40-44")
    new.set_defaults(run=_course_new)
    grade = actions.add_parser("grade", help="check every task of a workspace")
    grade.add_argument("directory", metavar="DIR")
    grade.add_argument("--max-examples", type=_examples, metavar="K",
                       help="hypothesis examples (100)")
    grade.add_argument("--json", action="store_true",
                       help="print the grades as JSON (schema minitorch-nlp/course-grades/1)")
    grade.set_defaults(run=_course_grade)


def _examples(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return count


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
        candidate = check.load_candidate(args.candidate, search_path=os.getcwd())
    except ModuleNotFoundError as error:
        parser.error(f"cannot import {args.candidate}: {error} (modules are looked up from the "
                     f"working directory {os.getcwd()}; a file can be named as "
                     "path/to/file.py:function)")
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    except Exception as error:   # noqa: BLE001 - a student's file that fails to import
        parser.error(f"importing {args.candidate} raised {type(error).__name__}: {error}")
    try:
        result = check.check_equation(args.number, candidate, max_examples=args.max_examples,
                                      inputs="numpy" if args.numpy else "tensors",
                                      name=args.candidate)
    except EquationMismatch as error:
        print(error)
        return 1
    except check.TaskNotDone as error:
        print(f"eq {args.number}: {args.candidate} is not done yet ({error})")
        return 1
    compared = "values and gradients" if specs[args.number].differentiable else "values"
    print(f"eq {args.number}: {args.candidate} agrees with the reference on "
          f"{result.examples} examples ({compared}, float64)")
    return 0


def _course_new(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        tasks = _extra("course", parser).new_workspace(args.directory, args.sections,
                                                       equations=args.equations)
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
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    if args.json:
        print(json.dumps(course.grades_json(grades, args.directory), indent=2))
    else:
        print(course.format_grades(grades))
    return 0 if all(g.status == "done" for g in grades) else 1
