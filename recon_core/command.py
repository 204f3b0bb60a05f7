"""What both command-line tools share: a parser of subcommands, and bad input as one line, status 2.

Each subcommand is one ``register_*`` function that adds its parser and sets ``run`` to a function
taking the parsed arguments and returning an exit status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Subparsers = "argparse._SubParsersAction[argparse.ArgumentParser]"
Register = Callable[[Subparsers], None]


def build_parser(
    prog: str,
    description: str,
    subcommands: Sequence[Register],
    options: Callable[[argparse.ArgumentParser], None] = lambda parser: None,
) -> argparse.ArgumentParser:
    """``prog`` with its global ``options`` and one subparser per register function.

    The global options are taken after the subcommand too (``prog run --quiet``); there they have
    no default, so that one given before the subcommand is not reset.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    options(parser)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for register in subcommands:
        register(subparsers)
    for subparser in subparsers.choices.values():
        group = subparser.add_argument_group("global options (also before the subcommand)")
        options(group)  # type: ignore[arg-type]  # an argument group takes add_argument as a parser does
        for action in group._group_actions:
            action.default = argparse.SUPPRESS
    return parser


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    errors: tuple[type[Exception], ...],
    prepare: Callable[[argparse.Namespace], None] = lambda args: None,
) -> int:
    """Parse, ``prepare`` (global settings), run the subcommand; ``errors`` and OSError (a missing
    file, a folder where a file was expected) become ``prog: error: message`` and exit status 2."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2), already printed
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        prepare(args)
        return args.run(args)
    except (*errors, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
