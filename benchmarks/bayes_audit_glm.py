"""The audit on models whose features are not polynomials: GLMs, counts, a mixture.

Such a model has no finite list of identifiable statistics, so the audit
(:func:`bayes_recon.audit.audit_posterior`) scores its attack on N and the sums of every column and of
every product of two (:func:`bayes_recon.identifiability.moment_statistics`). The cases, their data and
their NUTS draws are those of ``bayes_model_styles.py`` (its cache under ``results/bayes_styles_cache/``),
each written to files and read as a user's would be (:func:`bayes_recon.userfiles.user_problem`), then
audited with the defaults: M = 50, the release and its first 100 draws. A case whose audit raises is a
row with its error. Per case the table gives the
verdict's answer in one word (the severity), the error of every scored statistic, the self-check, the
largest standard error and the wall time of the whole audit (the attacks' compilation included), in
one process.

Run (from the repository root):
    .venv/bin/python benchmarks/bayes_audit_glm.py --json results/bayes_audit_glm.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import bayes_model_styles as styles
import numpy as np

from bayes_recon.audit import AuditConfig, audit_posterior
from bayes_recon.userfiles import user_problem
from bayes_recon.verdict import findings, headline

CASES = (
    "logistic-two-scales",
    "ordered-logistic",
    "zero-inflated-poisson",
    "binomial-trials-vary",
    "wells-distance-metres",
    "glm-poisson-cubic",
    "glm-binomial-trials-vary",
    "mixture-no-covariates",
    "poisson-one-covariate",
)


def run_case(name: str, folder: Path, config: AuditConfig) -> dict[str, Any]:
    case = styles.BY_CASE[name]
    data, draws = styles.sampled(case, styles.CACHE)
    np.savez(folder / f"{name}-data.npz", **data)
    np.savez(folder / f"{name}-draws.npz", **draws)
    problem = user_problem(
        f"{styles.__file__}:{case.model.__name__}",
        [str(folder / f"{name}-draws.npz")],
        ",".join(case.free),
        str(folder / f"{name}-data.npz"),
        fixed=case.fixed,
    )
    started = time.perf_counter()
    try:
        audit = audit_posterior(problem, config=config)
    except Exception as err:  # a row, not the end of the suite
        return {"case": name, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
    found = findings(audit)
    said = headline(found)
    return {
        "case": name,
        "N": audit.truth.total_mass(),
        "seconds": time.perf_counter() - started,
        "severity": said.severity,
        "answer": said.answer,
        "self_check": found.reproduces,
        "largest_standard_error": found.standard_error,
        "kernel_effective_rank": found.kernel_effective_rank,
        "statistics": audit.rows,
        "draws_curve": [{"draws": p.draws, "rows": p.rows} for p in audit.curve],
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | N | verdict | statistic: error (verdict) | self-check | largest se | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | | **error** | {r['error'][:200]} | | | |")
            continue
        scored = "; ".join(
            f"{s['statistic']} {100 * s['error']:.1f} % ({s['verdict']})" for s in r["statistics"]
        )
        check = "reproduces" if r["self_check"] else "**does not**"
        lines.append(
            f"| {r['case']} | {r['N']:,.0f} | {r['severity']} | {scored} | {check} | "
            f"{100 * r['largest_standard_error']:.0f} % | {r['seconds']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    names = [n for n in args.cases.split(",") if n]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"no case {unknown}; the cases: {', '.join(CASES)}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            rows.append(run_case(name, Path(folder), AuditConfig()))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
            if args.json:  # after every case: a long suite stopped half-way keeps what it measured
                Path(args.json).parent.mkdir(parents=True, exist_ok=True)
                saved = {"command": sys.argv, "rows": rows}
                Path(args.json).write_text(json.dumps(saved, indent=1, default=float))
    print(table(rows))


if __name__ == "__main__":
    main()
