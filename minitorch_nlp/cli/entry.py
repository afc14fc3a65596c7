"""The ``minitorch-nlp`` command line: one parser assembled from the commands of ``cli`` and of
the packages that own the rest (``testing``, ``compress``, ``retrieval``, ``distributed``), and
``main``, which runs it with the command's one error style."""
from __future__ import annotations

import argparse
import sys

from ..compress.commands import add_compress_commands
from ..compress.distill_commands import add_distill_commands
from ..distributed.commands import add_plan_commands
from ..retrieval.commands import add_retrieval_commands
from ..testing.commands import add_testing_commands
from .common import PROG, Parser, UsageError, print_error
from .equations import add_equations_command
from .example import add_example_command
from .runs import add_run_commands

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status: 0
    done, 1 failed, 2 a usage error, 130 stopped by Ctrl-C. Errors are one line on stderr,
    ``minitorch-nlp: error: ...``; ``--debug`` shows the traceback instead."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:   # --help (0) or a usage error already printed (2)
        return exit.code
    debug = getattr(args, "debug", False)   # --debug before or after the command
    try:
        return args.run(args, parser)
    except UsageError as error:
        if debug:
            raise
        print_error(error)
        return 2
    except (ValueError, TypeError, OSError, RuntimeError, ImportError) as error:
        if debug:
            raise
        print_error(error)
        return 1
    except KeyboardInterrupt:   # Ctrl-C outside a training loop (which saves and returns 130)
        if debug:
            raise
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every command's parser under one ``minitorch-nlp``."""
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error")
    parser = Parser(
        prog=PROG, parents=[common],
        description="minitorch_nlp: a NumPy-first deep-learning framework for teaching, "
        "with the equations of The NLP Cookbook implemented and property-tested.",
    )
    commands = parser.add_subparsers(title="commands", dest="command", required=True,
                                     parser_class=lambda **kw: Parser(parents=[common], **kw))
    add_equations_command(commands)
    add_example_command(commands)
    add_run_commands(commands)
    add_testing_commands(commands)
    add_compress_commands(commands)
    add_distill_commands(commands)
    add_retrieval_commands(commands)
    add_plan_commands(commands)
    return parser
