"""Identifiable statistics of the registry posteriors with a LinearGaussian, against the closed form.

For each such posterior in the database, ``bayes_recon.identifiability.check_posterior``
finds the statistics the draws pin down from the model alone (no data), and this compares their
span with that of the Gaussian linear model's N, XᵀX, Xᵀy, yᵀy, evaluated through the registry's
design (the closed form). One row per posterior: how many statistics were listed and how many the
closed form has, whether the spans agree exactly, the degree and variables the features needed,
and the wall time of the whole check (reading the posterior, compiling and the linear algebra).
Bars (issue 6): exact agreement everywhere; ≤ 10 s per posterior.

OpenBLAS runs on one thread here unless OPENBLAS_NUM_THREADS says otherwise: on a busy 2-core
machine its threads spin against XLA's and make a 2000 × 55 SVD take a second instead of 2 ms.

Run (from the repository root):
    .venv/bin/python benchmarks/identifiability.py --json results/identifiability.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import time
from pathlib import Path

from bayes_recon.identifiability import check_posterior
from bayes_recon.models import REGISTRY

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "posteriordb" / "posterior_database"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriordb", default=str(SHARED), help="posterior_database folder")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    present = {p.stem for p in (Path(args.posteriordb) / "posteriors").glob("*.json")}
    rows = []
    header = (
        f"{'posterior':32} {'listed':>6} {'known':>5} {'exact':>5} {'degree':>6} {'seconds':>7}  variables"
    )
    print(header)
    for name in sorted(n for n, e in REGISTRY.items() if e.linear is not None):  # those with a closed form
        if name not in present:
            print(f"{name:32} not in {args.posteriordb}")
            continue
        started = time.perf_counter()
        check = check_posterior(name, args.posteriordb)
        seconds = time.perf_counter() - started
        found = check.identifiability
        row = {**check.to_json(), "wall_seconds": seconds}
        rows.append(row)
        variables = ", ".join(v.label for v in found.variables)
        counts = f"{found.rank!s:>6} {check.known!s:>5} {check.exact!s:>5} {found.degree:>6}"
        print(f"{name:32} {counts} {seconds:>7.1f}  {variables}")
    exact = all(r["matches_sufficient_statistics"] for r in rows)
    slowest = max(r["wall_seconds"] for r in rows)
    print(f"exact agreement on all {len(rows)}: {exact}; slowest {slowest:.1f} s (bar 10 s)")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"rows": rows, "threads": os.environ["OPENBLAS_NUM_THREADS"]}, indent=2))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
