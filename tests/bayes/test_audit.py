"""The audit end to end on the embedded kidiq posterior (a short attack), its report and its pieces.

One real audit runs per module (a few steps on 300 draws, then 100 draws for the curve); the
HTML it writes is opened in headless Chromium, which must decode every embedded plot.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from bayes_recon.audit import ATTACK_CHECKPOINT, AuditConfig, audit_posterior, leakage_rows
from bayes_recon.cli import main
from bayes_recon.identifiability import Statistic, Variable, feature_setup
from bayes_recon.mitigation import Perturbation, noisy_statistics, remaining_leakage
from bayes_recon.models import lookup
from bayes_recon.pipeline import load_problem
from bayes_recon.reconstruct import ReconConfig
from bayes_recon.report import render, write_report
from bayes_recon.stages import LAST_STAGE_STRETCH
from recon_core.measure import WeightedMeasure

NAME = "kidiq-kidscore_momiq"
SHORT = ReconConfig(coarse_steps=5, steps=5, restarts=1, max_draws=300, rescue_restarts=0, refine_rounds=0)


@pytest.fixture(scope="module")
def audit():
    return audit_posterior(NAME, config=AuditConfig(draw_counts=(100,), recon=SHORT, n_points=10))


def test_rows_score_every_identifiable_statistic_against_the_data(audit):
    truth = load_problem(NAME).truth
    iq, score = truth.column("mom_iq"), truth.column("kid_score")
    true = {r["statistic"]: r["true"] for r in audit.rows}
    assert true["N"] == 434
    assert true["Σ mom_iq·kid_score"] == pytest.approx(np.sum(iq * score))
    assert true["Σ kid_score²"] == pytest.approx(np.sum(score**2))
    for row in audit.rows:
        assert row["verdict"] == audit.config.verdict(row["error"])
    assert [(p.draws, p.method) for p in audit.curve] == [(100, "oracle"), (300, "attack")]


def test_leakage_rows_error_is_scale_free_and_verdicts_follow_thresholds():
    x = Variable("x", None, False, False)
    total, first = Statistic((x,), (((0,), 1.0),)), Statistic((x,), (((1,), 1.0),))
    truth = WeightedMeasure.empirical({"x": np.array([-1.0, 1.0, 2.0])})  # Σ x = 2, Σ |x| = 4
    guess = WeightedMeasure({"x": np.array([1.0])}, np.array([3.3]))  # N 3.3, Σ x 3.3
    recovered = [total.of(guess), first.of(guess)]
    rows = leakage_rows((total, first), truth, recovered, AuditConfig(recovered_below=0.2, partly_below=0.5))
    assert rows[0]["error"] == pytest.approx(0.3 / 3) and rows[0]["verdict"] == "recovered"
    assert rows[1]["error"] == pytest.approx(1.3 / 4) and rows[1]["verdict"] == "partly"


def test_report_plots_render_in_headless_chromium(audit, tmp_path, chromium_images):
    page = write_report(audit, tmp_path / "audit.html")
    assert page.stat().st_size < 5_000_000
    sizes, dom = chromium_images(page)
    assert len(sizes) == 2  # the draws curve and the convergence panels
    assert all(complete and width > 100 and height > 100 for complete, width, height in sizes)
    assert "Σ mom_iq·kid_score" in dom


def test_report_opens_with_the_verdict(audit, verdict_first):
    html = render(audit)
    verdict_first(html)
    verdict = html[: html.index("</section>")]
    assert "What the draws reveal" in verdict and "How sure the audit is" in verdict
    assert "Release fewer draws: with the first 100 draws" in verdict  # the audit's own curve


def test_verdict_fits_the_first_screen(audit, tmp_path, chromium_layout):
    bottom, screenshot = chromium_layout(write_report(audit, tmp_path / "audit.html"))
    assert 0 < bottom <= 800 and screenshot.stat().st_size > 10_000


def test_json_holds_the_reports_numbers(audit):
    data = audit.to_json()
    assert data["statistics"] == json.loads(json.dumps(data["statistics"]))
    assert [r["statistic"] for r in data["statistics"]] == audit.check.identifiability.names
    history = data["history"]
    last = LAST_STAGE_STRETCH * SHORT.steps  # L-BFGS past SHORT.steps while it gains what the draws tell
    assert history["stage_steps"][1:] == [SHORT.coarse_steps, SHORT.coarse_steps, last]
    assert len(history["total_mass"]) == sum(history["stage_steps"]) == len(history["var"]["kid_score"])
    assert set(history["mean"]) == {"mom_iq", "kid_score"}
    assert data["identifiable"]["matches_sufficient_statistics"] is True


def test_json_holds_the_draws_files_leaks(audit):
    """The CLI puts what the draws file gives away (bayes_recon.leaks) into the audit, for the report."""
    leak = {"group": "log_likelihood", "variable": "y", "shape": [4000, 434], "reveals": "log p(x_i|θ)",
            "severity": "high", "rows_recovered": 434, "max_error": 1e-12}  # fmt: skip
    assert audit.to_json()["file_leaks"] == []
    assert dataclasses.replace(audit, file_leaks=[leak]).to_json()["file_leaks"] == [leak]


def test_noise_is_split_evenly_over_the_statistics_in_units_of_one_record():
    problem = load_problem(NAME)
    spec = lookup(NAME).linear
    # 7 entries: N, XᵀX's upper triangle (3), Xᵀy (2), yᵀy; one record moves each by at most its bound
    assert Perturbation(2.0).noise_scale(7) == pytest.approx(7 / 2.0)
    noisy = [noisy_statistics(spec, problem.truth, Perturbation(2.0, seed=s))[0]["N"] for s in range(200)]
    # N's bound is 1: Laplace(3.5) noise (std 3.5·√2), clipped below at one record
    assert np.std(noisy) == pytest.approx(3.5 * np.sqrt(2), rel=0.2)
    assert abs(np.mean(noisy) - 434) < 1.5


def test_noisy_statistics_leak_less_as_epsilon_shrinks():
    problem = load_problem(NAME)
    entry = problem.entry
    setup = feature_setup(entry.model, problem.draws, problem.free, problem.fixed, entry.support, 1000)
    loose, tight = (
        remaining_leakage(
            setup, entry.linear, problem.truth, Perturbation(epsilon)
        )  # 1000 draws, as the setup
        for epsilon in (1e6, 1e-2)
    )
    # almost no noise: the same posterior (its mean within a fraction of a posterior sd), all recovered
    assert max(loose["errors"].values()) < 0.1 and loose["posterior_mean_shift_sd"] < 0.5
    assert loose["errors"]["XtX"] < tight["errors"]["XtX"] and tight["noisy_statistic_errors"]["N"] > 0.1
    assert tight["posterior_mean_shift_sd"] > 1


def test_audit_command_writes_report_and_json(tmp_path, capsys, monkeypatch, audit):
    import bayes_recon.audit as module

    monkeypatch.setattr(module, "audit_posterior", lambda *args, **kwargs: audit)
    argv = ["--quiet", "audit", "--report", str(tmp_path / "a.html"), "--json", str(tmp_path / "a.json")]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("VERDICT: ") and out.index("not for publication") < out.index("Σ mom_iq²")
    assert "Σ mom_iq²" in out and "Leakage against the number of draws" in out
    assert json.loads((tmp_path / "a.json").read_text())["posterior"] == NAME
    assert (tmp_path / "a.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["audit", "--draw-counts", "0"], "draw counts must be at least 1"),
        (["audit", "--epsilon", "-1"], "epsilon must be a positive number"),
        (["audit", "--points", "0"], "at least 1"),
        (["audit", "--posterior", "nope"], "no registered model"),
    ],
)
def test_audit_bad_input_exits_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("bayes-recon: error: ") and message in err and "Traceback" not in err


def test_report_file_is_self_contained(audit, tmp_path):
    text = write_report(audit, Path(tmp_path) / "r.html").read_text()
    assert text.count("data:image/png;base64,") == 2 and "<script" not in text and "src='http" not in text


POISSON = """
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(x, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(a + b * x)), obs=y)
"""


@pytest.mark.slow  # 50 s; moment_statistics and the verdict's words for it are tested without an attack
def test_a_glm_is_audited_on_n_and_the_columns_moments(tmp_path, capsys):
    """A Poisson regression's features are not polynomials: no finite list of statistics holds what its
    draws reveal, so the audit scores the attack on N and the sums of x, y and their products, and says
    that the release may reveal more. A short attack: the numbers are not the point, their names are."""
    import jax
    from numpyro.infer import MCMC, NUTS

    (tmp_path / "poisson.py").write_text(POISSON)
    namespace: dict = {}
    exec(POISSON, namespace)
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 0.5, 60)
    y = rng.poisson(np.exp(0.3 + 0.8 * x))
    rows = "".join(f"{a:.17g},{b}\n" for a, b in zip(x, y, strict=True))
    (tmp_path / "data.csv").write_text("x,y\n" + rows)
    mcmc = MCMC(NUTS(namespace["model"]), num_warmup=200, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x=x, y=y)
    np.savez(tmp_path / "draws.npz", **{k: np.asarray(v) for k, v in mcmc.get_samples().items()})
    argv = ["--quiet", "audit", "--model", f"{tmp_path}/poisson.py:model", "--draws", f"{tmp_path}/draws.npz",
            "--free", "x,y", "--data", f"{tmp_path}/data.csv", "--points", "10", "--restarts", "1", "--steps",
            "5", "--rescue-restarts", "0", "--refine-rounds", "0", "--bootstrap", "0",
            "--draw-counts", "300",  # no smaller release
            "--json", f"{tmp_path}/audit.json"]  # fmt: skip
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.index("VERDICT: ") < out.index("Unknown beyond the moments scored")
    saved = json.loads((tmp_path / "audit.json").read_text())
    assert saved["scored_on"].startswith("moments")
    scored = {r["statistic"]: r for r in saved["statistics"]}
    assert list(scored) == ["N", "Σ x", "Σ y", "Σ x²", "Σ x·y", "Σ y²"]
    assert scored["N"]["true"] == 60 and scored["Σ x·y"]["true"] == pytest.approx(float(x @ y))
    verdict = AuditConfig().verdict
    assert all(np.isfinite(r["error"]) and r["verdict"] == verdict(r["error"]) for r in scored.values())


class Stopped(Exception):
    """Stands in for the audit being killed after its attack's first round."""


@pytest.mark.slow  # 36 s; the attack's own resume is in test_resume.py, in the default run
def test_an_interrupted_audit_resumes_its_attack_from_the_checkpoint(tmp_path):
    from bayes_recon import checkpoint

    recon = dataclasses.replace(SHORT, restarts=3, restarts_at_once=1, rounds_at_once=2)
    config = AuditConfig(draw_counts=(), recon=recon, n_points=10)
    folder = tmp_path / "audit.ckpt"

    def stop_after_first_round(done: int, total: int) -> None:
        if done == 1:
            raise Stopped

    with pytest.raises(Stopped):
        audit_posterior(NAME, config=config, progress=stop_after_first_round, checkpoint=folder)
    kept = list((folder / "draws-all").glob("round-*.npz"))  # the round running beside the first too
    assert len(kept) == 2
    reported: list[int] = []
    audit_posterior(
        NAME, config=config, progress=lambda done, total: reported.append(done), checkpoint=folder
    )
    # the kept rounds were read back, then the third ran; the end (the check's place) is reported last
    assert reported == [2, 3, 3]
    checkpoint.remove(folder)  # without the pattern, the attacks' subfolders are left alone
    assert all(path.is_file() for path in kept)
    checkpoint.remove(folder, ATTACK_CHECKPOINT)
    assert not folder.exists()
