"""The audit's answer to "may I publish these draws?", in words generated from its results.

:func:`findings` reads an :class:`~bayes_recon.audit.Audit` into plain numbers (:class:`Findings`);
:func:`headline` words them. What the release reveals is said as the quantities a reader knows
(N, a column's mean, variance, the covariance of two) whenever an identifiable statistic is one
of them given the others; their errors are the attack's on those quantities themselves:

- N: relative error;
- a mean: |Δ mean| / mean of |x| (the relative error when x keeps one sign);
- a variance: relative error;
- a covariance: |Δ cov| / (sd_x sd_y), i.e. in units of the correlation;

and any other statistic (Σ mom_hs·mom_iq², a combination of logs) is named as the audit names it,
with its scale-free error. Each is judged by the audit's thresholds (recovered / partly / not).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from bayes_recon.identifiability import moments_outside
from bayes_recon.reconstruct import DETERMINED_WITHIN, moment_namer
from recon_core.headline import Headline, Severity, number, percent, words

if TYPE_CHECKING:
    from bayes_recon.audit import Audit, Verdict
    from bayes_recon.identifiability import Statistic, Variable
    from recon_core.measure import WeightedMeasure

Kind = Literal["count", "mean", "variance", "covariance", "statistic"]


@dataclass(frozen=True)
class Quantity:
    """One thing the release may reveal: ``variables`` are column labels (the statistic's own name for
    kind "statistic"); ``error``: the attack's error on it (see the module's docstring)."""

    kind: Kind
    variables: tuple[str, ...]
    error: float
    columns: tuple[str, ...] = ()  # a sum named as itself: the column labels it is made of


@dataclass(frozen=True)
class SmallerRelease:
    """The first ``draws`` draws as the release: how many of the ``statistics`` are still recovered."""

    draws: int
    recovered: int
    statistics: int
    largest_error: float


@dataclass(frozen=True)
class NoisyRelease:
    """The posterior from noisy sufficient statistics at ``epsilon``: the attacker's smallest error over
    N, XᵀX, Xᵀy, yᵀy, how many of those four it still recovers, and how far the posterior mean moved."""

    epsilon: float
    mechanism: str
    smallest_error: float
    recovered: int
    mean_shift_sd: float


@dataclass(frozen=True)
class Findings:
    """What the verdict is worded from. ``noisy``: None where the model has no noise mechanism here (not a
    Gaussian linear regression), empty where it has one but no ε was audited. ``file_leaks``: data found
    in the released file itself (group, variable, shape, reveals, rows_recovered, max_error)."""

    rows: float
    columns: tuple[str, ...]
    statistics: int
    quantities: tuple[Quantity, ...]
    recovered_below: float
    partly_below: float
    reproduces: bool
    self_check: str
    restarts: int
    restarts_agreeing: int
    restart_spread: float
    # the largest over N and the columns' moments (statistics_spread's units) but those ``undetermined``
    # (NaN where every one is); infinite where one of theirs is
    standard_error: float
    # the largest distance still to go to the optimum (Reconstruction.shortfall) among the statistics where
    # it is beyond their standard error; 0 where it is nowhere
    shortfall: float
    smaller: tuple[SmallerRelease, ...]
    whole: SmallerRelease  # the release itself, every draw, scored as the smaller ones are
    noisy: tuple[NoisyRelease, ...] | None
    file_leaks: tuple[Mapping[str, Any], ...] = ()
    # N and the moments (named) outside what a polynomial likelihood sees (identifiability.moments_outside):
    # no number of draws determines them
    undetermined: tuple[str, ...] = ()
    # False where the features are not polynomials: the ``statistics`` are then N and the columns'
    # moments, scored though the release need not pin them down, and not all it may reveal
    complete: bool = True
    kernel_effective_rank: float = 0.0  # about how many directions of the data the release sees
    # restarts whose measure carried more information than a release can (Reconstruction.admissible)
    restarts_passed_over: int = 0
    closer: str = "more --steps"  # the rerun that closes a shortfall (closing_remedy)
    short_of_optimum: bool = False  # Reconstruction.short_of_optimum

    def verdict(self, error: float) -> Verdict:
        if error < self.recovered_below:
            return "recovered"
        return "partly" if error < self.partly_below else "not"

    def judged(self, verdict: Verdict) -> list[Quantity]:
        return [q for q in self.quantities if self.verdict(q.error) == verdict]


def passed_over_words(count: int) -> str:
    """A clause for restarts passed over for carrying more information than a release can ("" for none)."""
    if not count:
        return ""
    were = "was" if count == 1 else "were"
    return (
        f", and {count} {were} passed over for ending on points that carry more information than a "
        "release can"
    )


def closing_remedy(recon: Any) -> str:
    """The rerun that brings an attack short of its optimum closer: twice the Frank–Wolfe rounds where
    they ran out, more restarts where they stopped by their own rule (no option runs them on), else four
    times the last stage's steps; with minibatches of draws, where Adam ends wherever their noise leaves
    it, also larger minibatches."""
    steps = f"--steps {4 * recon.config.steps}"
    if recon.converged() is None:
        return f"{steps} or a larger --batch-size"
    if "refine_converged" not in recon.history:
        return steps
    if not bool(recon.history["refine_converged"]):
        return f"--refine-rounds {2 * recon.config.refine_rounds}"
    return f"--restarts {2 * len(recon.restart_objectives)}"


def findings(audit: Audit) -> Findings:
    """The audit's results as the verdict needs them."""
    config, recon = audit.config, audit.attack.reconstruction
    check = audit.check.identifiability
    outside = moments_outside(check, audit.check.probe, list(recon.measure.points))
    agreeing = int(np.sum(recon.at_best()))
    releases = tuple(
        SmallerRelease(
            p.draws,
            sum(r["verdict"] == "recovered" for r in p.rows),
            len(p.rows),
            max(r["error"] for r in p.rows),
        )
        for p in audit.curve
    )
    noisy = tuple(
        NoisyRelease(
            m["epsilon"],
            m["mechanism"],
            min(m["errors"].values()),
            sum(config.verdict(e) == "recovered" for e in m["errors"].values()),
            m["posterior_mean_shift_sd"],
        )
        for m in audit.mitigation
    )
    return Findings(
        rows=audit.truth.total_mass(),
        columns=tuple(v.label for v in check.variables),
        statistics=len(audit.statistics),
        quantities=quantities(
            audit.statistics,
            audit.rows,
            audit.truth,
            audit.attack.measure,
            config.verdict,
            unit=counted(audit.attack.measure),
        ),
        recovered_below=config.recovered_below,
        partly_below=config.partly_below,
        reproduces=recon.self_check.reproduces,
        self_check=recon.self_check.summary(),
        restarts=len(recon.restart_objectives),
        restarts_agreeing=agreeing,
        restarts_passed_over=recon.passed_over(),
        restart_spread=max(recon.restart_spread().values()),
        smaller=releases[:-1],
        whole=releases[-1],
        noisy=None if audit.attack.entry.linear is None else noisy,
        file_leaks=tuple(audit.file_leaks),
        standard_error=max(
            (v for k, v in recon.standard_errors.items() if k not in outside), default=math.nan
        ),
        undetermined=tuple(map(moment_namer(recon.measure.points), outside)),
        shortfall=max(
            (v for k, v in recon.shortfall.items() if k not in outside and v > recon.standard_errors[k]),
            default=0.0,
        ),
        closer=closing_remedy(recon),
        short_of_optimum=bool(recon.short_of_optimum()),
        complete=check.polynomial,
        kernel_effective_rank=check.kernel_effective_rank,
    )


def counted(measure: WeightedMeasure) -> str:
    """What the weights count: rows, or a row weight's, a binomial's trials or an exposure's units where
    they differ by row (:func:`bayes_recon.modelcheck.check_units`)."""
    units = measure.meta.get("units")
    if not units:
        return "rows"
    kind = {"trials": "trials", "weight": "units of weight", "exposure": "units of exposure"}[units["kind"]]
    return kind if kind == "trials" else f"{kind} ({units['column']})"


def quantities(
    statistics: Sequence[Statistic],
    rows: Sequence[Mapping[str, Any]],
    truth: WeightedMeasure,
    recovered: WeightedMeasure,
    judge: Callable[[float], Verdict],
    *,
    unit: str = "rows",
) -> tuple[Quantity, ...]:
    """Each identifiable statistic as a count, mean, variance or covariance where it is one given the
    others (a mean needs N; a variance or covariance also the columns' means), with the attack's error
    on that quantity; otherwise the statistic itself with its row's scale-free error. N counts ``unit``
    (:func:`counted`), and the moments are per unit.

    Where ``judge`` rates N worse than a sum, and the moment made from that sum worse too, the sum is
    reported as itself, with the row's error: a mean is as far off as N while its sum may be recovered
    (a Poisson regression of 300 rows: N 1,088, the mean of y 73 % off, Σ y 2.4 %), and the verdict
    says what leaks in either form. Where N is recovered the moments stay moments (Σ x² of a column far
    from zero is mostly N·mean² and would read as a leak of its own)."""
    powers = [s.terms[0][0] if len(s.terms) == 1 else None for s in statistics]
    has_n = any(m is not None and not any(m) for m in powers)
    means = {m.index(1) for m in powers if m is not None and sum(m) == 1}
    count_error = _moment_error("count", [], (), truth, recovered)
    out = []
    for statistic, monomial, row in zip(statistics, powers, rows, strict=True):
        factors = [] if monomial is None else [i for i, p in enumerate(monomial) for _ in range(p)]
        moment = not factors or (has_n and means.issuperset(factors) and len(factors) <= 2)
        if monomial is None or not moment:
            out.append(Quantity("statistic", (statistic.name,), float(row["error"])))
            continue
        kind: Kind = ("count", "mean", "variance" if len(set(factors)) == 1 else "covariance")[len(factors)]
        labels = tuple(statistic.variables[i].label for i in dict.fromkeys(factors)) or (unit,)
        error, own = _moment_error(kind, factors, statistic.variables, truth, recovered), float(row["error"])
        if factors and _RANK[judge(own)] < min(_RANK[judge(error)], _RANK[judge(count_error)]):
            out.append(Quantity("statistic", (statistic.name,), own, labels))
        else:
            out.append(Quantity(kind, labels, error))
    return tuple(out)


_RANK = {"recovered": 0, "partly": 1, "not": 2}


def _moment_error(
    kind: Kind,
    factors: list[int],
    variables: Sequence[Variable],
    truth: WeightedMeasure,
    other: WeightedMeasure,
) -> float:
    if kind == "count":
        return abs(other.total_mass() - truth.total_mass()) / truth.total_mass()
    (true_mean, true_cov, true_scale), (mean, cov, _) = _moments(truth, variables), _moments(other, variables)
    i, j = factors[0], factors[-1]
    if kind == "mean":
        return float(abs(mean[i] - true_mean[i]) / true_scale[i])
    return float(abs(cov[i, j] - true_cov[i, j]) / np.sqrt(true_cov[i, i] * true_cov[j, j]))


def _moments(measure: WeightedMeasure, variables: Sequence[Variable]) -> tuple[np.ndarray, ...]:
    """Weighted mean, covariance matrix and mean absolute value of the variables."""
    values = np.stack([v.values(measure.points) for v in variables], axis=1)
    weights = measure.weights / measure.total_mass()
    mean = weights @ values
    centred = values - mean
    return mean, (centred.T * weights) @ centred, weights @ np.abs(values)


def describe(quantities: Sequence[Quantity]) -> str:
    """The quantities in words, grouped: "N and the means, variances and covariance of a and b"."""
    by_kind = {kind: [q.variables for q in quantities if q.kind == kind] for kind in get_args(Kind)}
    means, variances = ([v for (v,) in by_kind[k]] for k in ("mean", "variance"))
    pairs = by_kind["covariance"]
    parts = [f"N (the number of {(by_kind['count'][0] or ('rows',))[0]})"] if by_kind["count"] else []
    if means and means == variances:
        heads = ["means" if len(means) > 1 else "mean", "variances" if len(means) > 1 else "variance"]
        if len(means) > 1 and sorted(map(sorted, pairs)) == sorted(
            map(sorted, itertools.combinations(means, 2))
        ):
            heads.append("covariances" if len(pairs) > 1 else "covariance")
            pairs = []
        parts.append(f"the {words(heads)} of {words(means)}")
    else:
        for head, columns in (("mean", means), ("variance", variances)):
            if columns:
                parts.append(f"the {head}{'s' if len(columns) > 1 else ''} of {words(columns)}")
    parts += [f"the covariance of {a} and {b}" for a, b in pairs]
    parts += [name for (name,) in by_kind["statistic"]]
    return words(parts)


def headline(found: Findings) -> Headline:
    """The verdict: the answer, then what the release reveals, what it does not, how sure the audit is
    and what to do, each sentence generated from ``found``."""
    recovered, partly, missed = (found.judged(v) for v in ("recovered", "partly", "not"))
    points: list[tuple[str, tuple[str, ...]]] = []
    if found.file_leaks:
        points.append(("The file itself", tuple(_file_leak(leak) for leak in found.file_leaks)))
    reveals = []
    if recovered:
        reveals.append(f"{_capital(describe(recovered))}{_largest_error(recovered)}.")
    if partly:
        reveals.append(f"Roughly: {describe(partly)}{_largest_error(partly)}.")
    points.append(("What the draws reveal", tuple(reveals) or ("Nothing the attack could recover.",)))
    points.append(("What they do not reveal", _hidden(found, missed)))
    points.append(("How sure the audit is", _confidence(found)))
    points.append(("What to do", _advice(found, recovered + partly)))
    return Headline(_answer(found, recovered, partly), _severity(found, recovered, partly), tuple(points))


def _largest_error(quantities: list[Quantity]) -> str:
    """`` (largest error 2.3 %, on the variance of x)``: the attack's worst among ``quantities``."""
    worst = max(quantities, key=lambda q: q.error)
    which = "" if len(quantities) == 1 else f", on {'N' if worst.kind == 'count' else describe([worst])}"
    return f" (largest error {percent(worst.error)}{which})"


def _answer(found: Findings, recovered: list[Quantity], partly: list[Quantity]) -> str:
    if found.file_leaks:
        return "No: the released file itself contains the data (see below), before any attack."
    if recovered:
        return f"Not as it is: publishing these draws publishes {describe(recovered)}."
    if not found.reproduces:
        return (
            "Not sure: the attack's self-check failed, so the draws may reveal more than it recovered "
            f"({'some statistics roughly' if partly else 'nothing'})."
        )
    if partly:
        within = percent(found.recovered_below)
        return f"With care: the draws reveal {describe(partly)} roughly, none of it to within {within}."
    scored = (
        "statistics the draws depend on"
        if found.complete
        else "moments it was scored on (N and the columns' means, variances and covariances)"
    )
    return f"As far as this attack can tell, yes: it recovered none of the {found.statistics} {scored}."


def _severity(found: Findings, recovered: list[Quantity], partly: list[Quantity]) -> Severity:
    if found.file_leaks or recovered:
        return "recovered"
    if not found.reproduces:
        return "unsure"
    return "partly" if partly else "not"


def _file_leak(leak: Mapping[str, Any]) -> str:
    shape = "×".join(map(str, leak["shape"]))
    return (
        f"The file itself contains the data: {leak['group']}/{leak['variable']} ({shape}) reveals "
        f"{leak['reveals']}, {leak['rows_recovered']} rows recovered "
        f"(largest error {leak['max_error']:.3g}). "
        "Remove it with `bayes-recon strip IN OUT`."
    )


def _hidden(found: Findings, missed: list[Quantity]) -> tuple[str, ...]:
    unknowns = found.rows * len(found.columns)
    if not found.complete:
        rows = (
            "Unknown beyond the moments scored: the model's features are not polynomials of the data (a "
            "link function, a mixture), so the draws depend on it through more than these; the "
            f"model-induced kernel sees about {found.kernel_effective_rank:.1f} independent directions of "
            "it. Whether higher moments or single rows can be read from them, this audit does not measure."
        )
    elif found.statistics < unknowns:
        rows = (
            f"No single row: any data set with the same {found.statistics} statistics gives the same "
            f"posterior, and {found.rows:g} rows of {len(found.columns)} columns leave "
            f"{unknowns - found.statistics:g} numbers free; nor anything else outside these statistics "
            "(higher moments, for one)."
        )
    else:
        rows = (
            f"Possibly the rows themselves: {found.statistics} statistics for {found.rows:g} rows of "
            f"{len(found.columns)} columns may pin every row down."
        )
    if not missed:
        return (rows,)
    caveat = (
        ""
        if found.reproduces
        else " (not recovered by this attack; its self-check failed, so they may still leak)"
    )
    return (
        f"{_capital(describe(missed))}: errors of {percent(min(q.error for q in missed))} or more{caveat}.",
        rows,
    )


def _confidence(found: Findings) -> tuple[str, ...]:
    if found.reproduces:
        check = (
            "The errors above are measured against the true data, and the attack's self-check passes. "
            f"{found.self_check}"
        )
    else:
        check = (
            f"Not sure. {found.self_check} What the attack recovered is measured against the true data and "
            "stands; what it did not recover may still leak: rerun with more --restarts, --steps or --points."
        )
    if found.restarts_agreeing > 1:
        agree = "agree" if found.restart_spread < found.recovered_below else "differ"
        spread = (
            f"{found.restarts_agreeing} of {found.restarts} restarts reached the best objective and {agree} "
            f"on N and every column's mean and sd (largest spread {percent(found.restart_spread)})"
            + ("." if agree == "agree" else ": the draws leave these open.")
        )
    else:
        spread = (
            "The attack ran one restart"
            if found.restarts == 1
            else f"Only one of {found.restarts} restarts reached the best objective"
            + passed_over_words(found.restarts_passed_over)
        ) + ", so there is no spread between restarts to compare (more with --restarts)."
    if math.isnan(found.standard_error):  # every statistic undetermined: nothing else to size
        return check, spread, undetermined_words(found.undetermined).rstrip()
    size = (
        f"by up to {percent(found.standard_error)} (one standard error; means in sd, covariances in "
        "correlation)"
        if math.isfinite(found.standard_error)
        else "by an unbounded amount (a standard error that is not finite)"
    )
    determined = (
        undetermined_words(found.undetermined)
        + "Other draws of the same posterior (or another restart as good) would move the attack's "
        + ("other statistics among " if found.undetermined else "")
        + f"N and columns' means, sds and covariances {size}"
        + (
            ": the release determines them about that tightly."
            if 2 * found.standard_error < DETERMINED_WITHIN
            else ": the release does not determine them all; read those values as one data set it "
            "cannot tell from the truth."
        )
        + (
            " The attack stopped short of the optimum these errors describe: reaching it would move some "
            f"of them by up to {_shortfall_size(found.shortfall)}, more than their standard errors; that "
            f"is the attack's error, not the release's (rerun with {found.closer})."
            if found.shortfall > 0
            else (
                " The attack stopped short of its optimum, so these may understate (rerun with "
                f"{found.closer})."
                if found.short_of_optimum
                else ""
            )
        )
    )
    return check, spread, determined


def undetermined_words(names: Sequence[str]) -> str:
    """The sentence (and a space) naming the moments no draws determine; nothing where there are none."""
    if not names:
        return ""
    return (
        f"The likelihood sees the data only through sums that leave {words(list(names))} open (see the "
        "check command): the release does NOT determine these at all, whatever the draws. "
    )


def _shortfall_size(shortfall: float) -> str:
    if not math.isfinite(shortfall):
        return "an unbounded amount"
    return f"{percent(shortfall)} (N as a share, means in sd, covariances in correlation)"


def _advice(found: Findings, leaked: list[Quantity]) -> tuple[str, ...]:
    advice = (
        ["Remove the data from the file before anything else: `bayes-recon strip IN OUT`."]
        if found.file_leaks
        else []
    )
    if not leaked:
        return (
            (*advice, "Nothing more by this audit's measure.")
            if advice
            else ("Nothing by this audit's measure.",)
        )
    if found.smaller:
        each = "; ".join(
            f"with the first {s.draws:,} draws, {s.recovered} of {s.statistics} statistics are still "
            f"recovered (largest error {percent(s.largest_error)})"
            for s in found.smaller
        )
        whole = found.whole
        if any(s.recovered < whole.recovered for s in found.smaller):
            advice.append(f"Release fewer draws: {each}.")
        else:  # a smaller release's own noise can make the attack recover more, not less
            advice.append(
                f"Releasing fewer draws does not help here: {each}; with all {whole.draws:,}, "
                f"{whole.recovered} of {whole.statistics}."
            )
    if found.noisy == ():
        advice.append(
            "Release the posterior of noisy sufficient statistics: rerun the audit with --epsilon "
            "0.1,1,10 to measure what the attacker still recovers and what the noise costs."
        )
    elif found.noisy:
        each = "; ".join(
            f"at ε = {n.epsilon:g} the attacker still recovers {n.recovered} of the 4 (N, XᵀX, Xᵀy, yᵀy; "
            f"smallest error {percent(n.smallest_error)}) and the posterior mean moves by "
            f"{number(n.mean_shift_sd)} sd"
            for n in found.noisy
        )
        advice.append(
            f"Release the posterior of noisy sufficient statistics ({found.noisy[0].mechanism}): {each}."
        )
    columns = list(
        dict.fromkeys(
            c
            for q in leaked
            if q.kind != "count"
            for c in (q.columns if q.kind == "statistic" else q.variables)
        )
    )
    if columns:
        advice.append(
            f"Coarsen a column before fitting (round or bin {words(columns)}): the draws then carry the "
            "coarse values' statistics instead of the exact ones (not measured by this audit)."
        )
    return tuple(advice)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
