"""Closed-form GLM reconstruction: accuracy and time, next to ART's DatabaseReconstruction.

For linear, ridge and logistic regression at several (d, n), fit the model on n points to
optimality, drop the last point and reconstruct it from the released model and the other n-1.
Reports the max relative error of the reconstructed (features, label) and the time, and for the
models ART supports (its DatabaseReconstruction covers sklearn classifiers, so logistic
regression here) ART's error and the time ratio ART / closed form.

ART is a benchmark-only dependency (the ``bench`` extra, 1.20.1 when measured; pulls no torch):
    .venv/bin/pip install -e '.[bench]'
Run:
    PYTHONPATH=. python benchmarks/glm_closed_form.py [--json results/glm_closed_form.json] [--no-art]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge

from nn_recon.attacks.informed import reconstruct_target

SIZES = ((5, 100), (20, 1000), (100, 10000))
ART_MAX_D = 20  # ART refits the model d+1 times per gradient step: larger d takes hours


def make_problem(kind: str, d: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    score = x @ rng.normal(size=d) / np.sqrt(d) + 0.2 + 0.5 * rng.normal(size=n)
    if kind == "logistic":
        return x, (score > 0).astype(int), LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-14)
    model = LinearRegression() if kind == "linear" else Ridge(alpha=1.0, solver="cholesky")
    return x, score, model


def relative_error(x_hat: np.ndarray, y_hat: float, x: np.ndarray, y: float) -> float:
    truth = np.append(x, y)
    return float(np.abs(np.append(x_hat, y_hat) - truth).max() / np.abs(truth).max())


def run_art(model, x_minus, y_minus):
    from art.attacks.inference.reconstruction import DatabaseReconstruction
    from art.estimators.classification.scikitlearn import ScikitlearnLogisticRegression

    attack = DatabaseReconstruction(ScikitlearnLogisticRegression(model))
    start = time.perf_counter()
    x_hat, y_hat = attack.reconstruct(x_minus, y_minus)
    return x_hat[0], float(np.argmax(y_hat[0])), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", default="results/glm_closed_form.json")
    parser.add_argument("--no-art", action="store_true", help="skip the ART comparison")
    args = parser.parse_args()
    rows = []
    for kind in ("linear", "ridge", "logistic"):
        for d, n in SIZES:
            x, y, model = make_problem(kind, d, n, seed=d + n)
            model.fit(x, y)
            start = time.perf_counter()
            result = reconstruct_target(model, x[:-1], y[:-1])
            ours_s = time.perf_counter() - start
            row = {
                "model": kind, "d": d, "n": n,
                "closed_form_rel_error": relative_error(result.features[0], result.labels[0], x[-1], y[-1]),
                "closed_form_s": ours_s, "art_rel_error": None, "art_s": None, "art_over_closed_form": None,
            }  # fmt: skip
            if kind == "logistic" and d <= ART_MAX_D and not args.no_art:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    x_art, y_art, art_s = run_art(model, x[:-1], y[:-1])
                row.update(
                    art_rel_error=relative_error(x_art, y_art, x[-1], y[-1]),
                    art_s=art_s,
                    art_over_closed_form=art_s / ours_s,
                )
            rows.append(row)
    print(f"{'model':9} {'d':>4} {'n':>6} {'ours rel.err':>12} {'ours s':>9} ", end="")
    print(f"{'ART rel.err':>11} {'ART s':>8} {'ART/ours':>9}")
    for r in rows:
        art = (
            f"{r['art_rel_error']:11.2e} {r['art_s']:8.2f} {r['art_over_closed_form']:9.0f}"
            if r["art_s"] is not None
            else f"{'n/a':>11} {'n/a':>8} {'n/a':>9}"
        )
        ours = f"{r['closed_form_rel_error']:12.2e} {r['closed_form_s']:9.4f}"
        print(f"{r['model']:9} {r['d']:4d} {r['n']:6d} {ours} {art}")
    worst = max(r["closed_form_rel_error"] for r in rows)
    print(f"max closed-form relative error: {worst:.2e} (bar 1e-6: {'met' if worst <= 1e-6 else 'NOT met'})")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, "max_closed_form_rel_error": worst}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
