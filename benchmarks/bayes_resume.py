"""A long posterior attack killed mid-way resumes from its checkpoint to the bitwise same result.

Runs ``bayes-recon --quiet reconstruct`` three times, each in a fresh process:

1. uninterrupted, saving the measure (``--save``);
2. the same attack with ``--checkpoint DIR``, killed with SIGKILL as soon as its first round of
   restarts is in the checkpoint (``DIR/round-00000.npz``), while the next round runs;
3. the same command as 2 again, which resumes from the checkpoint and saves the measure.

Reports the wall time of each run (and when 2 was killed), and whether the resumed measure equals
the uninterrupted one exactly (``np.array_equal`` on the weights and on every column's points).
Bar: identical arrays.

Default: nes2000-nes at M = N (the true number of rows; about 20 minutes per attack on a 2-core
machine) when the posteriordb is at ../shared/posteriordb, else kidiq-kidscore_momiq at M = 50.
The kill needs at least two rounds: two restarts or more, one at a time (on a CPU, the default).

Run (from the repository root):
    PYTHONPATH=. .venv/bin/python benchmarks/bayes_resume.py --json results/bayes_resume.json
A small check (a minute or two):
    PYTHONPATH=. .venv/bin/python benchmarks/bayes_resume.py --posterior kidiq-kidscore_momiq \\
        --points 50 --restarts 2 --json results/bayes_resume_small.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from recon_core.measure import WeightedMeasure

REPO = Path(__file__).resolve().parents[1]
SHARED_DB = REPO.parent / "shared" / "posteriordb" / "posterior_database"
LONG_POSTERIOR = "nes2000-nes"


def true_n(posterior: str, database: Path | None) -> int:
    from bayes_recon.pipeline import load_problem

    truth = load_problem(posterior, database).truth
    if truth is None:
        raise SystemExit(f"{posterior} ships no data: give --points")
    return round(truth.total_mass())


def command(arguments: list[str], prefix: Path, checkpoint: Path | None) -> list[str]:
    extra = [] if checkpoint is None else ["--checkpoint", str(checkpoint)]
    return [sys.executable, "-m", "bayes_recon", "--quiet", "reconstruct", *arguments,
            "--save", str(prefix), *extra]  # fmt: skip


def run(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 3):  # 3: the self-check failed; the measure is still saved
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    return time.perf_counter() - started


def run_and_kill(argv: list[str], env: dict[str, str], checkpoint: Path) -> dict[str, Any]:
    """Start the run, SIGKILL it once its first round is checkpointed; the rounds found then."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = checkpoint / "round-00000.npz"
    while not first.exists() and process.poll() is None:
        time.sleep(0.05)
    finished_first = process.poll() is not None
    if not finished_first:
        os.kill(process.pid, signal.SIGKILL)
    process.wait()
    if finished_first:
        raise SystemExit(
            f"the run ended (exit {process.returncode}) before a round was checkpointed, nothing to "
            f"kill: {process.stderr.read().decode() if process.stderr else ''}"
        )
    process.stderr.close()
    return {
        "killed_after_seconds": time.perf_counter() - started,
        "rounds_in_checkpoint": sorted(p.name for p in checkpoint.glob("round-*.npz")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posterior", help=f"default {LONG_POSTERIOR} if the posteriordb is present")
    parser.add_argument("--posteriordb", type=Path, help=f"default {SHARED_DB} when it exists")
    parser.add_argument("--points", type=int, help="default: the true N (nes2000), 50 (kidiq)")
    parser.add_argument("--restarts", type=int, help="restarts (rounds on a CPU); at least 2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT.json", help="write the numbers here")
    args = parser.parse_args()

    database = args.posteriordb or (SHARED_DB if (SHARED_DB / "posteriors").is_dir() else None)
    posterior = args.posterior or (LONG_POSTERIOR if database is not None else "kidiq-kidscore_momiq")
    points = args.points or (true_n(posterior, database) if posterior == LONG_POSTERIOR else 50)
    arguments = ["--posterior", posterior, "--points", str(points), "--seed", str(args.seed)]
    if database is not None:
        arguments += ["--posteriordb", str(database.resolve())]
    if args.restarts is not None:
        arguments += ["--restarts", str(args.restarts)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    with tempfile.TemporaryDirectory(prefix="bayes-resume-") as folder:
        out = Path(folder)
        whole = run(command(arguments, out / "whole", None), env)
        resumable = command(arguments, out / "resumed", out / "ckpt")
        killed = run_and_kill(resumable, env, out / "ckpt")
        resumed = run(resumable, env)
        a, b = WeightedMeasure.load(out / "whole"), WeightedMeasure.load(out / "resumed")
        identical = {
            "weights": bool(np.array_equal(a.weights, b.weights)),
            **{f"points[{k}]": bool(np.array_equal(a.points[k], b.points[k])) for k in a.points},
        }
        mass = (a.total_mass(), b.total_mass())

    met = all(identical.values())
    print(f"{posterior}, M = {points}{'' if args.restarts is None else f', {args.restarts} restarts'}")
    print(f"{'run':<34}{'wall s':>8}")
    print(f"{'uninterrupted':<34}{whole:>8.1f}")
    print(f"{'killed (SIGKILL) after round 1':<34}{killed['killed_after_seconds']:>8.1f}"
          f"  checkpoint: {', '.join(killed['rounds_in_checkpoint'])}")  # fmt: skip
    print(f"{'resumed, same command':<34}{resumed:>8.1f}")
    print(f"total mass: uninterrupted {mass[0]:.10g}, resumed {mass[1]:.10g}")
    print("identical arrays: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in identical.items()))
    print(f"bar (resumed == uninterrupted, bitwise): {'met' if met else 'NOT met'}")
    if args.json:
        result = {
            "posterior": posterior,
            "points": points,
            "restarts": args.restarts,
            "seed": args.seed,
            "uninterrupted_seconds": whole,
            **killed,
            "resumed_seconds": resumed,
            "total_mass": {"uninterrupted": mass[0], "resumed": mass[1]},
            "identical": identical,
            "bar_met": met,
        }
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
