"""``bayes-recon``: reconstruct a posterior's training data from its published draws.

Add a subcommand by appending its ``register_*`` function to ``SUBCOMMANDS`` (see
:mod:`bayes_recon.command`). Exit status: 0 done; 2 bad input (a one-line message); 3
``reconstruct`` ran but its self-check says the recovered data do not reproduce the release, so
its numbers are not to be trusted (see :mod:`bayes_recon.selfcheck`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bayes_recon import command
from bayes_recon.command import Subparsers
from bayes_recon.errors import ReconError

DEFAULT_POSTERIOR = "kidiq-kidscore_momiq"
EXIT_SELF_CHECK_FAILED = 3

# ReconConfig fields the CLI exposes, when the config has them: option help. The defaults and
# the choices come from ReconConfig itself.
CONFIG_OPTIONS = {
    "restarts": "independent restarts; the one with the lowest objective is kept",
    "restarts_at_once": "restarts batched together (default: all on an accelerator, 1 on a CPU)",
    "steps": "optimisation steps that move every point and weight",
    "estimator": "Fisher-divergence estimator (auto: exact up to 20 parameters)",
    "method": "optimiser of the final stage",
    "coordinates": "coordinates of the parameters the divergence is measured in",
    "max_draws": "use at most this many posterior draws (default: all)",
    "batch_size": "minibatch of draws per step (forces Adam; default: every draw)",
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


def _choices(annotation: Any) -> tuple[str, ...] | None:
    """The strings a Literal (or a union of Literals) allows; None for any other type."""
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    args = typing.get_args(annotation)
    if args and all(typing.get_origin(a) is typing.Literal for a in args):
        return tuple(str(v) for a in args for v in typing.get_args(a))
    return None


def _config_arguments(p: argparse.ArgumentParser) -> None:
    from bayes_recon.reconstruct import ReconConfig

    defaults, hints = ReconConfig(), typing.get_type_hints(ReconConfig)
    for field in dataclasses.fields(ReconConfig):
        if field.name not in CONFIG_OPTIONS:
            continue
        default = getattr(defaults, field.name)
        choices = _choices(hints[field.name])
        kind = str if choices else int
        p.add_argument(
            f"--{field.name.replace('_', '-')}",
            dest=f"config_{field.name}",
            type=kind,
            choices=choices,
            metavar=None if choices else "N",
            help=CONFIG_OPTIONS[field.name] + ("" if default is None else f" (default {default})"),
        )


def _config(args: argparse.Namespace):
    from bayes_recon.reconstruct import ReconConfig

    chosen = {
        f.name: getattr(args, f"config_{f.name}")
        for f in dataclasses.fields(ReconConfig)
        if getattr(args, f"config_{f.name}", None) is not None
    }
    return dataclasses.replace(ReconConfig(), **chosen)


def _attack_arguments(p: argparse.ArgumentParser) -> None:
    """The posterior, its database, the number of pseudo-points and the seed: each attack command takes."""
    p.add_argument(
        "--posterior", default=DEFAULT_POSTERIOR, help=f"posteriordb name (default {DEFAULT_POSTERIOR})"
    )
    _posteriordb_argument(p)
    p.add_argument(
        "--points", type=int, default=50, metavar="M", help="weighted pseudo-data points (default 50)"
    )
    p.add_argument("--seed", type=int, default=0)


def register_reconstruct(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "reconstruct",
        help="reconstruct a posterior's data from its reference draws and compare with the truth",
    )
    _attack_arguments(p)
    _config_arguments(p)
    p.add_argument("--json", metavar="OUT.json", help="write the table, settings and timing here")
    p.add_argument("--save", metavar="PREFIX", help="save the measure as PREFIX.npz and PREFIX.json")
    p.set_defaults(run=_reconstruct)


@contextmanager
def _progress_bar(enabled: bool, desc: str) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a tqdm bar on stderr from its first call.

    The bar appears only once the attack reports progress, so input refused before then leaves
    nothing on stderr but the error message.
    """
    from tqdm.auto import tqdm

    bars: list[Any] = []

    def update(done: int, total: int) -> None:
        if not enabled:
            return
        if not bars:
            bars.append(
                tqdm(total=total, desc=desc, unit="step", file=sys.stderr, leave=False, dynamic_ncols=True)
            )
        bar = bars[0]
        if bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield update
    finally:
        for bar in bars:
            bar.close()


def _writable(path: str | None, option: str) -> None:
    if path is not None and Path(path).is_dir():
        raise ReconError(f"{option} {path} is a folder; give a file name (or prefix) inside it")


def _reconstruct(args: argparse.Namespace) -> int:
    from bayes_recon.pipeline import attack_posterior

    _writable(args.json, "--json")
    _writable(args.save, "--save")
    config = _config(args)
    with _progress_bar(not args.quiet, args.posterior) as progress:
        attack = attack_posterior(
            args.posterior,
            args.posteriordb,
            n_points=args.points,
            seed=args.seed,
            config=config,
            progress=progress,
        )
    recon = attack.reconstruction
    truth = "no data in the database" if attack.truth is None else f"true N = {attack.truth.total_mass():g}"
    _say(
        f"{attack.name}: {len(recon.measure)} weighted points, objective {recon.objective:.6g}, "
        f"{recon.seconds:.1f} s ({truth})"
    )
    _say(format_table(attack.rows()))
    if attack.truth is not None:
        _say(
            f"MMD between true and reconstructed data under the model-induced kernel, relative to the "
            f"truth's norm: {attack.relative_mmd():.3g} (0: the release cannot tell them apart)"
        )
    _say(f"self-check: {recon.self_check.summary()}")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(attack.to_json(), indent=2))
        _say(f"wrote {out}")
    if args.save:
        _say(f"saved {recon.measure.save(args.save)}")
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
    p.add_argument(
        "--posterior", default=DEFAULT_POSTERIOR, help=f"posteriordb name (default {DEFAULT_POSTERIOR})"
    )
    _posteriordb_argument(p)
    p.add_argument(
        "--max-degree", type=int, default=4, metavar="D", help="monomials up to degree D (default 4)"
    )
    p.add_argument("--json", metavar="OUT.json", help="write the statistics here")
    p.set_defaults(run=_check)


def _check(args: argparse.Namespace) -> int:
    from bayes_recon.identifiability import IdentifiabilityConfig, check_posterior

    _writable(args.json, "--json")
    check = check_posterior(
        args.posterior, args.posteriordb, IdentifiabilityConfig(max_degree=args.max_degree)
    )
    _say(describe_identifiability(check))
    if args.json:
        _write_json(args.json, check.to_json())
    return 0


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
        return (
            f"{check.name}: the model's features are not polynomials of degree ≤ {found.degree} in "
            f"{variables}: the release pins down statistics outside that basis (no finite list to name; "
            "run reconstruct to see how tightly it determines N and the columns' moments).\n" + seen
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
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
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
        "--draws",
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
    p.set_defaults(run=_audit)


def _audit(args: argparse.Namespace) -> int:
    from bayes_recon.audit import AuditConfig, audit_posterior
    from bayes_recon.pipeline import _check_arguments
    from bayes_recon.report import write_report

    _writable(args.json, "--json")
    _writable(args.report, "--report")
    recon = _check_arguments(args.points, args.seed, _config(args))
    config = AuditConfig(
        n_points=args.points,
        seed=args.seed,
        draw_counts=args.draws,
        epsilons=args.epsilon,
        mechanism=args.mechanism,
        delta=args.delta,
        recon=recon,
    )
    with _progress_bar(not args.quiet, args.posterior) as progress:
        audit = audit_posterior(args.posterior, args.posteriordb, config, progress)
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
    return 0


SUBCOMMANDS: list[command.Register] = [
    register_reconstruct,
    register_list,
    register_check,
    register_audit,
]


def build_parser() -> argparse.ArgumentParser:
    return command.build_parser(
        "bayes-recon",
        __doc__.splitlines()[0],
        SUBCOMMANDS,
        lambda parser: parser.add_argument("--quiet", action="store_true", help="no progress bar"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    return command.run(build_parser(), argv, (ReconError,))


if __name__ == "__main__":
    sys.exit(main())
