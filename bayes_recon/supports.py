"""The free columns' supports: the user's where given, else a response's from its observed distribution.

A response (a free column that is the value of an observed site) has the support of its
distribution, and the pseudo-data must live there:

* few values (``boolean``: Bernoulli; a small ``integer_interval``: Categorical, ordinal, a
  Binomial of few trials) — exact values, by stratifying the pseudo-data (:mod:`bayes_recon.pseudo`);
  a Binomial whose trials vary by row (given in ``fixed``) as Bernoulli rows, one a trial, and a
  count whose exposure varies by row as units of exposure (:func:`bayes_recon.modelcheck.check_units`);
* counts (``nonnegative_integer``: Poisson, negative binomial, zero-inflated counts; a large
  ``integer_interval``) — a continuous relaxation: the pseudo-counts move over the positive reals
  (or the interval), where the model's log-probability is interpolated between the integers
  (:func:`bayes_recon.weighting.between_counts`): at the integers it is the model's own
  log-likelihood, and a pseudo-count is two data rows, the integers either side of it;
* continuous (positive: Gamma, LogNormal; unit interval: Beta; real) — NumPyro's bijections; so is
  a composition (simplex: a Dirichlet's shares, K per row as K − 1 stick-breaking coordinates).

Covariates have no distribution in the model; they take ``support=`` (default real), and a
covariate whose values off that support make the log-likelihood non-finite (``log(x)`` of a
real-valued pseudo-column) is refused up front, naming the column and the fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import constraints
from numpyro.distributions.constraints import Constraint
from numpyro.distributions.transforms import biject_to

from bayes_recon import pseudo
from bayes_recon.weighting import WeightedModel, probe_trace
from recon_core.errors import ReconError

# constraints with parameters, by name as support={"x": "interval(0, 200)"} or --support x=interval(0,200)
_PARAMETRISED = {
    "interval": 2,
    "integer_interval": 2,
    "greater_than": 1,
    "less_than": 1,
    "integer_greater_than": 1,
}
_CALL = re.compile(r"^(?P<name>\w+)\((?P<args>[^()]*)\)$")


class RowBoundedSupport(ReconError):
    """A response whose support's bounds differ by row (set by another free column)."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__(message)
        self.column = column


def relaxed(support: Constraint) -> Constraint | None:
    """The support a response's pseudo-values take, or None where none can be parametrised."""
    if pseudo.is_discrete(support):
        return support
    if isinstance(support, constraints._IntegerGreaterThan):
        bound = pseudo.common_bound(support.lower_bound)
        if bound is None:
            return None
        return constraints.positive if bound == 0 else constraints.greater_than(bound)
    if isinstance(support, constraints._IntegerInterval):
        low, high = pseudo.common_bound(support.lower_bound), pseudo.common_bound(support.upper_bound)
        return None if low is None or high is None else constraints.interval(low, high)
    if support is constraints.simplex:  # compositions, through NumPyro's stick-breaking bijection
        return support
    if isinstance(support, constraints.independent) and (
        support.base_constraint.event_dim == 0 or support.base_constraint is constraints.simplex
    ):  # a vector of scalars, each on one support (real_vector); rows of compositions as one event
        return relaxed(support.base_constraint)
    if support.is_discrete or support.event_dim != 0:
        return None
    return support


def observed_columns(
    model: Callable,
    shapes: Mapping[str, tuple[int, ...]],
    fixed: Mapping[str, Any],
    given: Mapping[str, Constraint] | None = None,
) -> dict[str, Constraint]:
    """{free column: its observed site's support} for the columns passed as an observed site's value,
    probed with the ``given`` columns on their supports (a binomial's trials as a free count: on the
    reals the model fails, and its response would have been taken for real)."""
    layout = pseudo.Layout(dict(shapes), dict(given or {}))
    probe = {k: np.asarray(v) for k, v in layout.probe(1, 3).items()}
    try:  # NumPyro validates by default: relaxed counts as a binomial's trials fail it, the attack's do not
        with numpyro.validation_enabled(False):
            trace = probe_trace(model, {**fixed, **{k: jnp.asarray(v) for k, v in probe.items()}})
    except Exception:  # the model needs values on a support first: latent_shapes reports it
        return {}
    found = {}
    for site in trace.values():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        value = np.asarray(site["value"])
        for column, probed in probe.items():
            if value.shape == probed.shape and np.allclose(value, probed):
                found[column] = site["fn"].support
    return found


def constraint_named(text: str) -> Constraint:
    """A numpyro.distributions.constraints constraint by name: "positive", "interval(0, 200)" (``support=``
    and ``--support`` take these)."""
    text = text.strip()
    call = _CALL.match(text.replace(" ", ""))
    if call is not None and call["name"] in _PARAMETRISED:
        arguments = [a for a in call["args"].split(",") if a]
        if len(arguments) != _PARAMETRISED[call["name"]]:
            raise ReconError(f"{text!r}: {call['name']} takes {_PARAMETRISED[call['name']]} number(s)")
        try:
            return getattr(constraints, call["name"])(*(float(a) for a in arguments))
        except ValueError:
            raise ReconError(f"{text!r}: its bounds are not numbers") from None
    named = getattr(constraints, text, None)
    if _nameable(named):
        return named
    known = sorted(k for k, v in vars(constraints).items() if _nameable(v) and not k.startswith("_"))
    close = difflib.get_close_matches(text, known + list(_PARAMETRISED), n=2)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise ReconError(
        f"unknown constraint {text!r}.{hint} Known: {', '.join(known)}; with bounds: "
        f"{', '.join(f'{k}(...)' for k in _PARAMETRISED)} (numpyro.distributions.constraints)"
    )


def _nameable(candidate: Any) -> bool:
    """A constraint a column can take by name: one on one number at a time, or the simplex (not another
    vector's, not the placeholder ``dependent``)."""
    try:
        return isinstance(candidate, Constraint) and (
            candidate.event_dim == 0 or candidate is constraints.simplex
        )
    except NotImplementedError:  # dependent: its event_dim is not known statically
        return False


def column_supports(
    model: Callable,
    shapes: Mapping[str, tuple[int, ...]],
    fixed: Mapping[str, Any],
    given: Mapping[str, Constraint],
) -> dict[str, Constraint]:
    """Every free column's support: ``given`` first, then the responses' from the model, else real."""
    unknown = sorted(set(given) - set(shapes))
    if unknown:
        raise ReconError(f"support= names {unknown}, which are not free columns ({sorted(shapes)})")
    for column, support in given.items():
        if not isinstance(support, Constraint):
            raise ReconError(
                f"support= gives column {column!r} {support!r}, not a NumPyro constraint: pass one, such as "
                'numpyro.distributions.constraints.positive, or its name, "positive" (on the command line '
                f"--support {column}=positive)"
            )

    def parametrised(column: str, support: Constraint, whose: str) -> Constraint:
        if support.is_discrete and support.event_dim:
            raise ReconError(
                f"{whose} {column!r} has support {support}: a vector of counts per row (a Multinomial's), "
                "which the attack cannot parametrise. To the posterior, a row of counts y is y[k] rows of "
                "class k (the multinomial coefficient is a constant): attack the same draws through the "
                "model written with one dist.Categorical row per trial, the class labels free "
                f"({column!r} a whole number per row), and the trials are what it reconstructs. Not so a "
                "DirichletMultinomial, whose trials in a row share one draw of the probabilities: its rows "
                "are beyond this attack."
            )
        found = relaxed(support)
        bounds = [getattr(support, b, None) for b in ("lower_bound", "upper_bound")]
        if found is None and any(b is not None and pseudo.common_bound(b) is None for b in bounds):
            raise RowBoundedSupport(
                column,
                f"{whose} {column!r} has support {support}, whose bounds differ from row to row, set by "
                "another free column: the attack needs the same support on every row. A binomial's "
                "trials go in fixed=, one value for every row (fixed={'trials': 5}) or one per row "
                "(fixed={'trials': trials_of_each_row}: the attack then reconstructs the trials as "
                "Bernoulli rows, one a trial). That needs a row of n trials to weigh as n rows of one; "
                "where it does not (a beta-binomial's trials share one draw of its probability), trials "
                "that differ by row are beyond this attack.",
            )
        if found is None:
            raise ReconError(
                f"{whose} {column!r} has support {support}, which the attack cannot parametrise (a vector "
                "event other than a simplex, or per-row bounds). Give it a scalar constraint with "
                "support={...} (real, positive, unit_interval, boolean, nonnegative_integer, ...), a "
                "vector's shares simplex, or leave it out of 'free'."
            )
        if found is constraints.simplex and shapes[column][-1:] in ((), (0,), (1,)):
            raise ReconError(
                f"{whose} {column!r} lies on the simplex, but its rows have shape {shapes[column]}: a "
                "composition needs a last axis of two entries or more. Give its shape in free (free="
                f"{{{column!r}: (3,), ...}}; on the command line --free {column}:3)."
            )
        return found

    # counts given as counts take the model's own relaxation
    supports = {column: parametrised(column, support, "support= says") for column, support in given.items()}
    for column, support in observed_columns(model, shapes, fixed, supports).items():
        if column not in given:
            supports[column] = parametrised(column, support, "the response")
        elif outside := values_outside(given[column], support):
            raise ReconError(
                f"support= says the response {column!r} is {given[column]}, but its observed distribution's "
                f"support is {support}: values such as {outside} lie outside it (and outside the attack's "
                f"relaxation of it). Leave {column!r} out of support= (its support then comes from the "
                "model) or give a support inside the distribution's."
            )
    return {k: supports.get(k, constraints.real) for k in shapes}


def counted_columns(
    weighted: WeightedModel, layout: pseudo.Layout, given: Mapping[str, Constraint], theta: np.ndarray
) -> tuple[tuple[str, float, float], ...]:
    """(column, lowest, highest count) of the scalar free columns ``given`` a count's support that the
    attack relaxes to an interval (not labels it enumerates), that no observed site takes as its value, and
    whose log-likelihood at the draws ``theta`` is finite at whole numbers but not halfway between them: a
    count the model reads in its own code (a hurdle's or a zero-inflation's ``numpyro.factor``, as Stan
    translations write them, where NumPyro validates the count). Their rows are interpolated between the
    counts (:meth:`bayes_recon.weighting.WeightedModel.at_counts`), as an observed count's log-probability
    is by its distribution (:func:`bayes_recon.weighting.between_counts`). A count covariate the model
    takes at any real value keeps its smooth likelihood."""
    observed = observed_columns(weighted.model, layout.shapes, weighted.fixed, layout.supports)
    finite = _finite_probe(weighted, layout, theta)
    found = []
    for column, support in given.items():
        bounds = count_bounds(support)
        if bounds is None or column in observed or layout.shapes[column]:
            continue
        if not pseudo.is_discrete(layout.support(column)) and _counts_only(finite, column, *bounds):
            found.append((column, *bounds))
    return tuple(found)


def count_bounds(support: Constraint) -> tuple[float, float] | None:
    """A count's support's lowest and highest count (``inf`` where unbounded above); None for any other
    support."""
    if isinstance(support, constraints._IntegerInterval):
        return float(support.lower_bound), float(support.upper_bound)
    if isinstance(support, constraints._IntegerGreaterThan):
        return float(support.lower_bound), np.inf
    return None


def whole_numbers(spread: jax.Array, lowest: float = 0.0, highest: float = np.inf) -> jax.Array:
    """Small whole numbers from ``lowest`` (0 where unbounded below), spread as the probe's coordinates,
    below ``highest``."""
    start = lowest if np.isfinite(lowest) else 0.0
    return jnp.minimum(start + jnp.round(jnp.abs(spread) * 3) % 4, max(start, highest - 1))


def _finite_probe(
    weighted: WeightedModel, layout: pseudo.Layout, theta: np.ndarray
) -> Callable[..., list[bool]]:
    """``finite(column, values, scale=1)``: whether log p(x | θ) is finite at the draws ``theta`` with
    ``column`` at ``values(its probe coordinates × scale)``, with the others at their support's centre and
    at 1 in their unconstrained space (two answers): a real column the model takes the log of (log(y)
    observed, y undeclared) is −∞ at its centre 0, and every other column moved beside it would be blamed
    for it."""
    n = 16
    spread, _ = layout.probe_coordinates(np.random.default_rng(2), n)
    bits = jnp.broadcast_to(layout.strata[0], (n, layout.discrete_dim))
    others = [layout.assemble(jnp.full((n, layout.dim), offset), bits) for offset in (0.0, 1.0)]
    loglik = jax.jit(jax.vmap(weighted.loglik_per_point, in_axes=(0, None)))

    def finite(column: str, values: Callable[[jax.Array], jax.Array], scale: float = 1.0) -> list[bool]:
        wide = values(layout.assemble(spread * scale, bits)[column])
        return [
            bool(np.isfinite(np.asarray(loglik(jnp.asarray(theta), {**rest, column: wide}))).all())
            for rest in others
        ]

    return finite


def _counts_only(finite: Callable[..., list[bool]], column: str, lowest: float, highest: float) -> bool:
    """Whether ``column``'s log-likelihood is finite at whole numbers from ``lowest`` and not halfway
    between them (:func:`_finite_probe`): a count the model's own code validates."""
    whole = finite(column, lambda w: whole_numbers(w, lowest, highest))
    between = finite(column, lambda w: whole_numbers(w, lowest, highest) + 0.5)
    return any(at and not half for at, half in zip(whole, between, strict=True))


def values_outside(given: Constraint, support: Constraint) -> list[float]:
    """A few values of ``given`` (its first levels, or points across it) that neither ``support`` nor the
    attack's relaxation of it holds (a count's reals between the integers, a discrete response's interval
    between its levels); empty when all lie inside, or when ``support`` cannot be checked on them (bounds
    that differ by row, refused elsewhere)."""
    bounds = [getattr(support, b) for b in ("lower_bound", "upper_bound") if hasattr(support, b)]
    if any(pseudo.common_bound(b) is None for b in bounds):
        return []
    if given.event_dim:  # a composition is checked whole, not share by share
        try:
            vector = biject_to(given)(jnp.linspace(-1.0, 1.0, 2))
            held = bool(np.all(np.asarray(support.check(vector))))
        except Exception:  # as below: a constraint without a bijection or a check is not this check's
            return []
        return [] if held else [float(f"{v:.3g}") for v in np.asarray(vector)]
    levels = pseudo.levels(support)
    between = constraints.interval(levels[0], levels[-1]) if levels else relaxed(support) or support
    given_levels = pseudo.levels(given)
    # a constraint without a bijection or a check on these values is not this check's to judge
    try:
        if given_levels is not None:
            candidates = np.asarray(given_levels[:3])
        elif given.is_discrete:  # integers from a lower bound (nonnegative_integer)
            candidates = (pseudo.common_bound(getattr(given, "lower_bound", 0.0)) or 0.0) + np.arange(3.0)
        else:
            candidates = np.asarray(biject_to(given)(jnp.linspace(-3.0, 3.0, 7)))
        # one column per row of a bound broadcast to the probe's rows (all equal: checked above)
        inside = [np.asarray(held.check(jnp.asarray(candidates)[:, None])) for held in (support, between)]
    except Exception:
        return []
    held_by_either = np.logical_or(*(np.reshape(v, (len(candidates), -1)).all(axis=1) for v in inside))
    return [float(f"{v:.3g}") for v in candidates[~held_by_either]][:3]


def check_covariates(weighted: WeightedModel, layout: pseudo.Layout, theta: np.ndarray) -> None:
    """Refuse a column whose pseudo-values on its support make log p(x | θ) non-finite at the draws.

    Each column is moved alone over its support (the others at their centre) at a few draws; a
    non-finite per-point log-likelihood means the model needs values the support allows but the
    data cannot take (``log(x)`` with x real), which the attack would only find mid-way. The
    column's unconstrained values are tried at spreads 1, 10⁻³ and 10⁻⁶ and the column is refused
    only when every spread fails: a column at 0.01 with a coefficient of 1,000 overflows exp(η) at
    unit spread, but its data are fine. A column finite at whole numbers only (from 0, or from 1: a
    zero-truncated count) is told to say it is a count.
    """
    finite = _finite_probe(weighted, layout, theta)
    for column in layout.shapes:
        if pseudo.is_discrete(layout.support(column)):
            continue
        if any(any(finite(column, lambda w: w, scale)) for scale in (1.0, 1e-3, 1e-6)):
            continue
        if any(_counts_only(finite, column, start, np.inf) for start in (0.0, 1.0)):
            # counted_columns takes scalar columns only: a vector's 2^k corners per row are not built
            fix = (
                f"Say so: support={{{column!r}: constraints.nonnegative_integer}} (command line: "
                f"--support {column}=nonnegative_integer); the attack then weighs each pseudo-row "
                "between the two counts around its value."
                if not layout.shapes[column]
                else "The attack weighs such counts between the whole numbers in scalar columns only: "
                f"rewrite the model to take each entry of {column!r} as an argument of its own, each with "
                "support=nonnegative_integer."
            )
            raise ReconError(
                f"the model's log-likelihood is finite for the free column {column!r} at whole numbers "
                f"only (a count its own code reads, as a hurdle's numpyro.factor does). {fix}"
            )
        raise ReconError(
            f"the model's log-likelihood is not finite for values of the free column {column!r} "
            f"on its support ({layout.support(column)}). If the model needs {column!r} positive, "
            f"in (0, 1) or in an interval, say so: support={{{column!r}: constraints.positive}} "
            "(command line: --support COLUMN=positive)."
        )
