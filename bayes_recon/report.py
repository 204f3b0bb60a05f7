"""One self-contained HTML page for an :class:`bayes_recon.audit.Audit`: tables and PNG plots inline.

The page needs no network: the plots are base64 data URIs drawn with matplotlib (Agg), the style
is inline. It opens with the verdict (:mod:`bayes_recon.verdict`: may the draws be published?), then
shows the model and the release, the identifiable statistics (or, where the features are not polynomials,
what the release sees and what the attack is scored on), the recovered-vs-true
table with verdicts, leakage against the number of draws, the convergence of the attack (total
mass, weighted means and variances per step, the true value as a dashed line) and the mitigation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bayes_recon.audit import Audit
from bayes_recon.identifiability import Identifiability
from bayes_recon.verdict import findings, headline
from recon_core.htmlpage import Cell, escape, figure_image, page, table, write


def write_report(audit: Audit, path: str | Path) -> Path:
    return write(render(audit), path)


def render(audit: Audit) -> str:
    """The whole page as a string."""
    data = audit.to_json()
    release, config = data["release"], audit.config
    check = audit.check.identifiability
    sections = [
        "<h2>Model and release</h2>",
        table(
            ("", ""),
            [
                ("posterior", audit.name),
                ("database", data["database"]),
                ("posterior draws released", release["draws"]),
                ("parameters", release["parameters"]),
                ("data columns reconstructed", ", ".join(release["free_columns"])),
                ("columns known to the adversary", ", ".join(release["known_columns"]) or "none"),
                ("data points (true N)", f"{release['data_points']:g}"),
                ("pseudo-data points in the attack", config.n_points),
                ("audit time", f"{audit.seconds:.1f} s"),
            ],
        ),
        "<h2>What the release can reveal</h2>",
        *(_identifiable(check) if check.polynomial else _not_polynomial(check)),
    ]
    if check.aliases:
        sections.append(
            f"<p class='note'>Equal on the support, counted once: {escape('; '.join(check.aliases))}</p>"
        )
    if audit.check.exact is not None:
        verdict = "exactly" if audit.check.exact else "not"
        sections.append(
            f"<p>These are {verdict} the sufficient statistics N, XᵀX, Xᵀy, yᵀy of the model.</p>"
        )
    sections += [
        "<h2>What the attack recovered</h2>",
        f"<p>Error = |recovered − true| / Σ<sub>i</sub> |f(x<sub>i</sub>)| (the relative error when f keeps "
        f"one sign). Verdict: <b>recovered</b> below {config.recovered_below:g}, <b>partly</b> below "
        f"{config.partly_below:g}, else <b>not</b>. MMD between the true and the reconstructed data under "
        f"the model kernel, relative to the truth's norm: {audit.curve[-1].relative_mmd:.3g} "
        "(0: the release cannot tell them apart).</p>",
        table(
            ("statistic", "true", "recovered", "error", "verdict"),
            [
                (
                    r["statistic"],
                    f"{r['true']:.6g}",
                    f"{r['recovered']:.6g}",
                    f"{r['error']:.3g}",
                    Cell(r["verdict"], r["verdict"]),
                )
                for r in audit.rows
            ],
        ),
    ]
    if audit.oracle_errors is not None:
        errors = ", ".join(f"{k} {v:.3g}" for k, v in audit.oracle_errors.items())
        sections.append(
            f"<p class='note'>The attack's exact optimum on these draws (the oracle) is off the truth by: "
            f"{escape(errors)} (scale-free); that gap is the draws' Monte Carlo error.</p>"
        )
    sections += [
        "<h2>Leakage against the number of draws released</h2>",
        "<p class='note'>The first n draws as the release. <i>attack</i>: the reconstruction itself; "
        "<i>oracle</i>: its exact optimum for a Gaussian linear model, which a converged attack "
        "reaches (the verdict at the top says whether this one did).</p>",
        figure_image(_draws_figure(audit), "error of each statistic against the number of draws"),
        table(
            ("draws", "scored by", "relative MMD", "recovered", "partly", "not", "largest error"),
            [
                (
                    p.draws,
                    p.method,
                    f"{p.relative_mmd:.3g}",
                    *(sum(r["verdict"] == v for r in p.rows) for v in ("recovered", "partly", "not")),
                    f"{max(r['error'] for r in p.rows):.3g}",
                )
                for p in audit.curve
            ],
        ),
        "<h2>Convergence of the attack</h2>",
        "<p class='note'>The kept restart, step by step; dotted lines separate the stages (cloud shape, "
        "cloud with mass, every point and weight); the dashed line is the true value.</p>",
        figure_image(
            _convergence_figure(audit, data["history"]), "convergence of the total mass, means and variances"
        ),
    ]
    if audit.mitigation:
        sections += ["<h2>Mitigation: posterior from noisy sufficient statistics</h2>", _mitigation(audit)]
    return page(f"Leakage audit: {audit.name}", headline(findings(audit)), sections)


def _identifiable(check: Identifiability) -> list[str]:
    return [
        f"<p>From the model and its draws alone (no data): the posterior depends on the data only through "
        f"these {check.rank} statistics (its features are polynomials of degree {check.degree} in "
        f"{escape(', '.join(v.label for v in check.variables))}). Data sets that agree on them give the same "
        "posterior; nothing else about the data (single rows, higher moments) is in the release.</p>",
        "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in check.names) + "</ul>",
    ]


def _not_polynomial(check: Identifiability) -> list[str]:
    linear = (
        f" The responses enter the likelihood linearly through {escape(', '.join(check.linear_in_response))} "
        "(a canonical link). At the posterior's mode each equals its expected value under the model (up to "
        "the prior's pull), a sum over the covariates' rows, so the release determines these sums only as "
        "tightly as the covariates' distribution (a Poisson regression with an intercept ties them to the "
        "Fisher information, which the draws' spread pins; a logistic one does not)."
        if check.linear_in_response
        else ""
    )
    return [
        "<p>From the model and its draws alone (no data): its features are not polynomials of degree "
        f"≤ {check.degree} in {escape(', '.join(v.label for v in check.variables))} (a link function or a "
        "mixture), so no finite list of statistics holds all the release reveals. The model-induced kernel "
        f"has effective rank {check.kernel_effective_rank:.1f} at the draws: the release sees about that "
        f"many independent directions of the data.{linear} The attack below is scored on N and the "
        "columns' first and second moments, which the release need not pin down: their standard errors "
        "(under How sure the audit is, above) say how tightly it does.</p>"
    ]


def _mitigation(audit: Audit) -> str:
    def errors(values: dict[str, float]) -> list[Cell]:
        return [Cell(f"{v:.3g}", audit.config.verdict(v)) for v in values.values()]

    rows = [("no noise (the release audited above)", "", *errors(audit.oracle_errors or {}), "0")]
    for m in audit.mitigation:
        mechanism = m["mechanism"] + ("" if m["delta"] is None else f", δ = {m['delta']:g}")
        rows.append(
            (
                f"ε = {m['epsilon']:g} ({mechanism})",
                f"{m['noise_scale']:.3g}",
                *errors(m["errors"]),
                f"{m['posterior_mean_shift_sd']:.3g}",
            )
        )
    note = (
        "<p>Sufficient-statistic perturbation: the data's N, XᵀX, Xᵀy, yᵀy, clipped to the range of each "
        "design column, get noise on each entry in proportion to one record's bound on it (noise scale in "
        "those units); the posterior is sampled from the noisy statistics (as many draws as the audited "
        "release) and attacked by the exact optimum (oracle). Scale-free errors of what the attacker "
        "recovers (larger = less leakage), and what the noise costs the posterior's user: the largest "
        "shift of a parameter's posterior mean, in posterior standard deviations; each error is coloured "
        "by the verdict it would get in the table above. The clipping bounds here are the data's own "
        "range, as if public: choose them without the data for a real release.</p>"
    )
    header = ("release", "noise scale", "N", "XᵀX", "Xᵀy", "yᵀy", "posterior mean shift (sd)")
    return note + table(header, rows)


def _draws_figure(audit: Audit) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    draws = [p.draws for p in audit.curve]
    for i, name in enumerate(r["statistic"] for r in audit.rows):
        axis.plot(draws, [max(p.rows[i]["error"], 1e-12) for p in audit.curve], marker="o", label=name)
    axis.plot(draws, [p.relative_mmd for p in audit.curve], "k--", marker="s", label="relative MMD")
    axis.axhline(audit.config.recovered_below, color="grey", linewidth=0.8)
    axis.set(xscale="log", yscale="log", xlabel="posterior draws released", ylabel="error (scale-free)")
    axis.legend(fontsize=7, ncol=2)
    return figure


def _convergence_figure(audit: Audit, history: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    truth = audit.truth
    true_mean = np.concatenate([np.ravel(truth.mean(n)) for n in audit.attack.entry.free])
    true_var = np.concatenate([np.ravel(truth.var(n)) for n in audit.attack.entry.free])
    panels = [("sum of weights", history["total_mass"], truth.total_mass())]
    for i, label in enumerate(history["mean"]):
        panels.append((f"mean {label}", history["mean"][label], true_mean[i]))
        panels.append((f"variance {label}", history["var"][label], true_var[i]))
    columns = 3
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.6 * rows), squeeze=False)
    boundaries = np.cumsum(history["stage_steps"])[:-1]
    for axis, (title, values, true) in zip(axes.flat, panels, strict=False):
        axis.plot(np.arange(1, len(values) + 1), values, color="C0")
        axis.axhline(true, color="C3", linestyle="--", label="true")
        for b in boundaries:
            axis.axvline(b + 0.5, color="grey", linestyle=":", linewidth=0.8)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
    for axis in axes.flat[len(panels) :]:
        axis.set_visible(False)
    figure.tight_layout()
    return figure
