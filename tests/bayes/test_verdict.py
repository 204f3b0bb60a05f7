"""The audit's verdict in words, from synthetic results (no attack is run)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bayes_recon.audit import AuditConfig
from bayes_recon.identifiability import Statistic, Variable
from bayes_recon.verdict import (
    Findings,
    NoisyRelease,
    Quantity,
    SmallerRelease,
    counted,
    describe,
    headline,
    quantities,
)
from recon_core.measure import WeightedMeasure

COLUMNS = ("mom_iq", "kid_score")


def kidiq_like(error: float) -> Findings:
    """N and both columns' means, variances and covariance, all off by ``error``; the attack checks out."""
    moments = [Quantity("count", (), error)]
    moments += [Quantity(kind, (c,), error) for kind in ("mean", "variance") for c in COLUMNS]
    moments.append(Quantity("covariance", COLUMNS, error))
    return Findings(
        rows=434,
        columns=COLUMNS,
        statistics=6,
        quantities=tuple(moments),
        recovered_below=0.05,
        partly_below=0.5,
        reproduces=True,
        self_check="The pseudo-data's posterior reproduces the release.",
        restarts=2,
        restarts_agreeing=2,
        restart_spread=1e-7,
        standard_error=0.02,
        shortfall=0.0,
        smaller=(SmallerRelease(100, 0, 6, 0.18),),
        whole=SmallerRelease(4000, 6 if error < 0.05 else 0, 6, error),
        noisy=(NoisyRelease(1.0, "laplace", 0.86, 0, 236.0), NoisyRelease(10.0, "laplace", 0.0092, 4, 9.4)),
    )


def test_recovered_release_says_what_leaks_and_what_to_do():
    found = headline(kidiq_like(0.012))
    assert found.severity == "recovered"
    assert found.answer == (
        "Not as it is: publishing these draws publishes N (the number of rows) and the means, variances and "
        "covariance of mom_iq and kid_score."
    )
    points = dict(found.points)
    assert list(points) == ["What the draws reveal", "What they do not reveal", "How sure the audit is",
                            "What to do"]  # fmt: skip
    assert points["What the draws reveal"][0].endswith("(largest error 1.2\u00a0%, on N).")
    assert points["What they do not reveal"][0].startswith("No single row: any data set with the same 6")
    assert "self-check passes" in points["How sure the audit is"][0]
    assert "largest spread under 0.01\u00a0%" in points["How sure the audit is"][1]
    fewer, noise, coarsen = points["What to do"]
    assert (
        "with the first 100 draws, 0 of 6 statistics are still recovered (largest error 18\u00a0%)" in fewer
    )
    assert "at ε = 1 the attacker still recovers 0 of the 4" in noise and "moves by 236 sd" in noise
    assert "round or bin mom_iq and kid_score" in coarsen


def test_partly_and_not_recovered():
    partly = headline(kidiq_like(0.2))
    assert partly.severity == "partly" and partly.answer.startswith(
        "With care: the draws reveal N (the number"
    )
    assert dict(partly.points)["What the draws reveal"][0].startswith("Roughly: N")
    nothing = headline(kidiq_like(0.9))
    assert nothing.severity == "not"
    assert (
        nothing.answer
        == "As far as this attack can tell, yes: it recovered none of the 6 statistics the draws depend on."
    )
    assert dict(nothing.points)["What to do"] == ("Nothing by this audit's measure.",)


def test_failed_self_check_makes_the_verdict_unsure():
    failed = dataclasses.replace(
        kidiq_like(0.9),
        reproduces=False,
        self_check="The pseudo-data's posterior does NOT reproduce the release.",
    )
    found = headline(failed)
    assert found.severity == "unsure" and found.answer.startswith("Not sure: the attack's self-check failed")
    points = dict(found.points)
    assert points["How sure the audit is"][0].startswith("Not sure. The pseudo-data's posterior does NOT")
    assert "may still leak" in points["What they do not reveal"][0]
    # what was recovered is measured against the truth: a failed self-check does not soften it
    assert (
        headline(dataclasses.replace(failed, quantities=kidiq_like(0.01).quantities)).severity == "recovered"
    )


def test_file_leaks_come_first():
    leak = {"group": "observed_data", "variable": "kid_score", "shape": [434], "reveals": "every value",
            "rows_recovered": 434, "max_error": 0.0}  # fmt: skip
    found = headline(dataclasses.replace(kidiq_like(0.012), file_leaks=(leak,)))
    assert found.severity == "recovered"
    assert found.answer.startswith("No: the released file itself contains the data")
    label, (sentence,) = found.points[0]
    assert label == "The file itself" and sentence.startswith(
        "The file itself contains the data: observed_data/"
    )
    assert "bayes-recon strip IN OUT" in sentence
    assert dict(found.points)["What to do"][0].startswith("Remove the data from the file")
    text = found.text()
    assert text.index("observed_data/kid_score (434)") < text.index("What the draws reveal")


def test_no_noise_mechanism_and_one_restart():
    found = dict(
        headline(dataclasses.replace(kidiq_like(0.01), noisy=None, smaller=(), restarts_agreeing=1)).points
    )
    assert not any("noisy" in advice for advice in found["What to do"])
    assert found["How sure the audit is"][1].startswith("Only one of 2 restarts reached the best objective")
    walled = headline(dataclasses.replace(kidiq_like(0.01), restarts_agreeing=1, restarts_passed_over=1))
    assert dict(walled.points)["How sure the audit is"][1].startswith(
        "Only one of 2 restarts reached the best objective, and 1 was passed over for ending on points"
    )
    asked = dict(headline(dataclasses.replace(kidiq_like(0.01), noisy=())).points)["What to do"]
    assert any("rerun the audit with --epsilon" in advice for advice in asked)


def test_describe_groups_what_it_can():
    three = ("a", "b", "c")
    moments = [Quantity(kind, (c,), 0.0) for kind in ("mean", "variance") for c in three]
    assert describe(moments) == "the means and variances of a, b and c"
    pairs = [Quantity("covariance", p, 0.0) for p in (("a", "b"), ("a", "c"), ("b", "c"))]
    assert describe([*moments, *pairs]) == "the means, variances and covariances of a, b and c"
    odd = [Quantity("mean", ("a",), 0.0), Quantity("statistic", ("Σ a·b²",), 0.0), pairs[0]]
    assert describe(odd) == "the mean of a, the covariance of a and b and Σ a·b²"


def test_quantities_measure_the_moments_they_name():
    x, y = Variable("x", None, False, False), Variable("y", None, False, False)
    variables = (x, y)

    def statistic(*powers: tuple[int, int]) -> Statistic:
        return Statistic(variables, tuple((p, 1.0) for p in powers))

    powers = [[(0, 0)], [(1, 0)], [(2, 0)], [(1, 1)], [(0, 2)], [(1, 0), (0, 1)], [(0, 1)]]
    statistics = [statistic(*p) for p in powers]
    rng = np.random.default_rng(0)
    truth = WeightedMeasure.empirical({"x": rng.normal(5, 2, 50), "y": rng.normal(-1, 1, 50)})
    moved = WeightedMeasure(
        {"x": truth.points["x"] * 1.1, "y": truth.points["y"] + 0.5}, np.full(50, 1.02)
    )  # N +2 %, x's mean +10 %, x's variance +21 %, y's mean up by 0.5
    rows = [{"error": 0.123}] * len(statistics)
    found = quantities(statistics, rows, truth, moved, AuditConfig().verdict)
    assert [q.kind for q in found] == [
        "count",
        "mean",
        "variance",
        "covariance",
        "variance",
        "statistic",
        "mean",
    ]
    assert found[0].error == pytest.approx(0.02)
    assert found[1].error == pytest.approx(0.1)  # x > 0 here: the relative error of its mean
    assert found[2].error == pytest.approx(0.21)
    assert found[4].error == pytest.approx(0.0, abs=1e-12)  # a shift leaves y's variance alone
    assert found[3].variables == ("x", "y") and found[3].error == pytest.approx(0.1 * abs(np.corrcoef(
        truth.points["x"], truth.points["y"])[0, 1]), rel=1e-6)  # fmt: skip
    assert found[5] == Quantity("statistic", ("Σ (x + y)",), 0.123)
    # without N the sums are only sums; without y's mean, Σ x·y is not a covariance
    judge = AuditConfig().verdict
    assert {q.kind for q in quantities(statistics[1:], rows[1:], truth, moved, judge)} == {"statistic"}
    assert quantities(statistics[:-1], rows[:-1], truth, moved, judge)[3].kind == "statistic"


def test_a_sum_recovered_where_its_mean_is_not_is_named_as_the_sum():
    """A Poisson regression's release leaves N open while pinning Σ y: the attack's mean of y is as far
    off as its N, and the verdict said "nothing recovered" with Σ y in the table at 2.4 %. The sum is
    now what is revealed; a mean recovered better than its sum stays the mean, and so does one off where
    N is not."""
    x, y = Variable("x", None, False, False), Variable("y", None, False, False)
    statistics = [Statistic((x, y), ((p, 1.0),)) for p in ((0, 0), (1, 0), (0, 1))]
    rng = np.random.default_rng(1)
    truth = WeightedMeasure.empirical({"x": rng.normal(size=300), "y": rng.poisson(2.0, 300).astype(float)})
    spread = WeightedMeasure(  # 3.6 times the mass, y scaled down to keep Σ y: x's mean only shifted
        {"x": truth.points["x"] + 0.01, "y": truth.points["y"] / 3.6}, np.full(300, 3.6)
    )
    rows = [{"error": abs(spread.total_mass() - 300) / 300}, {"error": 0.9}, {"error": 0.0}]
    found = quantities(statistics, rows, truth, spread, AuditConfig().verdict)
    assert found[0].kind == "count" and found[0].error == pytest.approx(2.6)
    assert found[1].kind == "mean" and found[1].error < 0.05  # better than its sum's 0.9: the mean
    assert found[2] == Quantity("statistic", ("Σ y",), 0.0, ("y",))
    assert describe(found[1:]) == "the mean of x and Σ y"
    advice = dict(headline(dataclasses.replace(kidiq_like(0.01), quantities=found[2:])).points)["What to do"]
    assert any("round or bin y" in line for line in advice)  # the sum's column, coarsened
    # with N recovered, a mean off is the mean off, whatever its sum's row says
    shifted = WeightedMeasure({"x": truth.points["x"], "y": truth.points["y"] + 1.0}, np.ones(300))
    assert quantities(statistics, rows, truth, shifted, AuditConfig().verdict)[2].kind == "mean"


def test_fewer_draws_are_advised_only_where_they_recover_less():
    """A Poisson regression's audit advised "Release fewer draws" while its first 100 draws gave the attack
    2 of 6 statistics and all 2,000 gave it 1: a smaller release's noise can help the attack."""
    noisier = dataclasses.replace(
        kidiq_like(0.012),
        smaller=(SmallerRelease(100, 2, 6, 220.0),),
        whole=SmallerRelease(2000, 1, 6, 140.0),
    )
    (fewer, *_) = dict(headline(noisier).points)["What to do"]
    assert fewer.startswith("Releasing fewer draws does not help here: with the first 100 draws, 2 of 6")
    assert fewer.endswith("with all 2,000, 1 of 6.")
    helps = dict(headline(kidiq_like(0.012)).points)["What to do"][0]
    assert helps.startswith("Release fewer draws: with the first 100 draws, 0 of 6")


def test_standard_errors_that_reach_a_quarter_say_the_release_does_not_determine_the_statistics():
    sure = dict(headline(dataclasses.replace(kidiq_like(0.012), standard_error=0.03)).points)
    assert (
        "by up to 3\u00a0% (one standard error; means in sd, covariances in correlation): the release "
        "determines them about that tightly" in (sure["How sure the audit is"][2])
    )
    # The CLI's line and the verdict share one threshold (two standard errors of 25 %), below the
    # verdict's own 50 % for "partly".
    above = dict(headline(dataclasses.replace(kidiq_like(0.012), standard_error=0.13)).points)
    assert "the release does not determine them all" in above["How sure the audit is"][2]
    loose = dict(headline(dataclasses.replace(kidiq_like(0.012), standard_error=1.6)).points)
    assert "by up to 160\u00a0%" in loose["How sure the audit is"][2]
    assert "the release does not determine them all" in loose["How sure the audit is"][2]
    unbounded = dict(headline(dataclasses.replace(kidiq_like(0.012), standard_error=float("inf"))).points)
    assert "by an unbounded amount" in unbounded["How sure the audit is"][2]
    assert "the release does not determine them all" in unbounded["How sure the audit is"][2]


def test_moments_no_draws_determine_are_named_and_the_rest_keep_their_errors():
    """Moments outside what the likelihood sees (a regression through the origin: every mean and sd) are
    named as not determined at all; the others' standard error still reads as one."""
    found = dataclasses.replace(
        kidiq_like(0.012), standard_error=0.03, undetermined=("the mean of x", "the sd of x")
    )
    sure = dict(headline(found).points)["How sure the audit is"][2]
    assert sure.startswith(
        "The likelihood sees the data only through sums that leave the mean of x and the sd of x open (see "
        "the check command): the release does NOT determine these at all, whatever the draws. Other draws "
        "of the same posterior (or another restart as good) would move the attack's other statistics among "
        "N and columns' means, sds and covariances by up to 3\u00a0% (one standard error"
    )
    assert "the release determines them about that tightly" in sure
    assert "leave" not in dict(headline(kidiq_like(0.012)).points)["How sure the audit is"][2]
    every = dataclasses.replace(
        kidiq_like(0.012), standard_error=float("nan"), undetermined=("N", "the mean of x")
    )
    alone = dict(headline(every).points)["How sure the audit is"][2]
    assert alone.endswith("leave N and the mean of x open (see the check command): the release does NOT "
                          "determine these at all, whatever the draws.")  # fmt: skip


def test_an_attack_short_of_its_optimum_says_so_without_blaming_the_release():
    """A shortfall beyond the standard errors is the optimiser's: the release is still said to determine
    the statistics as tightly as its standard errors say, and the distance still to go is named."""
    short = dict(headline(dataclasses.replace(kidiq_like(0.012), standard_error=0.03, shortfall=0.13)).points)
    sure = short["How sure the audit is"][2]
    assert "the release determines them about that tightly" in sure
    assert sure.endswith(
        "The attack stopped short of the optimum these errors describe: reaching it would move some of "
        "them by up to 13\u00a0% (N as a share, means in sd, covariances in correlation), more than their "
        "standard errors; that is the attack's error, not the release's (rerun with more --steps)."
    )
    unbounded = dataclasses.replace(kidiq_like(0.012), standard_error=0.03, shortfall=float("inf"))
    assert (
        "would move some of them by up to an unbounded amount, more"
        in dict(headline(unbounded).points)["How sure the audit is"][2]
    )
    assert "stopped short" not in dict(headline(kidiq_like(0.012)).points)["How sure the audit is"][2]
    # short of the optimum with no statistic's confirmed shortfall beyond its error: said all the same
    stopped = dataclasses.replace(kidiq_like(0.012), short_of_optimum=True, closer="--steps 600")
    assert dict(headline(stopped).points)["How sure the audit is"][2].endswith(
        "The attack stopped short of its optimum, so these may understate (rerun with --steps 600)."
    )


def test_n_counts_trials_where_the_attack_weighs_them():
    """A binomial whose trials differ by row is reconstructed one pseudo-row per trial: its N is the
    number of trials, and the coarsening advice names columns, not that unit."""
    x, y = Variable("x", None, False, False), Variable("y", None, False, True)
    statistics = [Statistic((x, y), ((p, 1.0),)) for p in ((0, 0), (1, 0), (0, 1))]
    units = {"column": "n", "response": "y", "kind": "trials"}
    trials = WeightedMeasure(
        {"x": np.array([0.0, 1.0, 2.0]), "y": np.array([1.0, 0.0, 1.0])}, np.ones(3), {"units": units}
    )
    found = quantities(
        statistics, [{"error": 0.0}] * 3, trials, trials, AuditConfig().verdict, unit=counted(trials)
    )
    assert describe(found) == "N (the number of trials) and the means of x and y"
    leaked = dict(headline(dataclasses.replace(kidiq_like(0.01), quantities=found)).points)["What to do"]
    assert any("round or bin x and y" in advice for advice in leaked)


def test_a_model_without_a_finite_list_of_statistics_says_it_may_reveal_more():
    """A GLM's features are not polynomials: the moments scored are not all the release reveals, so the
    verdict does not say "no single row" and names the moments as what was scored."""
    glm = dataclasses.replace(kidiq_like(0.9), complete=False, kernel_effective_rank=2.6, noisy=None)
    found = dict(headline(glm).points)
    hidden = found["What they do not reveal"]
    assert not any(line.startswith("No single row") for line in hidden)
    assert hidden[-1].startswith("Unknown beyond the moments scored")
    assert "about 2.6 independent directions" in hidden[-1]
    answer = headline(dataclasses.replace(glm, smaller=())).answer
    assert answer == (
        "As far as this attack can tell, yes: it recovered none of the 6 moments it was scored on (N and the "
        "columns' means, variances and covariances)."
    )
