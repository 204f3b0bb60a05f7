"""Does JAX's persistent compilation cache serve the posterior attack, with the progress display on?

Runs ``bayes-recon reconstruct`` twice with the same arguments, each in a fresh process (a subprocess
of the CLI, progress display on: no ``--quiet``), with the cache in a temporary folder emptied first
(``XDG_CACHE_HOME`` points there): a cold run that compiles and writes the cache, then a second run
that should take the attack from it. Reports each run's wall time (the whole process: imports,
attack, self-check, MMD), the attack's own time and its compiling time (``seconds`` and
``compile_seconds`` of the ``--json`` output), the ratio of the wall times, and whether the second
run compiled the attack: it did if it wrote a new ``jit_attack_round`` entry to the cache (an entry
is written only after a compilation, never on a hit).

Bar: the second run takes at most 10 s wall and at most half the cold run's wall time, and it did
not compile the attack.

Run (from the repository root; about 2 minutes on a 2-core machine):
    PYTHONPATH=. .venv/bin/python benchmarks/bayes_cache.py --json results/bayes_cache.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ATTACK_ENTRY = "jit_attack_round"  # the compiled round's name in the cache (bayes_recon.reconstruct)
MAX_SECOND_WALL = 10.0
MAX_RATIO = 0.5


def attack_entries(cache: Path) -> set[str]:
    return {p.name for p in cache.rglob(f"{ATTACK_ENTRY}*")} if cache.is_dir() else set()


def run_once(arguments: list[str], cache_home: Path, out: Path) -> dict[str, Any]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), "PYTHONPATH": str(REPO)}
    env.pop("RECON_AUDIT_NO_CACHE", None)
    cache = cache_home / "recon-audit" / "jax"
    before = attack_entries(cache)
    command = [sys.executable, "-m", "bayes_recon", "reconstruct", *arguments, "--json", str(out)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 3):  # 3: ran, but the self-check failed; the timing still stands
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    summary = json.loads(out.read_text())
    return {
        "wall_seconds": wall,
        "attack_seconds": summary["seconds"],
        "compile_seconds": summary["compile_seconds"],
        "compiled_attack": bool(attack_entries(cache) - before),
        "exit_status": done.returncode,
        "rows": summary["rows"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posterior", default="kidiq-kidscore_momiq")
    parser.add_argument("--posteriordb", help="posteriordb folder (default: the embedded kidiq posteriors)")
    parser.add_argument("--points", type=int, default=50)
    parser.add_argument("--json", metavar="OUT.json", help="write the table's numbers here")
    args = parser.parse_args()

    arguments = ["--posterior", args.posterior, "--points", str(args.points)]
    if args.posteriordb:
        arguments += ["--posteriordb", str(Path(args.posteriordb).resolve())]
    with tempfile.TemporaryDirectory(prefix="bayes-cache-") as folder:
        cache_home = Path(folder) / "cache"  # empty: the cold run compiles everything
        cold = run_once(arguments, cache_home, Path(folder) / "cold.json")
        warm = run_once(arguments, cache_home, Path(folder) / "warm.json")

    ratio = warm["wall_seconds"] / cold["wall_seconds"]
    same_rows = cold["rows"] == warm["rows"]
    met = (
        warm["wall_seconds"] <= MAX_SECOND_WALL
        and ratio <= MAX_RATIO
        and cold["compiled_attack"]
        and not warm["compiled_attack"]
    )
    print(f"{args.posterior}, M = {args.points}, progress display on, cache emptied first")
    print(f"{'run':<8}{'wall s':>9}{'attack s':>10}{'compile s':>11}  compiled the attack")
    for name, run in (("cold", cold), ("second", warm)):
        print(
            f"{name:<8}{run['wall_seconds']:>9.1f}{run['attack_seconds']:>10.1f}"
            f"{run['compile_seconds']:>11.1f}  {'yes' if run['compiled_attack'] else 'no'}"
        )
    print(f"second / cold wall time: {ratio:.2f}; same table: {'yes' if same_rows else 'NO'}")
    print(
        f"bar (second ≤ {MAX_SECOND_WALL:g} s wall, ≤ {MAX_RATIO:g}× the cold run, attack not compiled): "
        f"{'met' if met else 'NOT met'}"
    )
    if args.json:
        result = {
            "posterior": args.posterior,
            "points": args.points,
            "cold": {k: v for k, v in cold.items() if k != "rows"},
            "second": {k: v for k, v in warm.items() if k != "rows"},
            "ratio": ratio,
            "same_rows": same_rows,
            "bar": {"max_second_wall_seconds": MAX_SECOND_WALL, "max_ratio": MAX_RATIO, "met": met},
        }
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
