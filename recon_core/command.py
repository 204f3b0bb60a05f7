"""What both command-line tools share: a parser of subcommands, options made from a config, bad input as
one line, status 2, and memory running out as one line, status 4 (:mod:`recon_core.memory`).

Each subcommand is one ``register_*`` function that adds its parser and sets ``run`` to a function
taking the parsed arguments and returning an exit status; :class:`Subcommand` is one row of a table
of them. A frozen config dataclass gives its options with :func:`add_config_options` and is made
back from the parsed arguments with :func:`config_from`, so that its defaults live in one place.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from recon_core import memory

Subparsers = "argparse._SubParsersAction[argparse.ArgumentParser]"
Register = Callable[[Subparsers], None]


class Subcommand(NamedTuple):
    """One row of a tool's table of subcommands: ``arguments`` adds its options to its parser and
    ``run`` takes the parsed arguments and returns the exit status."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]

    def register(self, **parser_options: Any) -> Register:
        """The ``register_*`` function of this row; ``parser_options`` go to its parser."""

        def register(subparsers: Subparsers) -> None:
            parser = subparsers.add_parser(self.name, help=self.help, **parser_options)  # type: ignore[attr-defined]
            self.arguments(parser)
            parser.set_defaults(run=self.run)

        return register


def literal_choices(annotation: Any) -> tuple[str, ...] | None:
    """The strings a Literal (or a union of Literals) allows; None for any other type."""
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    args = typing.get_args(annotation)
    if args and all(typing.get_origin(a) is typing.Literal for a in args):
        return tuple(str(v) for a in args for v in typing.get_args(a))
    return None


def _shown(default: Any) -> str:
    """A default as it is typed on the command line: a tuple as 784,10,10."""
    return ",".join(map(str, default)) if isinstance(default, tuple) else str(default)


def add_config_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    config: type,
    helps: Mapping[str, str],
    *,
    prefix: str = "",
    flags: Mapping[str, str] | None = None,
    types: Mapping[str, Callable[[str], Any]] | None = None,
    choices: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """One option per field of the dataclass ``config`` named in ``helps``, with that help.

    The option is ``--field-name`` (``flags`` names another, e.g. ``{"architecture": "arch"}``) and
    stores the value at ``prefix + field``; it converts by ``types`` or the field's annotation (int,
    float or str; a Literal's values are its choices, else ``choices``). It is None when not given,
    so that the config's own default applies (:func:`config_from`); the help ends with that default,
    or, where it is None, says itself what happens without the option.
    """
    flags, types, choices = flags or {}, types or {}, choices or {}
    defaults, hints = config(), typing.get_type_hints(config)
    for field in dataclasses.fields(config):
        if field.name not in helps:
            continue
        flag = flags.get(field.name, field.name.replace("_", "-"))
        allowed = choices.get(field.name) or literal_choices(hints[field.name])
        kinds = [a for a in typing.get_args(hints[field.name]) if a is not type(None)]
        kind = types.get(field.name) or (str if allowed else (kinds or [hints[field.name]])[0])
        default = getattr(defaults, field.name)
        parser.add_argument(
            f"--{flag}",
            dest=prefix + field.name,
            type=kind,
            choices=allowed,
            metavar=None if allowed else flag.upper().replace("-", "_"),
            help=helps[field.name] + ("" if default is None else f" (default: {_shown(default)})"),
        )


def config_from(args: argparse.Namespace, config: type, prefix: str = "", **fields: Any) -> Any:
    """``config`` with the options :func:`add_config_options` added that were given, and ``fields``;
    the config's defaults for the rest."""
    given = {
        f.name: getattr(args, prefix + f.name)
        for f in dataclasses.fields(config)
        if getattr(args, prefix + f.name, None) is not None
    }
    return config(**given | fields)


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
    remedy: str = "Rerun it on a machine with more memory.",
) -> int:
    """Parse, ``prepare`` (global settings), run the subcommand; ``errors`` and OSError (a missing
    file, a folder where a file was expected) become ``prog: error: message`` and exit status 2. Run as
    a command (``argv`` None: the arguments are the process's own), memory nearly exhausted ends it
    with a message naming ``remedy`` and :data:`~recon_core.memory.EXIT_OUT_OF_MEMORY`
    (:func:`recon_core.memory.guard`); called with ``argv`` from Python, it leaves the caller's
    process alone."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2), already printed
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        prepare(args)
        with memory.guard(parser.prog, remedy) if argv is None else contextlib.nullcontext():
            return args.run(args)
    except (*errors, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
