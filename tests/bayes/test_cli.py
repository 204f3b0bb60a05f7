"""``bayes-recon`` end to end on the embedded kidiq posterior, and bad input exiting 2 with a message.

The real attack runs once, with a handful of steps on 300 draws (about 20 s, mostly JAX compiling
the objective); the other tests swap ``reconstruct`` for a stand-in (``fake_reconstruct``, in
conftest.py) and check everything around it in milliseconds: arguments, config, progress bar,
table, JSON and saved measure. Bad input, the user's own model and files: test_cli_inputs.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from numpyro.distributions import constraints

from bayes_recon import cli, pipeline
from bayes_recon.cli import main
from bayes_recon.reconstruct import ReconConfig
from recon_core.measure import WeightedMeasure

REPO = Path(__file__).resolve().parents[2]
SHARED_DB = Path("..") / "shared" / "posteriordb" / "posterior_database"  # relative to the repository
TRUE_N = 434  # kidiq has 434 children


def _table_rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The printed table as {(statistic, column): [recovered, true, rel. error]}."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("N (total mass)"):
            rows[("N (total mass)", "")] = line.removeprefix("N (total mass)").split()
        elif line.startswith(("mean ", "var ")):
            statistic, column, *values = line.split()
            rows[(statistic, column)] = values
    return rows


def test_reconstruct_prints_table_and_writes_json_and_measure(tmp_path, capsys, fake_reconstruct):
    out_json, prefix = tmp_path / "out" / "kidiq.json", tmp_path / "measure"
    out_json.parent.mkdir()  # an output's folder must exist: a typo in it is refused before the attack
    argv = ["reconstruct", "--points", "5", "--steps", "3", "--restarts", "1", "--seed", "7"]
    assert main([*argv, "--json", str(out_json), "--save", str(prefix)]) == 0

    (call,) = fake_reconstruct
    assert call.n_points == 5 and call.seed == 7
    assert call.config.steps == 3 and call.config.restarts == 1
    assert call.free == {"mom_iq": (), "kid_score": ()} and call.fixed == {}
    assert set(call.draws) >= {"beta[1]", "beta[2]", "sigma"}

    captured = capsys.readouterr()
    assert "3/3" in captured.err  # the progress bar, on stderr
    rows = _table_rows(captured.out)
    assert set(rows) == {("N (total mass)", ""), ("mean", "mom_iq"), ("var", "mom_iq"),
                         ("mean", "kid_score"), ("var", "kid_score")}  # fmt: skip
    assert rows[("N (total mass)", "")][:2] == ["434", "434"]
    assert rows[("mean", "mom_iq")][1] == "100"  # the true mean IQ of the mothers
    assert "kidiq-kidscore_momiq: 5 weighted points" in captured.out

    summary = json.loads(out_json.read_text())
    assert summary["posterior"] == "kidiq-kidscore_momiq"
    assert (summary["points"], summary["seed"], summary["true_n"]) == (5, 7, TRUE_N)
    assert summary["objective"] == -1.5 and summary["config"]["steps"] == 3
    assert [(r["statistic"], r["column"]) for r in summary["rows"]] == [
        ("N (total mass)", None), ("mean", "mom_iq"), ("var", "mom_iq"), ("mean", "kid_score"),
        ("var", "kid_score"), ("sum", "kid_score"), ("sum", "kid_score·mom_iq"),
        ("sum", "kid_score·kid_score")
    ]  # fmt: skip
    mass = summary["rows"][0]
    assert mass["recovered"] == pytest.approx(TRUE_N) and mass["relative_error"] == pytest.approx(
        0, abs=1e-12
    )
    assert WeightedMeasure.load(prefix).total_mass() == pytest.approx(TRUE_N)


def test_a_failed_self_check_is_said_in_words_and_exits_3(capsys, fake_reconstruct):
    """Exit 3 (not 0, not bad input's 2) when the recovered data do not reproduce the release."""
    assert (
        main(["--quiet", "reconstruct", "--points", "3", "--seed", "13"]) == cli.EXIT_SELF_CHECK_FAILED == 3
    )
    failed = capsys.readouterr().out
    assert "self-check: does NOT reproduce the release" in failed
    assert "next: the numbers above are not to be trusted; rerun with: --points 15" in failed
    assert main(["--quiet", "reconstruct", "--points", "3", "--seed", "1"]) == 0
    passed = capsys.readouterr().out
    assert "self-check: reproduces the release" in passed and "next:" not in passed


def test_a_failed_self_check_names_the_remedies_that_apply():
    """More points always, then a longer last stage if it was capped, more restarts if some ended above
    the best."""
    measure = WeightedMeasure({"y": np.zeros((4, 1))}, np.full(4, 25.0))
    recon = SimpleNamespace(
        measure=measure, config=ReconConfig(steps=150, refine_rounds=4), converged=lambda: False,
        restart_objectives=np.array([-2.0, -1.0]), at_best=lambda: np.array([True, False]), unseen_mass=0.0,
        history={}, passed_over=lambda: 0, remaining_gain=0.0, short_of_optimum=lambda: True,
        stopping_gain=lambda: 0.25,
    )  # fmt: skip
    words = cli.describe_remedies(recon, 4)
    points, steps, restarts = (words.index(f"--{o}") for o in ("points 20", "steps 600", "restarts 4"))
    assert points < steps < restarts
    assert "only 1 of 2 restarts" in words and "about 25 rows" in words
    settled = SimpleNamespace(
        **{
            **vars(recon),
            "converged": lambda: True,
            "short_of_optimum": lambda: False,
            "at_best": lambda: np.array([True, True]),
        }
    )
    assert "--steps" not in cli.describe_remedies(settled, 4) and "--restarts" not in cli.describe_remedies(
        settled, 4
    )
    # Stopped on its own, but the objective still falls along the quadratic model's step: more steps.
    short = SimpleNamespace(**{**vars(settled), "remaining_gain": 1.1, "short_of_optimum": lambda: True})
    assert "--steps 600 (the attack stopped short of the optimum; see convergence)" in cli.describe_remedies(
        short, 4
    )
    assert cli.describe_convergence(short) == (
        "NOT reached: the last stage stopped on its own, but along the step of its quadratic model at the "
        "result the objective still falls by 1.1 of its Monte Carlo error (checked on the objective), more "
        "than the 0.25 its stopping rule asks of 50 steps, so the result may be short of the optimum; rerun "
        "with --steps 600."
    )
    # The Frank–Wolfe rounds stopped by their own rule (a round must gain one error): no option runs
    # them on, so more restarts; a gain under their rule is no shortfall
    rounds = {"refine_converged": np.asarray(True)}
    short_rounds = SimpleNamespace(**{**vars(short), "history": rounds, "stopping_gain": lambda: 1.0})
    assert "the Frank–Wolfe rounds stopped on their own" in cli.describe_convergence(short_rounds)
    assert "more than the 1 a round must gain" in cli.describe_convergence(short_rounds)
    assert cli.describe_convergence(short_rounds).endswith("rerun with --restarts 4.")
    assert cli.describe_remedies(short_rounds, 4).count("--restarts") == 1
    under = SimpleNamespace(**{**vars(short_rounds), "remaining_gain": 0.6})
    assert cli.describe_convergence(under).startswith("the Frank–Wolfe rounds stopped when")
    # Capped, but on mass the release does not see: more steps would only move that mass (stop 34).
    drifting = SimpleNamespace(**{**vars(recon), "unseen_mass": 0.9})
    assert "--steps" not in cli.describe_remedies(drifting, 4)
    assert "--steps" not in cli.describe_convergence(drifting)
    assert "on mass the release does not see" in cli.describe_convergence(drifting)
    # Frank–Wolfe rounds that ran out: more of them, not more steps.
    unfinished = SimpleNamespace(**{**vars(recon), "history": {"refine_converged": np.asarray(False)}})
    assert "--refine-rounds 8" in cli.describe_remedies(unfinished, 4)
    assert "--steps" not in cli.describe_remedies(unfinished, 4)
    assert "all 4 Frank–Wolfe rounds ran" in cli.describe_convergence(unfinished)


def test_rows_add_each_responses_sums_with_every_column_scored_free_of_its_sign():
    """Σ y, Σ y·x and Σ y·y for a response y (a Poisson GLM's Σ y and Σ x·y may be pinned where N is not),
    each error over the truth's Σ |f(x_i)|: Σ y·x with x of both signs has a true value near 0. The
    truth's weights count (rows weighed as units of exposure); a binary y·y is y, left out; a vector
    response's entries each have their sums."""
    truth = WeightedMeasure({"x": np.array([-1.0, 1.0, 2.0]), "y": np.array([1.0, 2.0, 0.0])}, np.ones(3))
    found = WeightedMeasure({"x": np.array([-1.0, 1.5]), "y": np.array([1.0, 2.0])}, np.array([1.0, 0.5]))
    recon, real, free = SimpleNamespace(measure=found), constraints.real, SimpleNamespace(free=("x", "y"))
    attack = pipeline.PosteriorAttack("toy", free, recon, truth, responses={"y": real})
    sums = {r["column"]: r for r in attack.rows() if r["statistic"] == "sum"}
    assert list(sums) == ["y", "y·x", "y·y"]
    assert (sums["y"]["recovered"], sums["y"]["true"], sums["y"]["relative_error"]) == (2.0, 3.0, 1 / 3)
    assert (sums["y·x"]["recovered"], sums["y·x"]["true"]) == (0.5, 1.0)
    assert sums["y·x"]["relative_error"] == pytest.approx(0.5 / 3)  # over |−1| + |2| + |0|, not over |1|
    assert sums["y·y"]["true"] == 5.0
    both = pipeline.PosteriorAttack("toy", free, recon, truth, responses={"x": real, "y": real})
    assert [r["column"] for r in both.rows() if r["statistic"] == "sum"] == ["x", "x·x", "x·y", "y", "y·y"]

    units = WeightedMeasure(truth.points, np.array([2.0, 1.0, 4.0]))  # Σ y·x = −2 + 2 + 0, Σ |y·x| = 4
    weighed = {r["column"]: r for r in pipeline.PosteriorAttack("toy", free, recon, units, responses={
        "y": real}).rows() if r["statistic"] == "sum"}  # fmt: skip
    assert (weighed["y·x"]["true"], weighed["y·x"]["relative_error"]) == (0.0, pytest.approx(0.5 / 4))
    binary = pipeline.PosteriorAttack("toy", free, recon, truth, responses={"y": constraints.boolean})
    assert [r["column"] for r in binary.rows() if r["statistic"] == "sum"] == ["y", "y·x"]

    pairs = WeightedMeasure({"x": np.arange(2.0), "Y": np.array([[1.0, 2.0], [3.0, 4.0]])}, np.ones(2))
    vector = pipeline.PosteriorAttack(
        "toy", SimpleNamespace(free=("x", "Y")), SimpleNamespace(measure=pairs), pairs, responses={"Y": real}
    )
    sums = {r["column"]: r["recovered"] for r in vector.rows() if r["statistic"] == "sum"}
    assert sums == {"Y[0]": 4.0, "Y[0]·x": 3.0, "Y[0]·Y[0]": 10.0, "Y[0]·Y[1]": 14.0, "Y[1]": 6.0,
                    "Y[1]·x": 4.0, "Y[1]·Y[1]": 20.0}  # fmt: skip


def test_quiet_draws_no_progress_bar(capsys, fake_reconstruct):
    assert main(["--quiet", "reconstruct", "--points", "3"]) == 0
    assert capsys.readouterr().err == ""


def test_rows_without_truth_leave_the_comparison_empty(stand_in_self_check):
    measure = WeightedMeasure({"x": np.arange(6.0).reshape(3, 2)}, np.ones(3))
    entry = SimpleNamespace(free=("x",))
    recon = SimpleNamespace(
        measure=measure, objective=float("nan"), seconds=1.0, compile_seconds=0.5,
        config=pipeline.ReconConfig(), self_check=stand_in_self_check(True), restart_spread=dict,
        bootstrap_spread=lambda: None, standard_errors={"total_mass": 0.01}, shortfall={"total_mass": 0.0},
        remaining_gain=0.0, unseen_mass=0.0, converged=lambda: True,
    )  # fmt: skip
    attack = pipeline.PosteriorAttack("toy", entry, recon, truth=None)
    rows = attack.rows()
    assert [r["column"] for r in rows] == [None, "x[0]", "x[1]", "x[0]", "x[1]"]
    assert all(r["true"] is None and r["relative_error"] is None for r in rows)
    summary = attack.to_json()
    assert summary["objective"] is None and json.dumps(summary)  # NaN becomes null: valid JSON


def test_list_shows_registered_present_and_out_of_scope(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    momiq = next(line for line in out.splitlines() if "kidiq-kidscore_momiq" in line)
    earnings = next(line for line in out.splitlines() if "earnings-earn_height" in line)
    assert "in database" in momiq and "not in database" in earnings
    assert "eight_schools-eight_schools_noncentered" in out and "latent" in out


def test_python_dash_m_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "bayes_recon", "list"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "kidiq-kidscore_momiq" in result.stdout


def test_real_attack_on_embedded_kidiq(tmp_path, capsys):
    out_json, prefix = tmp_path / "kidiq.json", tmp_path / "measure"
    argv = [
        "--quiet",
        "reconstruct",
        "--points",
        "10",
        "--steps",
        "5",
        "--restarts",
        "1",
        "--max-draws",
        "300",
    ]
    assert main([*argv, "--json", str(out_json), "--save", str(prefix), "--check-errors"]) == 0
    out = capsys.readouterr().out
    assert "model-induced kernel" in out and "\nerror check: a tilt of the objective worth one" in out
    rows = _table_rows(out)
    assert rows[("N (total mass)", "")][1] == "434"
    assert {("mean", "mom_iq"), ("var", "kid_score")} <= set(rows)

    summary = json.loads(out_json.read_text())
    assert (summary["points"], summary["true_n"], summary["config"]["restarts"]) == (10, TRUE_N, 1)
    assert np.isfinite(summary["objective"]) and summary["seconds"] > 0
    assert 0 < summary["relative_mmd_model_kernel"] < 1  # 300 draws, 5 steps: a rough reconstruction
    # a Gaussian model: the check one error out finds the errors about right where it can tell
    moves, tilted = summary["error_moves"], summary["tilted_standard_errors"]
    assert set(moves) == set(tilted) == set(summary["standard_errors"])
    assert all(m == "unchecked" or 0.5 < m < 1.5 for m in moves.values())
    by_name = {(r["statistic"], r["column"]): r for r in summary["rows"]}
    # 300 draws and 5 steps after the cloud stage: N and the means within a few per cent.
    assert by_name[("N (total mass)", None)]["relative_error"] < 0.05
    assert by_name[("mean", "mom_iq")]["relative_error"] < 0.05
    assert by_name[("mean", "kid_score")]["relative_error"] < 0.05
    measure = WeightedMeasure.load(prefix)
    assert len(measure) == 10 and measure.total_mass() == pytest.approx(
        by_name[("N (total mass)", None)]["recovered"]
    )


def test_restarts_that_reach_one_objective_with_different_statistics_are_called_loose():
    class Restarts:  # the things describe_restarts reads from a Reconstruction
        restart_objectives = np.array([-2.0, -2.0, -1.0])
        measure = WeightedMeasure({"X": np.zeros((4, 2)), "y": np.zeros(4)}, np.ones(4))

        def __init__(self, spread: dict[str, float], beyond: int = 0, added: int = 0) -> None:
            self.spread, self.beyond, self.added = spread, beyond, added

        def at_best(self) -> np.ndarray:
            return np.array([True, True, False])

        def rescued(self) -> int:
            return self.added

        def passed_over(self) -> int:
            return self.beyond

        def restart_spread(self) -> dict[str, float]:
            return self.spread

    tight = {"total_mass": 0.001, "mean[0]": 0.002, "sd[0]": 0.0, "mean[2]": 0.01}
    assert "agree on N and every column's mean and sd (largest spread 1.00%)" in cli.describe_restarts(
        Restarts(tight)
    )
    loose = cli.describe_restarts(Restarts({**tight, "total_mass": 0.4, "sd[1]": 0.2}))
    differ = "2 of 3 reached the best objective but differ on N by 40\u00a0%, the sd of X[1] by 20\u00a0%"
    assert differ in loose
    assert "only loosely" in loose
    rescued = cli.describe_restarts(Restarts(tight, added=2))
    assert "2 of 3 (2 added: the best of the first 1 and its repair failed the self-check) reached" in rescued
    walled = cli.describe_restarts(Restarts(tight, beyond=1))
    assert (
        "2 of 3 reached the best objective, and 1 was passed over for ending on points that carry" in walled
    )


def test_standard_errors_that_reach_a_quarter_say_the_release_does_not_determine_the_statistic():
    class Result:  # what describe_determined and describe_bootstrap read from a Reconstruction
        measure = WeightedMeasure({"X": np.zeros((4, 2)), "y": np.zeros(4)}, np.ones(4))
        config = pipeline.ReconConfig()

        def __init__(
            self,
            errors: dict[str, float],
            unseen_mass: float = 0.0,
            settled: bool | None = True,
            shortfall: dict[str, float] | None = None,
        ) -> None:
            self.standard_errors, self.unseen_mass, self.settled = errors, unseen_mass, settled
            self.history: dict = {}
            self.shortfall = {**dict.fromkeys(errors, 0.0), **(shortfall or {})}
            self.error_moves = {k: 21.0 if k == "total_mass" else math.nan for k in errors}
            self.tilted_standard_errors = {**errors, "total_mass": errors["total_mass"] * 21}
            self.bootstrap = {"objective": np.array([-2.0, -2.1])}

        def converged(self) -> bool | None:
            return self.settled

        def short_of_optimum(self) -> bool | None:
            return None if self.settled is None else not self.settled

        def bootstrap_spread(self) -> dict[str, float]:
            return self.standard_errors

    tight = {"total_mass": 0.03, "mean[0]": 0.05, "sd[0]": 0.02, "mean[2]": 0.01, "cov[0,2]": 0.1}
    said = cli.describe_determined(Result(tight))
    assert (
        "by about one standard error: N by 3\u00a0%, the means by at most 0.05 sd, the sds by at most "
        "2\u00a0%, the covariances by at most 0.1 (in correlation)" in said
    )
    assert "determines them about that tightly" in said
    # Two standard errors of a quarter (0.125 each) are where the release stops determining a statistic.
    edge = cli.describe_determined(Result({**tight, "mean[0]": 0.125}))
    assert "the mean of X[0] by 0.12 sd: the release does NOT determine these" in edge
    loose = cli.describe_determined(Result({**tight, "total_mass": 1.6, "mean[2]": 3.9, "cov[0,2]": 0.4}))
    assert "N by 160\u00a0%, the mean of y by 3.9 sd, the covariance of X[0] and y by 0.4 (in " in loose
    assert "correlation): the release does NOT determine these" in loose
    unbounded = cli.describe_determined(Result({**tight, "total_mass": float("inf")}))
    assert "one standard error: N by an unbounded amount: the release does NOT determine these" in unbounded
    assert "N is NOT" not in said
    unseen = cli.describe_determined(Result(tight, unseen_mass=0.8))  # mass the release cannot see
    assert unseen.startswith(
        "N is NOT determined: 80\u00a0% of the recovered mass sits where the likelihood barely changes"
    )
    assert "so its weight could be almost anything. Other draws of the same posterior" in unseen
    assert "short of the optimum" not in said
    short = cli.describe_determined(Result(tight, settled=False))  # at the step cap: may understate
    assert short.startswith("the attack stopped short of the optimum (see convergence), so these may")
    # stopped before the cap, but short of the optimum by more than N's error (and less than the mean's):
    # the release still determines them; the distance still to go is the optimiser's, and named
    short_of_it = cli.describe_determined(Result(tight, shortfall={"total_mass": 0.13, "mean[0]": 0.04}))
    assert (
        "the release determines them about that tightly. The attack stopped short of the optimum"
        in short_of_it
    )
    assert short_of_it.endswith(
        "these errors describe: reaching it, along the step of the objective's quadratic model at the result "
        "as far as the objective confirms it, would move N by 13\u00a0%, each more than one error. That is "
        "the optimiser's error, not the release's (shortfall in the JSON); rerun with --steps 600."
    )
    # where the line already opens by saying the attack stopped short, the sentence does not say it again
    capped = cli.describe_determined(Result(tight, settled=False, shortfall={"total_mass": 0.13}))
    assert capped.count("stopped short") == 1 and " Reaching it, along the step" in capped
    # with minibatches of draws Adam ends wherever their noise leaves it: larger ones close it too
    noisy = cli.describe_determined(Result(tight, settled=None, shortfall={"total_mass": 0.13}))
    assert noisy.endswith("rerun with --steps 600 or a larger --batch-size.")
    # judged against the errors the line prints: widened by the tilt check (N's to 63 %), none is beyond
    assert "stopped short" not in cli.describe_determined(
        Result(tight, shortfall={"total_mass": 0.13}), tilted=True
    )
    # checked one error out (--check-errors): N's error is as far as a one-error tilt moved it
    tilted = cli.describe_determined(Result(tight), tilted=True)
    assert "(widened where a tilt worth one error moved a statistic further; see error check)" in tilted
    assert "N by 63\u00a0%" in tilted and "the release does NOT determine these" in tilted
    check = cli.describe_error_check(Result(tight))
    assert check.startswith("a tilt of the objective worth one standard error moved N 21 errors: the")
    # moments outside what a polynomial likelihood sees: named first, whatever their errors, and left out
    # of the errors' words; all of them outside, the line says that alone
    outside = cli.describe_determined(Result(tight), outside=["mean[0]", "cov[0,2]"])
    assert outside.startswith(
        "The likelihood sees the data only through sums that leave the mean of X[0] and the covariance of "
        "X[0] and y open (see the check command): the release does NOT determine these at all, whatever the "
        "draws. Other draws of the same posterior"
    )
    assert "the means by at most 0.01 sd" in outside and "determines them about that tightly." in outside
    everything = cli.describe_determined(Result(tight), outside=list(tight))
    assert everything.endswith("whatever the draws.") and "Other draws" not in everything
    assert "; 4 of 5 could not be checked (a tilted run stopped at its 200 steps short of one" in check
    # moves of a hair above one (kidiq's 1.00-1.02) are the quadratic model holding, not an alarm
    holding = Result(tight)
    holding.error_moves = dict.fromkeys(tight, 1.02)
    assert cli.describe_error_check(holding).startswith(
        "a tilt of the objective worth one standard error moved no statistic further than 1.5 errors"
    )
    assert cli.describe_bootstrap(Result(tight)).startswith("the attack run again on 2 resamples")
    assert "did not finish" in cli.describe_bootstrap(Result({"total_mass": float("inf")}))
