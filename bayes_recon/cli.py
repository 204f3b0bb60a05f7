"""``bayes-recon``: reconstruct a posterior's training data from its published draws.

Add a subcommand by appending its ``register_*`` function to ``SUBCOMMANDS`` (see
:mod:`recon_core.command`). Exit status: 0 done; 2 bad input (a one-line message); 3
``reconstruct`` ran but its self-check says the recovered data do not reproduce the release, so
its numbers are not to be trusted (see :mod:`bayes_recon.selfcheck`); 4 memory ran out, and the
command stopped before the system would have killed it (:mod:`recon_core.memory`).

JAX keeps compiled attacks in $XDG_CACHE_HOME/recon-audit/jax (~/.cache/recon-audit/jax), so a
second run of the same shapes skips most compiling; ``--no-compile-cache`` or
RECON_AUDIT_NO_CACHE=1 turns that off. ``reconstruct`` keeps every finished round of restarts in a
checkpoint folder (``--checkpoint``; by default beside ``--save`` or ``--json``): the same command
run again after an interruption resumes there, to the same result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import textwrap
import threading
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recon_core import command
from recon_core.command import Subparsers
from recon_core.errors import ReconError
from recon_core.headline import number, percent
from recon_core.jsonio import jsonable

if typing.TYPE_CHECKING:
    from bayes_recon.leaks import Finding
    from bayes_recon.pipeline import PosteriorProblem

DEFAULT_POSTERIOR = "kidiq-kidscore_momiq"
EXIT_SELF_CHECK_FAILED = 3
OUT_OF_MEMORY_REMEDY = (
    "Use fewer points or draws (reconstruct's --points, --max-draws, --batch-size) or a machine with more "
    "memory; reconstruct run again with the same --checkpoint (or --save, --json) resumes from the rounds "
    "it kept."
)
NO_CACHE_ENV = "RECON_AUDIT_NO_CACHE"

# ReconConfig fields the CLI exposes: option help. The defaults and the choices come from ReconConfig
# itself (recon_core.command.add_config_options).
CONFIG_OPTIONS = {
    "restarts": "independent restarts; the one with the lowest objective is kept",
    "restarts_at_once": "restarts batched together (default: all on an accelerator, 1 on a CPU)",
    "rounds_at_once": "rounds of restarts run side by side in threads (default: on a CPU one fewer than "
    "the cores, as memory allows; 1 on an accelerator; as many as the cores can hang)",
    "steps": "optimisation steps that move every point and weight (and polish them in each Frank–Wolfe "
    "round); past them L-BFGS goes on, to a cap, while it still gains what the draws can tell",
    "rescue_restarts": "restarts run when the best restart and the Frank–Wolfe rounds' result fail the "
    "self-check; the best of them is taken if it passes, or fails with the lower objective (0: none)",
    "refine_rounds": "Frank–Wolfe rounds on the best restart when it fails the self-check: points added "
    "where weight lowers the objective, weights solved exactly (0: none)",
    "estimator": "Fisher-divergence estimator (auto: exact up to 20 parameters)",
    "method": "optimiser of the final stage",
    "coordinates": "coordinates of the parameters the divergence is measured in",
    "max_draws": "use at most this many posterior draws (default: all)",
    "grid_at_once": "grid-search candidates scored together (default: as many as a memory budget allows; "
    "fewer take less memory, for the same result)",
    "batch_size": "minibatch of draws per step (forces Adam; default: every draw)",
    "bootstrap": "rounds run again on resampled draws from the best restart, to show how far they move "
    "N and the moments (0: none; the standard errors need none)",
}


def _say(message: str) -> None:
    print(message, flush=True)


def _posteriordb_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--posteriordb",
        metavar="PATH",
        help="a posteriordb clone or its posterior_database folder "
        "(default: $POSTERIOR_DB_PATH, else the embedded kidiq posteriors)",
    )


def _config_arguments(p: argparse.ArgumentParser) -> None:
    from bayes_recon.reconstruct import ReconConfig

    command.add_config_options(p, ReconConfig, CONFIG_OPTIONS, prefix="config_")


def _config(args: argparse.Namespace):
    from bayes_recon.reconstruct import ReconConfig

    return command.config_from(args, ReconConfig, prefix="config_")


def _source_arguments(p: argparse.ArgumentParser) -> None:
    """The posterior: a registered posteriordb name, or the user's model file, draws and data."""
    p.add_argument(
        "--posterior", help=f"registered posteriordb name (default {DEFAULT_POSTERIOR}; not with --model)"
    )
    _posteriordb_argument(p)
    user = p.add_argument_group(
        "your own model (instead of --posterior)",
        "--model runs your Python file (it is imported, as `python FILE.py` would run it): only pass "
        "files you trust.",
    )
    user.add_argument(
        "--model",
        metavar="FILE.py:NAME",
        help="the NumPyro model function NAME defined in FILE.py (runs FILE.py: your own code)",
    )
    user.add_argument(
        "--draws",
        nargs="+",
        metavar="FILE",
        help="its posterior draws: ArviZ .nc or .zarr, CmdStan .csv file(s) (one per chain), .npz "
        "{site or Stan name: (S, ...)}, posteriordb .json, or a posteriordb posterior name",
    )
    user.add_argument(
        "--data",
        metavar="FILE",
        help="the data set (.csv, posteriordb-style .json {column: list}, .npz): the truth to compare "
        "with, the shapes of the --free columns and the --fixed columns",
    )
    user.add_argument(
        "--free",
        metavar="COLUMNS",
        help="the model's data arguments to reconstruct, e.g. x,y or X:3,y (a shape per data point, "
        "read from --data when given)",
    )
    user.add_argument(
        "--fixed",
        action="append",
        default=[],
        metavar="COLUMN",
        help="a model argument the adversary knows, taken from --data (repeat or comma-separate)",
    )
    user.add_argument(
        "--support",
        action="append",
        default=[],
        metavar="COLUMN=CONSTRAINT",
        help="a free column's support, a numpyro.distributions.constraints name: positive, "
        "nonnegative_integer, unit_interval, boolean, interval(0,200), simplex (a composition: X:3 "
        "shares summing to one), ... (default: a response's "
        "from its distribution, else real)",
    )


def _problem(args: argparse.Namespace) -> PosteriorProblem:
    """The posterior the arguments name, read and checked: a registered one, or the user's files."""
    from bayes_recon.pipeline import load_problem
    from bayes_recon.userfiles import user_problem

    user = {"--draws": args.draws, "--data": args.data, "--free": args.free, "--fixed": args.fixed,
            "--support": args.support}  # fmt: skip
    if args.model is None:
        if args.command == "audit" and args.draws and all(re.fullmatch(r"[0-9,]+", d) for d in args.draws):
            raise ReconError(
                f"--draws {' '.join(args.draws)}: --draws names the draws of your own model now; the "
                "draw counts of the leakage curve are --draw-counts N1,N2"
            )
        given = [option for option, value in user.items() if value]
        if given:
            raise ReconError(
                f"{', '.join(given)} describe your own model: add --model FILE.py:NAME (a registered "
                "--posterior brings its own model, draws and data)"
            )
        return load_problem(args.posterior or DEFAULT_POSTERIOR, args.posteriordb)
    if args.posterior is not None:
        raise ReconError(
            "--posterior picks a registered model; with --model give the draws with --draws "
            "(files, or a posteriordb posterior name)"
        )
    if not args.draws or not args.free:
        missing = " and ".join(o for o in ("--draws", "--free") if not user[o])
        raise ReconError(
            f"--model needs {missing}, e.g. --model my_model.py:model --draws fit.nc --free x,y "
            "--data data.csv"
        )
    return user_problem(
        args.model, args.draws, args.free, args.data, args.fixed, args.support, args.posteriordb
    )


def _attack_arguments(p: argparse.ArgumentParser) -> None:
    """The posterior, its database, the number of pseudo-points and the seed: each attack command takes."""
    _source_arguments(p)
    p.add_argument(
        "--points", type=int, default=50, metavar="M", help="weighted pseudo-data points (default 50)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed, 0 to 2**62 (default 0)")


def register_reconstruct(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "reconstruct",
        help="reconstruct a posterior's data from its reference draws and compare with the truth",
    )
    _attack_arguments(p)
    _config_arguments(p)
    p.add_argument("--json", metavar="OUT.json", help="write the table, settings and timing here")
    p.add_argument("--save", metavar="PREFIX", help="save the measure as PREFIX.npz and PREFIX.json")
    p.add_argument(
        "--check-errors",
        action="store_true",
        help="check the standard errors one error out, by tilting the objective (a long, curved valley "
        "makes them understate); two runs of up to 200 L-BFGS steps per statistic",
    )
    _checkpoint_arguments(p, "PREFIX.ckpt beside --save, else OUT.ckpt beside --json")
    p.set_defaults(run=_reconstruct)


def _checkpoint_arguments(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="keep every finished round of restarts here; the same command run again after an "
        f"interruption resumes from it (default: {default}, else none); removed once the outputs are "
        "written",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over: delete the checkpoint's rounds first (needed when it holds another attack's)",
    )


ROUNDS_BAR = "{l_bar}{bar}| {n_fmt}/{total_fmt} rounds done (restarts, then any resamples) {elapsed}"


class _Progress:
    """The attack's ``progress(done, total)``, drawn on stderr: until the attack is compiled the
    display says "compiling" with the time elapsed (JAX traces and compiles it first), then a bar of
    rounds done (the restarts', then any bootstrap resamples') with the time elapsed, kept ticking while a
    round runs; between attacks (an audit runs several) it says so again."""

    def __init__(self, desc: str) -> None:
        self.desc, self.bar, self.lock, self.stop = desc, None, threading.Lock(), threading.Event()
        self.waiting: Any = None
        self.ticker = threading.Thread(target=self._tick, daemon=True)

    def start(self) -> None:
        self._wait("compiling")
        self.ticker.start()

    def _wait(self, doing: str) -> None:
        from tqdm.auto import tqdm

        self.waiting = tqdm(desc=f"{self.desc}: {doing}", bar_format="{desc} {elapsed}", file=sys.stderr,
                            leave=False, delay=0.5)  # fmt: skip

    def _tick(self) -> None:
        while not self.stop.wait(0.5):
            with self.lock:
                for bar in (self.waiting, self.bar):
                    if bar is not None:
                        bar.refresh()

    def __call__(self, done: int, total: int) -> None:
        from tqdm.auto import tqdm

        with self.lock:
            if self.waiting is not None:
                self.waiting.close()
                self.waiting = None
            if self.bar is None:
                self.bar = tqdm(total=total, desc=self.desc, file=sys.stderr, leave=False, dynamic_ncols=True,
                                bar_format=ROUNDS_BAR)  # fmt: skip
            self.bar.total = total
            self.bar.n = done
            self.bar.refresh()
            if done >= total:  # this attack is done; checks, or the next attack's compiling, follow
                self.bar.close()
                self.bar = None
                self._wait("checking and compiling")

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            for bar in (self.bar, self.waiting):
                if bar is not None:
                    bar.close()
            self.bar = self.waiting = None


@contextmanager
def _progress_bar(enabled: bool, desc: str) -> Iterator[Callable[[int, int], None] | None]:
    """A ``progress(done, total)`` callback drawing on stderr (None when not ``enabled``).

    Nothing appears for the first half second, so input refused at once leaves nothing on stderr
    but the error message.
    """
    if not enabled:
        yield None
        return
    progress = _Progress(desc)
    progress.start()
    try:
        yield progress
    finally:
        progress.close()


def _writable(path: str | None, option: str, suffixes: Sequence[str] = ("",)) -> None:
    """Refuse, before any work, an output path that cannot be written: its folder missing or not
    writable, or the path (with each of ``suffixes``) a folder."""
    if path is None:
        return
    target = Path(path).expanduser()
    folder = target.parent
    if folder.exists() and not folder.is_dir():
        raise ReconError(f"{option} {path}: {folder} is a file, not a folder; choose another path")
    if not folder.is_dir():
        raise ReconError(
            f"{option} {path}: the folder {folder} does not exist; create it first (mkdir -p {folder}) "
            "or choose another path"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ReconError(
            f"{option} {path}: cannot write in {folder} (permission denied); choose another folder"
        )
    for suffix in suffixes:
        out = target.with_suffix(suffix) if suffix else target
        if out.is_dir():
            raise ReconError(
                f"{option} {path}: {out} is a folder; give a file name inside it, e.g. {out / 'out'}"
            )
        if out.exists() and not os.access(out, os.W_OK):
            raise ReconError(
                f"{option} {path}: cannot overwrite {out} (permission denied); choose another path"
            )


def _checkpoint_folder(args: argparse.Namespace, *outputs: str | None) -> Path | None:
    """--checkpoint, else NAME.ckpt beside the first of ``outputs`` given; checked like an output."""
    if args.checkpoint is not None:
        folder = Path(args.checkpoint).expanduser()
    elif given := [out for out in outputs if out is not None]:
        folder = Path(given[0]).expanduser().with_suffix(".ckpt")
    else:
        return None
    if folder.exists() and not folder.is_dir():
        raise ReconError(f"--checkpoint {folder} is a file; give a folder (it is made if missing)")
    if not folder.parent.is_dir():
        raise ReconError(
            f"--checkpoint {folder}: the folder {folder.parent} does not exist; create it first "
            f"(mkdir -p {folder.parent}) or choose another path"
        )
    return folder


def _reconstruct(args: argparse.Namespace) -> int:
    from bayes_recon import checkpoint
    from bayes_recon.identifiability import IdentifiabilityConfig, undetermined_moments
    from bayes_recon.pipeline import _check_arguments, attack_posterior, check_memory

    _writable(args.json, "--json")
    _writable(args.save, "--save", (".npz", ".json"))
    folder = _checkpoint_folder(args, args.save, args.json)
    config = _check_arguments(args.points, args.seed, _config(args))
    problem = _problem(args)
    check_memory(problem, args.points, config)
    if folder is not None and args.fresh:
        checkpoint.remove(folder)
    with _progress_bar(not args.quiet, problem.name) as progress:
        attack = attack_posterior(
            problem, n_points=args.points, seed=args.seed, config=config, progress=progress, checkpoint=folder
        )
    recon = attack.reconstruction
    truth = "no data in the database" if attack.truth is None else f"true N = {attack.truth.total_mass():g}"
    _say(
        f"{attack.name}: {len(recon.measure)} weighted points, objective {recon.objective:.6g}, "
        f"{recon.seconds:.1f} s ({truth})"
    )
    _say(format_table(attack.rows()))
    if units := recon.measure.meta.get("units"):
        _say(f"counted: {describe_units(units)}")
    if attack.truth is not None:
        _say(
            f"MMD between true and reconstructed data under the model-induced kernel, relative to the "
            f"truth's norm: {attack.relative_mmd():.3g} (0: the release cannot tell them apart)"
        )
    _say(f"self-check: {recon.self_check.summary()}")
    _say(f"restarts: {describe_restarts(recon)}")
    try:  # what the likelihood sees, on probe data; a model that fails there leaves the errors alone
        outside = undetermined_moments(recon.setup, list(recon.measure.points), IdentifiabilityConfig())
    except ReconError:
        outside = []
    _say(f"determined: {describe_determined(recon, tilted=args.check_errors, outside=outside)}")
    if args.check_errors:
        _say(f"error check: {describe_error_check(recon)}")
    if len(recon.bootstrap["objective"]):
        _say(f"bootstrap: {describe_bootstrap(recon)}")
    _say(f"convergence: {describe_convergence(recon)}")
    if not recon.self_check.reproduces:
        _say(f"next: {describe_remedies(recon, args.points)}")
    if args.json:
        tilted = {}
        if args.check_errors:  # JSON has neither NaN nor infinity: both would be null
            moves = recon.error_moves.items()
            tilted = {
                "error_moves": {
                    k: "unchecked" if math.isnan(m) else "unbounded" if m == math.inf else m for k, m in moves
                },
                "tilted_standard_errors": recon.tilted_standard_errors,
            }
        _write_json(
            args.json, attack.to_json() | jsonable(tilted) | {"undetermined_by_the_likelihood": outside}
        )
    if args.save:
        _say(f"saved {recon.measure.save(args.save)}")
    if folder is not None:
        checkpoint.remove(folder)  # the outputs are written: nothing left to resume
    return 0 if recon.self_check.reproduces else EXIT_SELF_CHECK_FAILED


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


RECONSTRUCT_COLUMNS = {
    "statistic": "statistic",
    "column": "column",
    "recovered": "recovered",
    "true": "true",
    "relative_error": "rel. error",
}


def format_table(rows: Sequence[dict[str, Any]], keys: Sequence[str] | None = None) -> str:
    """Rows as a plain text table, ``rows()`` by default: text left-aligned, numbers right-aligned.

    ``keys``: the columns to show, each headed by its key; default the reconstruct table's columns.
    """
    header = tuple(RECONSTRUCT_COLUMNS.values()) if keys is None else tuple(keys)
    keys = tuple(RECONSTRUCT_COLUMNS) if keys is None else tuple(keys)
    cells = [
        header,
        *[tuple("" if r.get(k) is None and k == "column" else _cell(r.get(k)) for k in keys) for r in rows],
    ]
    text_columns = {i for i, k in enumerate(keys) if all(isinstance(r.get(k), str | None) for r in rows)}
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        text = [
            c.ljust(w) if i in text_columns else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(text).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def register_list(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "list", help="registered posteriors, whether the database has them, and those out of scope"
    )
    _posteriordb_argument(p)
    p.set_defaults(run=_list)


def _list(args: argparse.Namespace) -> int:
    from bayes_recon.models import OUT_OF_SCOPE, REGISTRY
    from bayes_recon.posteriordb import EMBEDDED, database_path

    root = database_path(args.posteriordb)
    present = {p.stem for p in (root / "posteriors").glob("*.json")}
    where = "the embedded database" if root == EMBEDDED else str(root)
    _say(
        f"registered posteriors (attackable with bayes-recon reconstruct --posterior NAME); database: {where}"
    )
    width = max(len(n) for n in [*REGISTRY, *OUT_OF_SCOPE])
    for name, entry in sorted(REGISTRY.items()):
        status = "in database" if name in present else "not in database"
        _say(f"  {name.ljust(width)}  {status.ljust(15)}  free: {', '.join(entry.free)}")
    _say(f"out of scope ({len(OUT_OF_SCOPE)}), by reason:")
    by_reason: dict[str, list[str]] = {}
    for name, reason in sorted(OUT_OF_SCOPE.items()):
        by_reason.setdefault(reason, []).append(name)
    for reason, names in by_reason.items():
        _say(textwrap.fill(reason, width=100, initial_indent="  ", subsequent_indent="    "))
        for name in names:
            _say(f"    {name.ljust(width)}  {'in database' if name in present else 'not in database'}")
    others = sorted(present - set(REGISTRY) - set(OUT_OF_SCOPE))
    if others:
        _say(f"{len(others)} other posterior(s) in the database have no registered model;")
        _say("attack them from Python with bayes_recon.reconstruct and your own NumPyro model.")
    return 0


def register_check(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "check", help="the data statistics a posterior's draws pin down, from the model alone (no data)"
    )
    _source_arguments(p)
    p.add_argument(
        "--max-degree", type=int, default=4, metavar="D", help="monomials up to degree D (default 4)"
    )
    p.add_argument("--json", metavar="OUT.json", help="write the statistics here")
    p.set_defaults(run=_check)


def _check(args: argparse.Namespace) -> int:
    from bayes_recon.identifiability import IdentifiabilityConfig, check_posterior

    _writable(args.json, "--json")
    config = IdentifiabilityConfig(max_degree=args.max_degree)
    problem = _problem(args)
    leaks = _file_leaks(args, problem)
    check = check_posterior(problem, config=config)
    _say(describe_identifiability(check))
    if args.json:
        _write_json(args.json, {"file_leaks": [f.to_json() for f in leaks], **check.to_json()})
    return 0


def _file_leaks(args: argparse.Namespace, problem: PosteriorProblem) -> list[Finding]:
    """What the user's draws files give away besides the draws, said first (none for a posteriordb
    posterior's reference draws: they are not the user's file)."""
    from bayes_recon.leaks import file_leaks

    if args.model is None or not Path(args.draws[0]).expanduser().exists():  # a posteriordb name
        return []
    leaks = file_leaks(args.draws, problem)
    _say(describe_leaks(leaks, " ".join(args.draws)))
    return leaks


def describe_leaks(findings: Sequence[Finding], where: str) -> str:
    """One line per group or variable of the draws file that reveals rows, and what it reveals."""
    if not findings:
        return f"{where}: the posterior draws alone; nothing else in the file reveals rows of the data.\n"
    lines = [
        f"{where} gives away more than the posterior draws ({len(findings)} group(s) or variable(s); "
        "bayes-recon strip IN OUT writes a copy without them):"
    ]
    for f in findings:
        shape = "x".join(map(str, f.shape)) or "scalar"
        recovered = ""
        if f.rows_recovered is not None:
            error = "" if f.max_error is None else f", max error {f.max_error:.3g} against --data"
            recovered = f"; through the model, {f.rows_recovered} rows recovered from it{error}"
        lines.append(f"  {f.severity:6}  {f.label} ({shape}): {f.reveals}{recovered}")
    return "\n".join(lines) + "\n"


# Restarts at the same objective whose statistics differ by more than this leave them open.
RESTARTS_AGREE_BELOW = 0.05


def describe_convergence(recon: Any) -> str:
    """Whether the attack's last step stopped on its own: the Frank–Wolfe rounds, where they ran, else the
    last stage of the best restart."""
    from bayes_recon.optimise import GAIN_WINDOW
    from bayes_recon.stages import FINE_GAIN
    from bayes_recon.verdict import closing_remedy

    converged, steps = recon.converged(), recon.config.steps
    cap = recon.config.stage_steps(located=False, minibatched=False)[3]
    if converged is None:
        return f"minibatches of draws: Adam ran all {steps} steps (it has no stopping rule)."
    refined = "refine_converged" in recon.history
    if converged and recon.remaining_gain > recon.stopping_gain():
        stopped, rule = (
            ("the Frank–Wolfe rounds stopped on their own", "a round must gain")
            if refined
            else ("the last stage stopped on its own", f"its stopping rule asks of {GAIN_WINDOW} steps")
        )
        capped = (
            f"NOT reached: {stopped}, but along the step of its quadratic model at the result the objective "
            f"still falls by {recon.remaining_gain:.3g} of its Monte Carlo error (checked on the objective), "
            f"more than the {recon.stopping_gain():.3g} {rule}"
        )
        remedy = closing_remedy(recon)
    elif converged and refined:
        return (
            "the Frank–Wolfe rounds stopped when moving all the mass onto the best point searched would "
            "gain (to first order), or a round gained, less than the objective's Monte Carlo error."
        )
    elif converged:
        return _closing_words(recon) or (
            "the last stage stopped when the objective stopped changing, or, past its first "
            f"{steps} steps, when {GAIN_WINDOW} steps gained less than {number(FINE_GAIN)} of its Monte "
            "Carlo error."
        )
    elif refined:
        capped = (
            f"NOT reached: all {recon.config.refine_rounds} Frank–Wolfe rounds ran and points that would "
            "lower the objective were still found"
        )
        remedy = closing_remedy(recon)
    elif len(recon.history.get("closing_gains", ())):  # they ran out (none taken: the stage's cap)
        capped = (
            f"NOT reached: all {len(recon.history['closing_gains'])} Newton steps that follow a last stage "
            "still moving after its first steps ran, each still gaining"
        )
        remedy = closing_remedy(recon)
    else:
        adam = recon.config.method == "adam"  # it has no stopping rule: its steps are its cap
        falling = f"falling by at least {number(FINE_GAIN)} of its Monte Carlo error in {GAIN_WINDOW} steps"
        capped = f"NOT reached: the last stage used all its {cap} steps while the objective was still " + (
            "changing" if adam else falling
        )
        remedy = closing_remedy(recon) + ("" if adam else f" (a cap of {4 * cap})")
    if _leaves_n_open(recon):
        return (
            f"{capped}. That is on mass the release does not see (see determined): more steps would mostly "
            "move that mass, which the draws cannot check (stop 34: 600 steps sent a logistic regression's "
            "N to 5.8e17)."
        )
    return f"{capped}, so the result may be short of the optimum; rerun with {remedy}."


def _closing_words(recon: Any) -> str:
    """How the Newton steps that followed a last stage gone on past its first steps stopped, where they took
    any (:meth:`bayes_recon.Reconstruction.with_closing_steps`); empty where they took none."""
    from bayes_recon.stages import FINE_GAIN
    from bayes_recon.standard_errors import CLOSING_WINDOW

    gains = recon.history.get("closing_gains", ())
    if not len(gains):
        return ""
    steps, taken = recon.config.steps, int(recon.history["steps_taken"][recon.best_restart, 3])
    cap = " (its cap)" if taken >= recon.history["stage_steps"][3] else ""
    lead = (
        f"the last stage went on past its first {steps} steps to {taken}{cap}, so"
        if taken > steps
        else "after the last stage stopped,"
    )
    return (
        f"{lead} Newton steps checked on the objective followed: {len(gains)}, gaining "
        f"{number(float(sum(gains)))} of its Monte Carlo error, until the next and the {CLOSING_WINDOW - 1} "
        f"before it together would gain less than {number(FINE_GAIN)} of it, or the objective confirmed no "
        "further step."
    )


def _leaves_n_open(recon: Any) -> bool:
    from bayes_recon.reconstruct import UNSEEN_LEAVES_N_OPEN

    return recon.unseen_mass >= UNSEEN_LEAVES_N_OPEN


def describe_remedies(recon: Any, points: int) -> str:
    """What to rerun with when the self-check failed: more pseudo-points, and where they apply what brings
    a result short of its optimum closer (on mass the release sees; :func:`bayes_recon.verdict.
    closing_remedy`) and more restarts (some ended above the best).

    Points first: a likelihood that the data enter through more than a few statistics (a kink, several
    modes) cannot be reproduced by too few of them, however well optimised, and more steps can do harm
    (stop 34: 600 steps sent a logistic regression's mass to 5.8e17). In the synthetic suite a Laplace
    regression of 100 rows and three covariates ended at mass 16, its objective 0.72 above the true
    data's, with 10 points (0.37 above with 600 steps), and at mass 94 with 50, the self-check passed;
    of 1,000 rows and one covariate, at mass 50 (60 with 600 steps) and 965; of 1,000 rows and three
    covariates (stop 68), at mass 208 with 50 points, failing the self-check, and at 1,356 with 200
    (N's error ±640), passing it.
    """
    from bayes_recon.verdict import closing_remedy, passed_over_words

    rows_each = number(recon.measure.total_mass() / len(recon.measure))
    remedies = [
        f"--points {5 * points} (each pseudo-point stands for about {rows_each} rows; a likelihood with a "
        "kink or several modes needs more of them than a Gaussian one)"
    ]
    closer = closing_remedy(recon)
    if recon.short_of_optimum() and not _leaves_n_open(recon):
        remedies.append(f"{closer} (the attack stopped short of the optimum; see convergence)")
    at_best, total = int(recon.at_best().sum()), len(recon.restart_objectives)
    if at_best < total and not any(r.startswith("--restarts") for r in remedies):
        remedies.append(
            f"--restarts {2 * total} (only {at_best} of {total} restarts reached the best objective"
            f"{passed_over_words(recon.passed_over())}, so a better one may have been missed)"
        )
    return "the numbers above are not to be trusted; rerun with: " + "; ".join(remedies) + "."


def _spread_words(recon: Any, spread: dict[str, float]) -> str:
    """Each statistic of :func:`bayes_recon.reconstruct.statistics_spread` named, with its spread."""
    from bayes_recon.reconstruct import moment_namer

    named = moment_namer(recon.measure.points)

    def size(key: str, value: float) -> str:
        if not math.isfinite(value):
            return "an unbounded amount"  # an error that is not finite
        if key.startswith("cov"):
            return f"{number(value)} (in correlation)"
        return f"{number(value)} sd" if key.startswith("mean") else percent(value)

    return ", ".join(f"{named(k)} by {size(k, v)}" for k, v in spread.items())


def _largest_words(spread: dict[str, float]) -> str:
    """N's spread and the largest of each kind of statistic's, in words."""
    largest = {kind: max((v for k, v in spread.items() if k.startswith(kind)), default=None)
               for kind in ("mean", "sd", "cov")}  # fmt: skip
    parts = [f"N by {percent(spread['total_mass'])}"] if "total_mass" in spread else []
    if largest["mean"] is not None:
        parts.append(f"the means by at most {number(largest['mean'])} sd")
    if largest["sd"] is not None:
        parts.append(f"the sds by at most {percent(largest['sd'])}")
    if largest["cov"] is not None:
        parts.append(f"the covariances by at most {number(largest['cov'])} (in correlation)")
    return ", ".join(parts)


def describe_units(units: Mapping[str, str]) -> str:
    """What one unit of weight is, where the rows were weighed as their weights, trials or exposure."""
    column, response = units["column"], units["response"]
    if units["kind"] == "weight":
        return (
            f"the weights count units of {column}, not rows: every pseudo-row is a row of weight 1, as the "
            "likelihood cannot tell a row of weight u from u rows of weight 1"
        )
    if units["kind"] == "trials":
        return (
            f"the weights count {column}'s trials, not rows: every pseudo-row is one trial ({response} 1 "
            "or 0), as the likelihood cannot tell a row of n trials from n rows of one"
        )
    return (
        f"the weights count {column}'s units of exposure, not rows: every pseudo-row is one unit "
        f"({response} its count per unit), as the likelihood cannot tell a row of exposure t from t rows "
        "of exposure one"
    )


def describe_restarts(recon: Any) -> str:
    """Whether the restarts that reached the best objective agree on N and the columns' moments."""
    at_best, total, added = int(recon.at_best().sum()), len(recon.restart_objectives), recon.rescued()
    from bayes_recon.verdict import passed_over_words

    if added:
        first = total - added
        total = f"{total} ({added} added: the best of the first {first} and its repair failed the self-check)"
    passed_over = passed_over_words(recon.passed_over())
    if at_best < 2:
        return (
            f"{at_best} of {total} reached the best objective{passed_over}, so nothing to compare "
            "(--restarts 2 or more compares them)."
        )
    spread = recon.restart_spread()
    open_ = {k: v for k, v in spread.items() if v > RESTARTS_AGREE_BELOW}
    if not open_:
        return (
            f"{at_best} of {total} reached the best objective{passed_over} and agree on N and every "
            f"column's mean and sd (largest spread {max(spread.values()):.2%})."
        )
    return (
        f"{at_best} of {total} reached the best objective{passed_over} but differ on "
        f"{_spread_words(recon, open_)}: the "
        "release determines these only loosely; read them as one data set it cannot tell from the truth, "
        "not as the truth."
    )


def describe_determined(recon: Any, tilted: bool = False, outside: Sequence[str] = ()) -> str:
    """How tightly the release's draws determine N and the columns' moments (their Monte Carlo standard
    errors, :attr:`Reconstruction.standard_errors`; ``tilted``: those widened where the check one error
    out found the objective flatter, :attr:`Reconstruction.tilted_standard_errors`), after whether N is
    left open by mass on pseudo-points the release barely sees (:attr:`Reconstruction.unseen_mass`) and
    which moments no draws could determine (``outside``: the keys of those outside what a polynomial
    likelihood sees, :func:`bayes_recon.identifiability.undetermined_moments`). A quantile regression
    stopped at its step cap had standard errors of 5 % on a covariate's sd 30 % off; 600 steps on, 67 % on
    27 %."""
    from bayes_recon.reconstruct import DETERMINED_WITHIN, UNSEEN_TILT, moment_namer
    from bayes_recon.verdict import undetermined_words

    unseen = (
        f"N is NOT determined: {percent(recon.unseen_mass)} of the recovered mass sits where the likelihood "
        f"barely changes with the parameters (its log-likelihood varies over the draws by under "
        f"{percent(UNSEEN_TILT)} of the whole's), so its weight could be almost anything. "
        if _leaves_n_open(recon)
        else ""
    )
    unseen += undetermined_words(list(map(moment_namer(recon.measure.points), outside)))
    errors = recon.tilted_standard_errors if tilted else recon.standard_errors
    errors = {k: math.inf if k in outside else v for k, v in errors.items()}
    runs = (
        "other draws of the same posterior (or another restart as good) would move the result by about one "
        "standard error: "
    )
    if tilted:
        runs = (
            runs[:-2] + " (widened where a tilt worth one error moved a statistic further; see error check): "
        )
    if recon.short_of_optimum():  # the sandwich describes an optimum; short of it, it may say too little
        runs = "the attack stopped short of the optimum (see convergence), so these may understate: " + runs
    if unseen:  # a sentence of its own
        runs = runs[0].upper() + runs[1:]
    loose = {k: v for k, v in errors.items() if not 2 * v < DETERMINED_WITHIN and k not in outside}
    if not loose:
        rest = {k: v for k, v in errors.items() if k not in outside}
        tight = f"{runs}{_largest_words(rest)}: the release determines them about that tightly."
        told = unseen + tight if rest else unseen.rstrip()
    else:
        told = (
            f"{unseen}{runs}{_spread_words(recon, loose)}: the release does NOT determine these; read their "
            "values as one data set it cannot tell from the truth, not as the truth."
        )
    return told + describe_shortfall(recon, errors)


def describe_shortfall(recon: Any, errors: Mapping[str, float]) -> str:
    """Where the attack stopped short of the optimum its standard errors describe by more than those
    ``errors`` (:attr:`Reconstruction.shortfall`): which statistics reaching it would move, and what to
    do; empty where none would move that far. The optimiser's error, not the release's: it does not
    change what the release is said to determine."""
    from bayes_recon.verdict import closing_remedy

    shortfall = {k: v for k, v in recon.shortfall.items() if v > errors[k]}
    if not shortfall:
        return ""
    lead = (  # the line opens by saying so where the result is short of the optimum
        " Reaching it"
        if recon.short_of_optimum()
        else " The attack stopped short of the optimum these errors describe: reaching it"
    )
    return (
        f"{lead}, along the step of the objective's quadratic model at the result as far as the objective "
        f"confirms it, would move {_spread_words(recon, shortfall)}, each more than one error. That is the "
        f"optimiser's error, not the release's (shortfall in the JSON); rerun with {closing_remedy(recon)}."
    )


def describe_error_check(recon: Any) -> str:
    """What the check of the standard errors one error out found (:attr:`Reconstruction.error_moves`)."""
    from bayes_recon.reconstruct import moment_namer
    from bayes_recon.standard_errors import FLATTER, TILT_STEPS

    moves, named = recon.error_moves, moment_namer(recon.measure.points)
    told = {k: m for k, m in moves.items() if not math.isnan(m)}
    flatter = [
        f"{named(k)} {number(m)} errors" if math.isfinite(m) else f"{named(k)} without bound"
        for k, m in told.items()
        if m > FLATTER
    ]
    if flatter:
        said = (
            f"a tilt of the objective worth one standard error moved {', '.join(flatter)}: the objective is "
            "flatter there than the standard errors assume, and they are widened by that much"
        )
    elif told:
        said = (
            f"a tilt of the objective worth one standard error moved no statistic further than {FLATTER:g} "
            f"errors (largest {number(max(told.values()))}): the standard errors are not too small by this "
            "check"
        )
    else:
        said = "no statistic could be checked"
    if untold := len(moves) - len(told):
        said += (
            f"; {untold} of {len(moves)} could not be checked (a tilted run stopped at its {TILT_STEPS} "
            "steps short of one error or the untilted run's own drift, or moved against its tilt; or the "
            "standard error is zero or unbounded, or the objective not curved along the statistic)"
        )
    return said + ". The check goes one way: a short move does not prove an error right."


def describe_bootstrap(recon: Any) -> str:
    """How far the attack's statistics move when it is run again on resampled draws."""
    from bayes_recon.reconstruct import DETERMINED_WITHIN

    spread = recon.bootstrap_spread()
    runs = f"the attack run again on {len(recon.bootstrap['objective'])} resamples of the draws"
    if not all(map(math.isfinite, spread.values())):
        return f"{runs} did not finish on every resample (its objective became non-finite)."
    loose = {k: v for k, v in spread.items() if v >= DETERMINED_WITHIN}
    if not loose:
        return f"{runs} moves {_largest_words(spread)}."
    return f"{runs} moves {_spread_words(recon, loose)}."


def describe_identifiability(check: Any) -> str:
    """The statistics a posterior pins down, one per line, and how they compare with the closed form."""
    found = check.identifiability
    variables = ", ".join(v.label for v in found.variables)
    seen = f"The model-induced kernel has effective rank {found.kernel_effective_rank:.1f} at the draws: " + (
        "the release reveals about that many independent directions of the data."
        if found.kernel_effective_rank > 0
        else "the likelihood does not depend on these columns, so the release reveals nothing of them."
    )
    if not found.polynomial:
        linear = (
            "The responses enter the likelihood linearly through "
            + ", ".join(found.linear_in_response)
            + " (a canonical link). At the posterior's mode each equals its expected value under the model "
            "(up to the prior's pull), a sum over the covariates' rows, so the release determines these "
            "sums only as tightly as the covariates' distribution (a Poisson regression with an intercept "
            "ties them to the Fisher information, which the draws' spread pins; a logistic one does not); "
            "N and the covariates' moments enter through the non-linear part and may be weakly determined "
            "(reconstruct reports their standard errors).\n"
            if found.linear_in_response
            else ""
        )
        return (
            f"{check.name}: the model's features are not polynomials of degree ≤ {found.degree} in "
            f"{variables}: the release pins down statistics outside that basis (no finite list to name; "
            "run reconstruct to see how tightly it determines N and the columns' moments).\n" + linear + seen
        )
    lines = [
        f"{check.name}: the draws pin down {found.rank} statistics of the data (features of degree "
        f"{found.degree} in {variables}; {found.n_draws} draws, {found.seconds:.1f} s):",
        *(f"  {name}" for name in found.names),
    ]
    if found.aliases:
        lines.append(f"equal on the support, so counted once: {'; '.join(found.aliases)}")
    lines.append("Nothing outside their span (higher moments, single rows) is determined by the release.")
    lines.append(seen)
    if check.exact is not None:
        verdict = "exactly" if check.exact else "NOT"
        lines.append(
            f"These are {verdict} the Gaussian linear model's sufficient statistics N, XᵀX, Xᵀy, yᵀy."
        )
    return "\n".join(lines)


def _write_json(path: str, content: dict[str, Any]) -> None:
    out = Path(path).expanduser()
    out.write_text(json.dumps(content, indent=2, ensure_ascii=False))
    _say(f"wrote {out}")


def _numbers(kind: type) -> Callable[[str], tuple]:
    def parse(text: str) -> tuple:
        try:
            return tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None

    return parse


def register_audit(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "audit",
        help="what a posterior can reveal, what the attack recovers (and with fewer draws), as HTML and JSON",
    )
    _attack_arguments(p)
    p.add_argument(
        "--draw-counts",
        type=_numbers(int),
        default=(100, 1000),
        metavar="N1,N2",
        help="also attack releases of only the first N1, N2, ... draws (default 100,1000)",
    )
    p.add_argument(
        "--epsilon",
        type=_numbers(float),
        default=(),
        metavar="E1,E2",
        help="mitigation hint (linear regressions): leakage left with noisy sufficient statistics at these ε",
    )
    p.add_argument(
        "--mechanism", choices=("laplace", "gaussian"), default="laplace", help="noise (default laplace)"
    )
    p.add_argument("--delta", type=float, default=1e-5, help="δ of the Gaussian mechanism (default 1e-5)")
    _config_arguments(p)
    p.add_argument("--report", metavar="OUT.html", help="write the self-contained HTML report here")
    p.add_argument("--json", metavar="OUT.json", help="write the same numbers as JSON here")
    _checkpoint_arguments(p, "REPORT.ckpt beside --report, else OUT.ckpt beside --json")
    p.set_defaults(run=_audit)


def _audit(args: argparse.Namespace) -> int:
    from bayes_recon import checkpoint
    from bayes_recon.audit import ATTACK_CHECKPOINT, AuditConfig, audit_posterior
    from bayes_recon.pipeline import _check_arguments, check_memory
    from bayes_recon.report import write_report
    from bayes_recon.verdict import findings, headline

    _writable(args.json, "--json")
    _writable(args.report, "--report")
    folder = _checkpoint_folder(args, args.report, args.json)
    recon = _check_arguments(args.points, args.seed, _config(args))
    config = AuditConfig(
        n_points=args.points,
        seed=args.seed,
        draw_counts=args.draw_counts,
        epsilons=args.epsilon,
        mechanism=args.mechanism,
        delta=args.delta,
        recon=recon,
    )
    problem = _problem(args)
    check_memory(problem, args.points, recon)
    leaks = _file_leaks(args, problem)
    if folder is not None and args.fresh:
        checkpoint.remove(folder, ATTACK_CHECKPOINT)
    with _progress_bar(not args.quiet, problem.name) as progress:
        audit = audit_posterior(problem, config=config, progress=progress, checkpoint=folder)
    audit = dataclasses.replace(audit, file_leaks=[f.to_json() for f in leaks])
    _say(headline(findings(audit)).text() + "\n")
    _say(describe_identifiability(audit.check))
    _say(
        f"\nThe attack ({config.n_points} points, {audit.curve[-1].draws} draws); verdict: recovered below "
        f"{config.recovered_below:g}, partly below {config.partly_below:g} (scale-free error):"
    )
    _say(format_table(audit.rows, ("statistic", "true", "recovered", "error", "verdict")))
    _say("\nLeakage against the number of draws released:")
    curve = [
        {
            "draws": p.draws,
            "scored by": p.method,
            "relative MMD": p.relative_mmd,
            "recovered": sum(r["verdict"] == "recovered" for r in p.rows),
            "largest error": max(r["error"] for r in p.rows),
        }
        for p in audit.curve
    ]
    _say(format_table(curve, ("draws", "scored by", "relative MMD", "recovered", "largest error")))
    if audit.mitigation:
        _say("\nMitigation: the best attack's errors on a posterior from noisy sufficient statistics:")
        rows = [{"release": "no noise", **(audit.oracle_errors or {}), "mean shift (sd)": 0.0}]
        rows += [
            {
                "release": f"epsilon {m['epsilon']:g} {m['mechanism']}",
                **m["errors"],
                "mean shift (sd)": m["posterior_mean_shift_sd"],
            }
            for m in audit.mitigation
        ]
        _say("(errors of what the attacker recovers; mean shift: what the noise costs the posterior's user)")
        _say(format_table(rows, ("release", "N", "XtX", "Xty", "yty", "mean shift (sd)")))
    _say(f"audit took {audit.seconds:.1f} s")
    if args.report:
        _say(f"wrote {write_report(audit, args.report)}")
    if args.json:
        _write_json(args.json, audit.to_json())
    if folder is not None:
        checkpoint.remove(folder, ATTACK_CHECKPOINT)
    return 0


def register_strip(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "strip",
        help="copy a draws file with the posterior draws alone: no data, log-likelihood, predictions or "
        "per-row quantities",
    )
    p.add_argument("input", metavar="IN", help="ArviZ .nc or .zarr, a CmdStan .csv file or a NumPy .npz")
    p.add_argument("output", metavar="OUT", help="the copy, in the same format (IN is never overwritten)")
    p.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="NAME",
        help="keep variable NAME even though it is per row (repeat or comma-separate)",
    )
    p.add_argument(
        "--rows",
        type=int,
        metavar="N",
        help="the number of data rows, when the file holds no observed_data: variables with an axis of "
        "length N are per row (default: read from the file's per-row groups and names)",
    )
    p.set_defaults(run=_strip)


def _strip(args: argparse.Namespace) -> int:
    from bayes_recon.leaks import strip

    source, target = Path(args.input).expanduser(), Path(args.output).expanduser()
    if not source.exists():
        raise ReconError(f"strip: no file {source}; give the draws file to copy")
    if target.resolve() == source.resolve():
        raise ReconError(f"strip: OUT is IN ({source}); write the copy to another file, IN is kept as it is")
    if target.suffix.lower() == ".zarr" and target.exists():  # a zarr store is a folder: not replaced
        raise ReconError(f"strip OUT {target}: it exists; remove it first or choose another name")
    _writable(args.output, "strip OUT")
    if args.rows is not None and args.rows < 1:
        raise ReconError(f"--rows must be at least 1 (the number of data rows), got {args.rows}")
    keep = [n.strip() for item in args.keep for n in item.split(",") if n.strip()]
    stripped = strip(source, target, keep, args.rows)
    removed = stripped.removed_groups + stripped.removed_variables
    _say(f"removed from {source}: {', '.join(removed) if removed else 'nothing (it holds the draws alone)'}")
    _say(f"kept: {', '.join(stripped.kept)}")
    _say(f"wrote {target}")
    return 0


SUBCOMMANDS: list[command.Register] = [
    register_reconstruct,
    register_list,
    register_check,
    register_audit,
    register_strip,
]


def _global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help=f"do not keep compiled attacks in {_cache_folder()} (also: {NO_CACHE_ENV}=1)",
    )


def _cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recon-audit" / "jax"


def _prepare(args: argparse.Namespace) -> None:
    """JAX's persistent compilation cache, for this run of the command (never on library import)."""
    if args.no_compile_cache or os.environ.get(NO_CACHE_ENV, "") not in ("", "0"):
        return
    import jax

    folder = _cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if not args.quiet:
            print(f"bayes-recon: note: no compilation cache ({err}); compiling from scratch", file=sys.stderr)
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # Every program, however quick to compile: a run compiles about 290 small ones beside the attack
    # (kidiq M = 50: 8 s of XLA compiling in the second run with a 0.5 s floor, 2.4 s with none;
    # 3.3 MB of cache instead of 1.9 MB).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def build_parser() -> argparse.ArgumentParser:
    parser = command.build_parser("bayes-recon", __doc__.splitlines()[0], SUBCOMMANDS, _global_options)
    parser.epilog = (
        "exit status: 0 done; 2 bad input (one line: error: what is wrong and the fix); 3 reconstruct "
        "ran, but its self-check says the recovered data do not reproduce the release; 4 stopped as "
        "memory ran out, before the system would have killed it (a --checkpoint keeps its rounds). Compiled "
        f"attacks are cached in {_cache_folder()} (--no-compile-cache or {NO_CACHE_ENV}=1: off)."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from bayes_recon.precision import enable_float64

    enable_float64()  # the command's own process: every check and attack it runs is in float64
    return command.run(build_parser(), argv, (ReconError,), _prepare, OUT_OF_MEMORY_REMEDY)


if __name__ == "__main__":
    sys.exit(main())
