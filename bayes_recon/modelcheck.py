"""The user's model, free columns and draws, checked before any attack, and the release they make.

Everything here runs in seconds and before anything is compiled: a mistake in the call (a column
the model does not take, draws of another model, a per-row latent variable) is a clear
:class:`ReconError`, not a failure minutes into the attack.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import constraints
from numpyro.distributions.constraints import Constraint
from numpyro.infer.util import unconstrain_fn

from bayes_recon import pseudo
from bayes_recon.draws import as_draws, chains_flattened, check_draws, spread_rows
from bayes_recon.precision import attack_numerics
from bayes_recon.supports import (
    check_covariates,
    column_supports,
    constraint_named,
    count_bounds,
    counted_columns,
    whole_numbers,
)
from bayes_recon.weighting import WeightedModel, probe_trace, whole_plates
from recon_core.errors import ReconError

Array = jax.Array
Free = Sequence[str] | Mapping[str, Sequence[int] | int]
Shapes = dict[str, tuple[int, ...]]  # per-row shapes of the free columns
_COUPLED_ROWS = (
    "or a distribution that couples the rows, as a Gaussian process's MultivariateNormal over them, which "
    "is beyond this attack: it weighs rows that are independent given the parameters"
)
MOST_VECTOR_COLUMNS = 2  # columns named in a list tried as a vector per row at once (row_shapes_inferred)


class Release(NamedTuple):
    """A checked release: the model with its free columns split off, their layout, and the draws."""

    weighted_model: WeightedModel
    layout: pseudo.Layout
    draws: dict[str, np.ndarray]  # {site: (S, ...)}, constrained, as released
    theta: np.ndarray  # (S, d): the draws as NumPyro's flat unconstrained vectors
    # {"column", "response", "kind"}: a row's weight, a binomial's trials or a rate's exposure that differ
    # by row, the rows weighed as their units, a pseudo-row each (check_units)
    units: dict[str, str] | None = None


@attack_numerics
def prepare_release(
    model: Callable,
    draws: Any,
    free: Free,
    fixed: Mapping[str, Any] | None = None,
    support: Mapping[str, Constraint | str] | None = None,
) -> Release:
    """Check the call and the draws against the model (its plates over all their rows: :class:`whole_plates`);
    take the free columns' supports from the model."""
    model, fixed, draws = whole_plates(model), dict(fixed or {}), as_draws(draws)
    support = {k: _support_named(k, v) if isinstance(v, str) else v for k, v in (support or {}).items()}
    units: tuple[str, np.ndarray] | None = None
    shapes = free_shapes(free)
    check_free(model, list(shapes), fixed)
    layout = pseudo.Layout(shapes, column_supports(model, shapes, fixed, support))
    try:
        latent = latent_shapes(model, layout, fixed)
    except (ModelFailedOnShapes, LatentGrowsWithRows):
        declared, listed = shapes, not isinstance(free, Mapping)

        def shapes_found(candidate: Callable, known: Mapping[str, Any]) -> Shapes | None:
            if runs_with_shapes(candidate, declared, known, support, draws):
                return declared
            return row_shapes_inferred(candidate, list(declared), known, support, draws) if listed else None

        model, fixed, found, units = fixed_rows_adapted(model, declared, fixed, support, shapes_found)
        shapes = found or declared  # else the model's failure is raised below
        layout = pseudo.Layout(shapes, column_supports(model, shapes, fixed, support))
        latent = latent_shapes(model, layout, fixed)
    checked = check_draws(draws, latent)
    first = {k: jnp.asarray(v[0]) for k, v in checked.items()}
    with numpyro.validation_enabled(False):  # one pseudo-row: a mean over the rows has no sd (refused below)
        unconstrained = unconstrain_fn(model, (), {**fixed, **layout.example(1)}, first)
    reshaped = frozenset(k for k in checked if jnp.shape(unconstrained[k]) != checked[k].shape[1:])
    latent_example = {k: unconstrained[k] for k in checked}
    priors = prior_sites(model, layout, fixed)
    weighted = WeightedModel(model, tuple(shapes), fixed, latent_example, reshaped, priors)
    theta = np.asarray(weighted.to_unconstrained(checked, layout.example(1)))
    check_draws_on_supports(theta, weighted)
    flat = np.flatnonzero(np.ptp(theta, axis=0) == 0)
    if len(flat):
        names = [weighted.coordinate_names[i] for i in flat]
        raise ReconError(
            f"the draws of {', '.join(names)} (in the model's unconstrained coordinates) have the same value "
            "in every draw. The attack reads the data from how the posterior draws vary: a parameter held "
            "fixed in the draws tells it nothing. Pass such a value as fixed data, not as a sampled site."
        )
    probe_draws = theta[spread_rows(len(theta), 4)]
    summed = summed_sites(weighted, layout, support, probe_draws)
    weighted = dataclasses.replace(weighted, prior_sites=weighted.prior_sites - summed, summed=summed)
    check_rows_observed(weighted, layout)
    check_one_row_plate(weighted, layout)
    weighted = dataclasses.replace(weighted, counted=counted_columns(weighted, layout, support, probe_draws))
    check_rows_exchangeable(weighted, layout, probe_draws)
    check_covariates(weighted, layout, probe_draws)
    per_unit = None if units is None else check_units(weighted, layout, units, probe_draws)
    return Release(weighted, layout, checked, theta, per_unit)


def _support_named(column: str, name: str) -> Constraint:
    """The constraint ``name`` gives, an unknown name refused naming the column."""
    try:
        return constraint_named(name)
    except ReconError as err:
        raise ReconError(f"support= for column {column!r}: {err}") from None


def check_draws_on_supports(theta: np.ndarray, weighted: WeightedModel) -> None:
    """Refuse draws off their site's support (a scale drawn negative, a probability above one): NumPyro's
    transform to the unconstrained space is not finite there, and the model's log-likelihood at such
    draws would otherwise be blamed on the free columns."""
    bad = ~np.isfinite(theta)
    if not bad.any():
        return
    rows = np.flatnonzero(bad.any(axis=1))
    names = [weighted.coordinate_names[i] for i in np.flatnonzero(bad.any(axis=0))]
    raise ReconError(
        f"{len(rows)} of {len(theta)} draws (first: draw {rows[0]}) lie outside (or on the edge of) the "
        f"support the model gives {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} (e.g. a scale "
        "below zero or a probability above one, or a value rounded onto its bound by a CSV's six digits), "
        "where the model's density is zero. Are these draws from this model, with its priors' supports? "
        "Drop those draws, or write the model as the sampler's was."
    )


def model_arguments(model: Callable) -> tuple[set[str], bool]:
    parameters = inspect.signature(model).parameters.values()
    return {p.name for p in parameters}, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def check_free(model: Callable, free: Sequence[str], fixed: Mapping[str, Any]) -> None:
    names, takes_any = model_arguments(model)
    unknown = [n for n in [*free, *fixed] if n not in names and not takes_any]
    if unknown:
        given = [*free, *fixed]
        one_dict = (
            f" A model that takes its columns in one argument ({sorted(names)[0]}['x']) is called with each "
            f"by name through a wrapper: def wrapped({', '.join(f'{n}=None' for n in given)}): "
            f"return model({{{', '.join(f'{n!r}: {n}' for n in given)}}})."
            if len(names) == 1 and not set(given) & names
            else ""
        )
        raise ReconError(
            f"the model {getattr(model, '__name__', model)!r} takes no argument(s) {unknown}; its "
            f"arguments are {sorted(names)}. 'free' names the data arguments to reconstruct.{one_dict}"
        )
    both = set(free) & set(fixed)
    if both:
        raise ReconError(f"{sorted(both)} is both free and fixed; an argument is one or the other")
    if not free:
        raise ReconError("'free' is empty: name at least one data argument of the model to reconstruct")


class ModelFailedOnShapes(ReconError):
    """The model raised on pseudo-data of the declared per-row shapes (not a refusal of a model that runs)."""


class LatentGrowsWithRows(ReconError):
    """A latent site's shape follows the number of rows: a latent variable per row, or a design matrix
    named in a list whose columns the model counts with ``X.shape[-1]``."""


def traced_sites(
    model: Callable, layout: pseudo.Layout, fixed: Mapping[str, Any], n: int
) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """The model's sample-site shapes on n pseudo-rows (a latent site's value's, an observed site's
    log-probability's: a factor's value is empty whatever its batch) and its observed sites, traced
    abstractly (nothing is compiled or run); ModelFailedOnShapes where the model fails on them."""
    data = layout.example(n)
    observed: set[str] = set()

    def site_values() -> dict[str, Any]:
        tr = probe_trace(model, {**fixed, **data})
        sites = {k: s for k, s in tr.items() if s["type"] == "sample"}
        observed.update(k for k, s in sites.items() if s["is_observed"])
        # a likelihood that cannot take these rows fails here, not at the first step (nor can its scale:
        # handlers.scale by a weight per data row)
        return {
            k: s["fn"].log_prob(s["value"]) * (1.0 if s["scale"] is None else s["scale"])
            if k in observed
            else s["value"]
            for k, s in sites.items()
        }

    try:
        shapes = jax.eval_shape(site_values)
    except Exception as err:  # the user's model failed on pseudo-data of the declared shapes
        data_shapes = {k: v.shape for k, v in data.items()}
        indexed = "Indexer must have integer" in str(err)
        many = [k for k in data if _relaxed_levels(layout.support(k))]
        raise ModelFailedOnShapes(
            f"the model failed on pseudo-data shaped {data_shapes}: {err!r}. "
            + (
                f"{many} lie on an interval of whole-number bounds {pseudo.MAX_STRATA} or more apart: a "
                f"discrete support of more than {pseudo.MAX_STRATA} values is relaxed to such an interval, "
                f"as a count's is, for the attack stratifies its pseudo-data by at most {pseudo.MAX_STRATA} "
                "discrete values. A model that indexes with such a column (a group among more than "
                f"{pseudo.MAX_STRATA}, as alpha[g]) is beyond this attack."
                if indexed and many
                else "A free column the model indexes with (a group, as alpha[g]) needs its discrete "
                "support: support={'g': constraints.integer_interval(0, J - 1)}."
                if indexed
                else "Check 'free' and 'fixed': free names a column with a shape of its own per row by "
                "its per-row shape, e.g. free={'X': (2,), 'y': ()} for a design matrix of two "
                "covariates (a name alone is one number per row)."
            )
        ) from err
    return {k: tuple(v.shape) for k, v in shapes.items()}, observed


def _row_refusal(
    model: Callable,
    shapes: Shapes,
    fixed: Mapping[str, Any],
    support: Mapping[str, Constraint],
    n: int,
    text: str,
) -> ReconError:
    """The refusal ``text`` of a fixed column known row by row, unless the model observes a site with
    obs_mask on its n rows: then why the masked entries cannot be had, and what works."""
    layout = pseudo.Layout(shapes, column_supports(model, shapes, fixed, support))
    masked = masked_sites(model, layout, fixed, n)
    return ReconError(_masked_message(masked) if masked else text)


def _relaxed_levels(support: Constraint) -> bool:
    """Whether ``support`` is the interval a discrete support of more than MAX_STRATA values is relaxed to
    (:func:`bayes_recon.supports.relaxed`)."""
    if not isinstance(support, constraints._Interval) or support.is_discrete:
        return False
    low, high = pseudo.common_bound(support.lower_bound), pseudo.common_bound(support.upper_bound)
    whole = low is not None and high is not None and float(low).is_integer() and float(high).is_integer()
    return whole and high - low >= pseudo.MAX_STRATA


def fixed_rows_adapted(
    model: Callable,
    shapes: Shapes,
    fixed: Mapping[str, Any],
    support: Mapping[str, Constraint],
    shapes_found: Callable[[Callable, Mapping[str, Any]], Shapes | None],
) -> tuple[Callable, dict[str, Any], Shapes | None, tuple[str, np.ndarray] | None]:
    """Where the model failed on pseudo-rows, the fixed arguments that tie it to the data's rows, taken
    one by one until the model runs (then with the per-row shapes ``shapes_found`` found): a whole
    number the model takes as the number of rows (Stan's N in ``plate("rows", N)``: it runs on that many
    rows and fails on one more) is given the pseudo-data's row count at every call; an array of one
    value per row (the model runs on that many rows and fails on one more) is that value where every
    row has the same and the model runs with it (a binomial's trials); non-negative values that differ
    by row and that the model runs with at 1 are returned with their name, as a row's weight, a
    binomial's trials or a rate's exposure, for :func:`check_units`; anything else is refused by name
    (the pseudo-rows cannot carry values known row by row). Numbers come first, then arrays of one
    value, so that an array that differs by row is tried with the others settled."""
    fixed, units = dict(fixed), None
    found = shapes_found(model, fixed)
    for name, value in sorted(fixed.items(), key=_settled_first):
        if found is not None:
            break
        others = {k: v for k, v in fixed.items() if k != name}
        if _is_count(value):
            counted = rows_counted(model, name, tuple(shapes))
            found = shapes_found(counted, others)
            if found is not None and _counts_rows(model, found, fixed, support, int(value)):
                model, fixed = counted, others
            else:
                found = None
            continue
        n = np.shape(value)[0] if np.ndim(value) >= 1 else 0
        if n < 2 or not _counts_rows(model, shapes, fixed, support, n):
            continue
        values = np.asarray(value)
        one, one_value = {**fixed, name: values[0]}, _settled_first((name, value)) == 1
        if one_value:
            found = shapes_found(model, one)
            differing = any(_settled_first(item) == 2 for item in others.items())
            if found is not None or differing:  # those are tried next, with this one settled
                fixed = one
                continue
        make_free = f"{_made_free(name, values)}, and the attack reconstructs it with the rest."
        sizes = values.dtype.kind in "iuf" and values.min() >= 0
        if one_value or not sizes:
            offset = " (an offset log t: pass t itself and write t * exp(...))" if np.min(values) < 0 else ""
            raise _row_refusal(
                model,
                shapes,
                fixed,
                support,
                n,
                f"fixed {name!r} has one value per data row ({n}): the pseudo-rows the attack builds "
                f"cannot carry values known row by row{offset}. {make_free}",
            )
        unit = {**fixed, name: np.ones((), values.dtype)}
        if (found := shapes_found(model, unit)) is None:
            raise _row_refusal(
                model,
                shapes,
                fixed,
                support,
                n,
                f"fixed {name!r} holds one value per data row ({n}), and they differ. Values like these "
                f"are taken as a row's weight, a binomial's trials or a rate's exposure, every pseudo-row "
                f"one unit, where the model runs with {name}=1 broadcast over the rows; this model does not "
                f"(it sizes something with {name!r} or indexes it by row). Write it so that {name!r} only "
                f"sets the weight, the trials or the exposure, or: {make_free}",
            )
        fixed, units = unit, (name, values)
    return model, fixed, found, units


def _made_free(name: str, values: np.ndarray) -> str:
    """How to make a fixed column free: a group index (few whole numbers) as a discrete column, whose
    pseudo-data the attack stratifies (a cloud and a mass per group), anything else continuous."""
    low, high = (float(np.min(values)), float(np.max(values))) if np.size(values) else (0.0, 0.0)
    index = np.all(values == np.round(values)) and 0 < high - low < pseudo.MAX_STRATA
    support = f"integer_interval({low:.0f}, {high:.0f})" if index else "positive"
    return (
        f"Make {name!r} free (with its support, e.g. support={{{name!r}: constraints.{support}}}; "
        f"command line: --free ...,{name} --support {name}={support.replace(' ', '')})"
    )


def _settled_first(item: tuple[str, Any]) -> int:
    value = np.asarray(item[1])
    return 0 if value.ndim == 0 else 1 if np.all(value == value.flat[0]) else 2


def check_units(
    weighted: WeightedModel, layout: pseudo.Layout, units: tuple[str, np.ndarray], theta: np.ndarray
) -> dict[str, str]:
    """{"column": name, "response": column, "kind": "weight", "trials" or "exposure"} where a row with
    ``units``' value u weighs as u rows with it at 1 (the model runs with it at 1, as passed). At every
    draw ``theta`` (four that differ):

    * weight, for any row (a likelihood raised to a known power, ``handlers.scale`` by a survey weight):
      ℓ(w, x) − w ℓ(1, x) is the same, for w at the data's smallest, 0.5 and its largest: a row of
      weight w is w rows (the response: "");
    * trials, for a response on {0, 1} (a binomial's successes c of n): ℓ(n, c) − c ℓ(1, 1) −
      (n − c) ℓ(1, 0) is the same, for n at 2, the data's largest count and one between, and c at 0,
      1, n − 1 and n: a row of n trials is n Bernoulli rows;
    * exposure, for any other response y (a Poisson count with its mean t·λ): ℓ(t, t r) − t ℓ(1, r) is
      the same, for t at the data's smallest, 0.5, half and all of its largest, and r on the response's
      support and 0: a row of exposure t and count y is t rows of exposure 1 and count y / t.

    The attack then reconstructs the units, a pseudo-row each: the posterior cannot tell the row from
    its units, so a measure over units is what the release determines. Refused by name otherwise (the
    trials used as a covariate too, a beta-binomial, a negative binomial's exposure)."""
    name, values = units
    scalar = [k for k, shape in layout.shapes.items() if not shape]
    data = layout.probe(5, 4)
    theta = jnp.asarray(theta)
    largest = float(values.max())

    def loglik(model: WeightedModel, response: str | None = None, values: Any = None) -> np.ndarray:
        """At every draw, the probe rows' log-likelihoods, the column ``response`` (if any) at ``values``."""
        rows = data if response is None else {**data, response: jnp.asarray(values, dtype=float)}
        return np.asarray(jax.vmap(model.loglik_per_point, in_axes=(0, None))(theta, rows))

    def at(size: float) -> WeightedModel:
        dtype = values.dtype if float(size).is_integer() else float
        return dataclasses.replace(weighted, fixed={**weighted.fixed, name: np.full((), size, dtype)})

    def constant(gap: np.ndarray) -> bool:
        return bool(np.all(np.isfinite(gap)) and np.ptp(gap, axis=0).max() <= 1e-6 * (1 + np.abs(gap).max()))

    def trials(response: str) -> bool:
        one, zero = (loglik(weighted, response, np.full(4, v)) for v in (1.0, 0.0))
        for n in np.unique([2, int(largest), (2 + int(largest)) // 2]):
            c = np.array([0, 1, n - 1, n], dtype=float)
            if not constant(loglik(at(n), response, c) - c * one - (n - c) * zero):
                return False
        return True

    def exposure(response: str) -> bool:
        rate = np.array(data[response], dtype=float)
        rate[0] = 0.0  # the commonest count
        one = loglik(weighted, response, rate)
        sizes = np.unique([values[values > 0].min(), 0.5, largest / 2, largest])
        return all(constant(loglik(at(t), response, t * rate) - t * one) for t in sizes)

    def weight() -> bool:  # at every size, or False where the model cannot take one (trials at 0.5)
        one = loglik(weighted)
        sizes = np.unique([values[values > 0].min(), 0.5, largest])
        try:
            return all(constant(loglik(at(w)) - w * one) for w in sizes)
        except Exception:
            return False

    if np.ptp(np.asarray(theta), axis=0).max() > 0:
        for response in scalar:
            binary = pseudo.levels(layout.support(response)) == (0.0, 1.0)
            whole = bool(np.all(values == np.round(values)))
            if (binary and not whole) or (not binary and pseudo.is_discrete(layout.support(response))):
                continue  # trials are whole; class labels take neither
            try:
                if (trials if binary else exposure)(response):
                    return {"column": name, "response": response, "kind": "trials" if binary else "exposure"}
            except Exception:  # the model cannot take this column as the response
                continue
        # last: a row of none but zero responses passes it too (a binomial's c = 0: ℓ(n, 0) = n ℓ(1, 0))
        if weight():
            return {"column": name, "response": "", "kind": "weight"}
    raise ReconError(
        f"fixed {name!r} holds one value per data row, and they differ: the pseudo-rows the attack builds "
        f"cannot carry values known row by row. Values like these are taken as a row's weight, a "
        f"binomial's trials or a rate's exposure only where a row with {name} = u weighs as u rows with "
        f"{name} = 1 (a row whose likelihood is scaled by w as w rows; a row of n trials as n Bernoulli "
        f"rows; a Poisson count y of exposure t as t rows of rate y / t), checked at "
        f"different draws; this model's rows do not. {_made_free(name, values)}, or leave it out of the "
        "model's data."
    )


def rows_as_units(
    points: Mapping[str, np.ndarray], values: np.ndarray, units: Mapping[str, str]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Data rows as the measure :func:`check_units`' attack reconstructs, weightless points left out: for
    trials, every row as a point of successes (the response 1) weighing its successes and one of
    failures (0) weighing the rest; for an exposure, every row as a point of rate y / t weighing t; for a
    weight, every row as it is, weighing its weight."""
    response, size = units["response"], np.asarray(values, dtype=float)
    if units["kind"] == "weight":
        return {k: np.asarray(v)[size > 0] for k, v in points.items()}, size[size > 0]
    y = np.asarray(points[response], dtype=float)
    if units["kind"] == "exposure":
        kept = size > 0
        rates = {**points, response: y / np.where(kept, size, 1.0)}
        return {k: np.asarray(v)[kept] for k, v in rates.items()}, size[kept]
    weights = np.concatenate([y, size - y])
    doubled = {k: np.concatenate([v, v]) for k, v in points.items()}
    doubled[response] = np.concatenate([np.ones_like(y), np.zeros_like(y)])
    kept = weights > 0
    return {k: v[kept] for k, v in doubled.items()}, weights[kept]


def _is_count(value: Any) -> bool:
    return np.ndim(value) == 0 and np.issubdtype(np.asarray(value).dtype, np.integer) and value >= 1


def _counts_rows(
    model: Callable, shapes: Shapes, fixed: Mapping[str, Any], support: Mapping[str, Constraint], n: int
) -> bool:
    """Whether the model runs on exactly n pseudo-rows of these shapes: on n, not on n + 1."""
    layout = pseudo.Layout(shapes, column_supports(model, shapes, fixed, support))

    def runs_on(rows: int) -> bool:
        try:
            traced_sites(model, layout, fixed, rows)
        except ModelFailedOnShapes:
            return False
        return True

    return runs_on(n) and not runs_on(n + 1)


def runs_with_shapes(
    model: Callable,
    shapes: Shapes,
    fixed: Mapping[str, Any],
    support: Mapping[str, Constraint],
    draws: Mapping[str, np.ndarray],
) -> bool:
    """Whether the model runs on pseudo-rows of these per-row shapes with latent sites of the draws'
    shapes (never with a discrete vector per row, which would make 2^length strata)."""
    vectors = [k for k, shape in shapes.items() if shape]
    if any(pseudo.is_discrete(support.get(k, constraints.real)) for k in vectors):
        return False  # declared so: its strata are not even listed (a mask's length of the draws: 2^20)
    try:
        supports = column_supports(model, shapes, fixed, support)
        if any(pseudo.is_discrete(supports.get(k, constraints.real)) for k in vectors):
            return False
        latent = latent_shapes(model, pseudo.Layout(shapes, supports), fixed)
    except (ModelFailedOnShapes, LatentGrowsWithRows):
        return False
    released = chains_flattened(draws, {k: shape for k, shape in latent.items() if k in draws})
    return all(np.shape(released[k])[1:] == shape for k, shape in latent.items() if k in draws)


def rows_counted(model: Callable, name: str, columns: tuple[str, ...]) -> Callable:
    """``model`` with its argument ``name`` set to the number of rows of the free ``columns`` it is given
    (by keyword, as the attack calls it)."""

    @functools.wraps(model)
    def counted(**kwargs: Any) -> Any:
        given = [np.shape(kwargs[c])[0] for c in columns if kwargs.get(c) is not None]
        if not given:
            raise ReconError(
                f"the model's {name!r} is the number of rows of {list(columns)}, and none is given"
            )
        return model(**kwargs, **{name: given[0]})

    return counted


_NO_ROWS_OBSERVED = (
    "the model has no observed site for the free data; pass the data as the obs= of a site inside a "
    "numpyro.plate over the rows"
)


def check_rows_observed(weighted: WeightedModel, layout: pseudo.Layout) -> None:
    """Refuse a model whose observed sites are all terms of the prior (none takes the rows, nor sums a term
    per row: :func:`summed_sites`)."""
    _, observed = traced_sites(weighted.model, layout, weighted.fixed, 3)
    if observed <= weighted.prior_sites:
        raise ReconError(
            "no observed site of the model takes the rows one by one: its observed site(s) "
            f"{sorted(observed)} take no row of their own and are no sum of one term per row (a "
            "numpyro.factor of the rows' mean, of their sum plus a term of the parameters, or a "
            f"count's log-probability at values it cannot take; {_COUPLED_ROWS}). Give a factor one term per "
            "row inside a numpyro.plate over the rows, or make it the rows' sum alone, with a term of "
            "the parameters in a factor of its own."
        )


def check_one_row_plate(weighted: WeightedModel, layout: pseudo.Layout) -> None:
    """Refuse observed sites that take their rows from plates of different names: two data sets of rows of
    their own (a treatment and a control group, each its own size), which one weighted measure, a
    pseudo-row being one row of every free column, cannot hold."""

    def row_plates(n: int) -> dict[str, frozenset[str]]:
        found: dict[str, frozenset[str]] = {}

        def trace() -> None:
            sites = probe_trace(weighted.model, {**weighted.fixed, **layout.example(n)}).items()
            found.update(
                (k, frozenset(f.name for f in s["cond_indep_stack"] if f.size == n))
                for k, s in sites
                if s["type"] == "sample" and s["is_observed"] and k not in weighted.prior_sites
            )

        jax.eval_shape(trace)
        return found

    def runs_apart(column: str) -> bool:  # one column's rows fewer than the others': its own data set
        data = {**layout.example(4), column: layout.example(3)[column]}
        try:
            jax.eval_shape(lambda: probe_trace(weighted.model, {**weighted.fixed, **data}) and None)
        except Exception:  # the columns are paired row by row (x in one plate, y given x in another)
            return False
        return True

    three, four = row_plates(3), row_plates(4)
    plates = {k: names & four.get(k, frozenset()) for k, names in three.items()}
    plates = {k: names for k, names in sorted(plates.items()) if names}
    apart = [(a, b) for a, b in itertools.combinations(plates, 2) if not plates[a] & plates[b]]
    if apart and any(runs_apart(column) for column in layout.shapes):
        a, b = apart[0]
        raise ReconError(
            f"the observed sites {a!r} (plate {sorted(plates[a])}) and {b!r} (plate {sorted(plates[b])}) "
            "take their rows from different plates: two data sets with rows of their own, whose numbers may "
            "differ. The attack reconstructs one table of rows (a pseudo-row is one row of every free "
            f"column {list(layout.shapes)}). Reconstruct one data set at a time with the others passed as "
            "fixed, or write the model over one table with a group column (p[g] with g free and "
            "support={'g': constraints.integer_interval(0, G - 1)})."
        )


def latent_shapes(
    model: Callable, layout: pseudo.Layout, fixed: Mapping[str, Any]
) -> dict[str, tuple[int, ...]]:
    """The model's latent sites and shapes; refuses latent variables that grow with the data (per point)."""
    (three, observed), (four, _) = (traced_sites(model, layout, fixed, n) for n in (3, 4))
    if not observed:
        raise ReconError(_NO_ROWS_OBSERVED)
    per_point = [k for k in three if k not in observed and three[k] != four[k]]
    if per_point:
        masked = [k for k in masked_sites(model, layout, fixed, 3) if f"{k}_unobserved" in per_point]
        if masked:  # not a design matrix's miscounted columns: refused as it is, not retried
            raise ReconError(_masked_message(masked))
        raise LatentGrowsWithRows(
            f"latent site(s) {per_point} grow with the number of data points (a per-point latent "
            "variable, as in eight_schools): the posterior of the shared parameters does not pin down "
            "a data measure, so this attack does not apply. Use a model whose latent variables are "
            "shared by all data points (or marginalise the per-point ones)."
            + _summed_out(model, layout, fixed, per_point)
        )
    return {k: shape for k, shape in three.items() if k not in observed}


def masked_sites(model: Callable, layout: pseudo.Layout, fixed: Mapping[str, Any], n: int) -> list[str]:
    """The sites the model observes with ``obs_mask`` on n pseudo-rows: NumPyro splits such a site y into
    an observed y_observed and a latent y_unobserved, one value per masked entry, and puts them together
    in a deterministic site y."""
    try:
        trace = probe_trace(model, {**fixed, **layout.example(n)})
    except Exception:  # a model that fails here is refused elsewhere, by what failed
        return []
    return [
        name.removesuffix("_unobserved")
        for name, site in trace.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and name.endswith("_unobserved")
        and trace.get(name.removesuffix("_unobserved") + "_observed", {}).get("is_observed")
        and trace.get(name.removesuffix("_unobserved"), {}).get("type") == "deterministic"
    ]


def _masked_message(masked: list[str]) -> str:
    hidden = [f"{name}_unobserved" for name in masked]
    return (
        f"The model observes {masked} with obs_mask: NumPyro makes the masked entries latent sites "
        f"({hidden}), one per missing value, which no pseudo-data can stand for. Where nothing else of a "
        "row with a missing entry enters the likelihood, the released parameters depend on the observed "
        "entries alone: attack the rows observed whole, with the model called without the mask (leave it "
        f"out of fixed and free); the draws of {hidden} are then ignored."
    )


def _summed_out(
    model: Callable, layout: pseudo.Layout, fixed: Mapping[str, Any], per_point: list[str]
) -> str:
    """How to marginalise the discrete ones of the latent sites ``per_point`` (a mixture's component drawn
    per row, NumPyro's enumerated idiom), or nothing where none is discrete."""
    try:
        trace = probe_trace(model, {**fixed, **layout.example(3)})
    except Exception:  # the refusal stands without the advice
        return ""
    discrete = [k for k in per_point if k in trace and trace[k]["fn"].is_discrete]
    if not discrete:
        return ""
    return (
        f" {discrete} is discrete (a mixture's component or a class per row): sum it out in the row's "
        "likelihood, as dist.MixtureSameFamily(dist.Categorical(weights), dist.Normal(mu, sigma)) does for "
        "a mixture of normals (dist.MixtureGeneral for components of different families). NumPyro's "
        "enumeration (infer={'enumerate': 'parallel'}, needing funsor) sums it out inside NUTS, not in "
        "the model as the attack runs it."
    )


def prior_sites(model: Callable, layout: pseudo.Layout, fixed: Mapping[str, Any]) -> frozenset[str]:
    """Observed sites whose log-probability does not lead with the rows: terms of the
    prior, not of the rows' likelihood (a ``numpyro.factor`` of the parameters alone, an observation of
    fixed data). :func:`summed_sites` takes out those that sum a term per row; :func:`check_rows_observed`
    and :func:`check_rows_exchangeable` refuse any other that changes with the rows' values or number."""
    (three, observed), (four, _) = (traced_sites(model, layout, fixed, n) for n in (3, 4))
    return frozenset(_rowless(three, four, observed))


def summed_sites(
    weighted: WeightedModel, layout: pseudo.Layout, given: Mapping[str, Constraint], theta: np.ndarray
) -> frozenset[str]:
    """The :attr:`~bayes_recon.weighting.WeightedModel.prior_sites` that are the sum of one term per row (a
    ``numpyro.factor`` of ``dist.Normal(mu, sigma).log_prob(y).sum()``, Stan's vectorised ``target +=``): at
    the draws ``theta``, their value is finite and changes with the rows, and on 5 and on 4 rows of probe
    data it is the sum of their values on each row alone. The columns ``given`` a count's support are
    probed at whole numbers (a count the factor's own code validates is −∞ between them). Any other that
    changes with the rows is refused (:func:`check_rows_observed`, :func:`check_rows_exchangeable`)."""

    def value(name: str, data: Mapping[str, Array]) -> np.ndarray:
        alone = dataclasses.replace(weighted, prior_sites=frozenset({name}))
        return np.asarray(jax.vmap(alone.log_prior_sites, in_axes=(0, None))(jnp.asarray(theta), data))

    def by_rows(name: str, data: Mapping[str, Array]) -> np.ndarray:
        rows = len(next(iter(data.values())))
        return sum(value(name, {k: v[j : j + 1] for k, v in data.items()}) for j in range(rows))

    counts = {k: bounds for k, c in given.items() if (bounds := count_bounds(c)) is not None}

    def probe(seed: int, rows: int) -> dict[str, Array]:
        data = layout.probe(seed, rows)
        # whole numbers up to the highest count, included
        return {
            k: whole_numbers(v, counts[k][0], counts[k][1] + 1) if k in counts else v for k, v in data.items()
        }

    five, other, four = probe(3, 5), probe(4, 5), probe(5, 4)
    found = set()
    for name in sorted(weighted.prior_sites):
        try:
            at = [value(name, data) for data in (five, other, four)]
            if not all(np.isfinite(a).all() for a in at):
                continue  # refused as it is, with the other checks' reasons
            if all(np.allclose(a, at[0], rtol=1e-6) for a in at[1:]):
                continue  # a term of the prior
            additive = all(
                np.allclose(at[i], by_rows(name, data), rtol=1e-6, atol=1e-8)
                for i, data in ((0, five), (2, four))
            )
        except Exception:  # a site the rows alone cannot evaluate is no sum of theirs
            continue
        if additive:
            found.add(name)
    return frozenset(found)


def _rowless(three: Mapping[str, Any], four: Mapping[str, Any], observed: set[str]) -> set[str]:
    """The observed sites whose log-probability does not lead with the rows (its first dimension is not 3 on
    3 rows and 4 on 4): a term of the prior, or the rows' terms laid out otherwise (rows of vectors
    flattened into one event, a plate over the rows inside another), which :func:`summed_sites` weighs
    as a sum where it is one."""
    return {k for k in observed if three[k][:1] != (3,) or four[k][:1] != (4,)}


def free_shapes(free: Free) -> Shapes:
    """Each free column's shape per row: names alone are scalars; a whole number n is (n,), as numpy reads
    a shape (so is a numpy array of whole numbers)."""
    if isinstance(free, Mapping):
        shapes = {k: _as_shape(v) for k, v in free.items()}
        bad = {k: free[k] for k, v in shapes.items() if not _is_shape(v)}
        if bad:
            raise ReconError(
                f"free gives {bad} as per-row shape(s): a shape is a whole number n ≥ 1 (read as (n,)) or a "
                "tuple of them, e.g. free={'X': (5,), 'y': ()} for five covariates and a scalar response "
                "per row"
            )
        return {k: tuple(int(d) for d in v) for k, v in shapes.items()}
    if isinstance(free, str):
        return {free: ()}
    return {k: () for k in free}


def _as_shape(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.ndim <= 1 and np.issubdtype(value.dtype, np.integer):
        return tuple(np.atleast_1d(value).tolist())
    return (value,) if isinstance(value, int | np.integer) else value


def _is_shape(value: Any) -> bool:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        return False
    return all(isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 1 for d in value)


def row_shapes_inferred(
    model: Callable,
    names: Sequence[str],
    fixed: Mapping[str, Any],
    support: Mapping[str, Constraint],
    draws: Mapping[str, np.ndarray],
) -> Shapes | None:
    """Per-row shapes of columns named in a list, where the model failed on one number per row (or grew
    a latent site with the rows, as ``X.shape[-1]`` does): up to MOST_VECTOR_COLUMNS continuous columns a
    vector per row, of a length of a vector of the draws (a design matrix X in X @ b), where the model
    runs with latent sites of the draws' shapes and not one longer; the fewest such columns, an error
    if that leaves a choice, None if no shape runs. Another refusal (no observed site) is raised."""
    sizes = sorted({v.shape[-1] for v in draws.values() if np.ndim(v) >= 2 and v.shape[-1] >= 2})

    def fixes_its_length(shapes: Shapes) -> bool:
        return runs_with_shapes(model, shapes, fixed, support, draws) and not any(
            runs_with_shapes(model, {**shapes, k: (shape[0] + 1,)}, fixed, support, draws)
            for k, shape in shapes.items()
            if shape
        )

    scalar = dict.fromkeys(names, ())
    for count in range(1, min(len(names), MOST_VECTOR_COLUMNS) + 1):
        found = [
            {**scalar, **{name: (size,) for name, size in zip(vectors, lengths, strict=True)}}
            for vectors in itertools.combinations(names, count)
            for lengths in itertools.product(sizes, repeat=count)
        ]
        found = [shapes for shapes in found if fixes_its_length(shapes)]
        if len(found) == 1:
            return found[0]
        if found:
            raise ReconError(
                f"the model runs with more than one shape per row of {list(names)}: {found}; give free "
                "as a dict of per-row shapes, e.g. free={'X': (2,), 'y': ()}"
            )
    return None


def check_rows_exchangeable(weighted: WeightedModel, layout: pseudo.Layout, theta: np.ndarray) -> None:
    """Refuse a likelihood in which a row's position matters (a per-row parameter indexed by row).

    The attack needs log p(data | θ) = Σ_i ℓ(x_i, θ) with one ℓ for every row: then permuting the
    rows permutes the per-row log-likelihoods, and changing one row leaves the others'. A parameter
    vector indexed by the row number (eight_schools' θ_j, however it is written) breaks the first, a
    covariate standardised by the data's own mean inside the model the second. Checked at a few
    draws on random rows of the columns' supports.
    """
    data = layout.probe(3, 5)
    order = np.array([1, 2, 3, 4, 0])
    shuffled = {k: v[order] for k, v in data.items()}
    other = layout.probe(4, 5)
    differs = [j for j in range(5) if any(np.any(other[k][j] != v[4]) for k, v in data.items())]
    last_changed = {k: v.at[4].set(other[k][differs[0] if differs else 4]) for k, v in data.items()}
    fewer = layout.probe(5, 4)
    try:
        if weighted.prior_sites:
            prior = jax.jit(jax.vmap(weighted.log_prior_sites, in_axes=(0, None)))
            at = [np.asarray(prior(jnp.asarray(theta), d)) for d in (data, other, fewer)]
            if not all(np.allclose(a, at[0], rtol=1e-6, equal_nan=True) for a in at[1:]):
                raise ReconError(
                    f"the observed site(s) {sorted(weighted.prior_sites)} take no row of their own but "
                    "change with the data or its number of rows, and are no sum of one term per row (a "
                    "numpyro.factor of the rows' mean, or of their sum plus a term of the parameters; "
                    f"{_COUPLED_ROWS}): the attack weighs rows one by one, so give a factor one entry per "
                    "row inside the numpyro.plate over the rows, or put a term of the parameters in a "
                    "factor of its own."
                )
        loglik = jax.jit(jax.vmap(weighted.loglik_per_point, in_axes=(0, None)))
        before, after, beside = (
            np.asarray(loglik(jnp.asarray(theta), d)) for d in (data, shuffled, last_changed)
        )
    except ReconError:
        raise
    except Exception as err:  # shapes that only fit the true data's row count
        raise ReconError(
            f"the model cannot be evaluated row by row on 5 rows of pseudo-data ({err!r}); its "
            "likelihood must be a sum of one term per data row, each row's term inside a "
            "numpyro.plate over the rows, or one numpyro.factor of their sum. A per-row "
            "parameter sized by a fixed argument (eight_schools with J fixed) is out of this attack's "
            "scope."
        ) from err
    same = np.isclose(after, before[:, order], rtol=1e-6, atol=1e-8) | ~np.isfinite(before[:, order])
    if not same.all():
        raise ReconError(
            "the model's likelihood is not the same function for every data row: permuting the rows "
            "changes the rows' log-likelihoods. A parameter per row (indexed by the row's position, as "
            "eight_schools' theta[j]) or a term that couples rows makes the posterior of the shared "
            "parameters no function of a data measure, so this attack does not apply."
        )
    kept = before[:, :4]
    if not np.all(np.isclose(beside[:, :4], kept, rtol=1e-6, atol=1e-8) | ~np.isfinite(kept)):
        raise ReconError(
            "a row's log-likelihood depends on the other rows: changing one row changed the others' "
            "(a covariate standardised by the data's own mean or sd inside the model, or a term over "
            "all rows). The attack weighs rows one by one, so each row's likelihood must be its own: "
            "compute such constants from the data outside the model and pass them as fixed."
        )


def check_data_support(
    model: Callable,
    columns: Mapping[str, np.ndarray],
    fixed: Mapping[str, Any],
    given: Mapping[str, Constraint],
) -> None:
    """Refuse a data set (the truth an audit scores against) with values off the supports: a column's
    ``given`` support, or the support of the distribution of an observed site (y = 2.5 under a Poisson)."""
    for name, support in given.items():
        where = f"the support given for it, {_named(support)},"
        if np.ndim(columns[name]) <= support.event_dim:  # a vector's support on one number per row
            raise ReconError(
                f"the data column {name!r} holds one number per row, but {where} holds a vector per row "
                f"(a composition's shares): give the column its entries ({name}.1, {name}.2, ... in a "
                "CSV file) or another support"
            )
        _inside(support, columns[name], f"the data column {name!r}", where)
    try:
        trace = probe_trace(model, {**fixed, **{k: jnp.asarray(v) for k, v in columns.items()}})
    except Exception as err:  # the user's model on the user's data
        raise ReconError(
            f"the model failed on the data ({type(err).__name__}: {err}); check that the data holds the "
            "columns the model takes, each with one row per data point"
        ) from err
    for name, site in trace.items():
        if site["type"] == "sample" and site["is_observed"]:
            support = site["fn"].support
            where = f"the support of its distribution, {_named(support)},"
            _inside(support, site["value"], f"the data of the observed site {name!r}", where)


def _named(support: Constraint) -> str:
    """``positive``, ``nonnegative_integer``: a constraint as --support names it, where it has a name."""
    names = [k for k, v in vars(constraints).items() if repr(v) == repr(support) and not k.startswith("_")]
    return names[0] if names else str(support)


def _inside(support: Constraint, values: Any, what: str, where: str) -> None:
    values = np.asarray(values)
    shape = values.shape[: values.ndim - support.event_dim]
    inside = np.broadcast_to(np.asarray(support.check(jnp.asarray(values))), shape)
    if not inside.all():
        first = tuple(int(i) for i in np.argwhere(~inside)[0])
        row = f"(first in row {first[0]}: {values[first].tolist()})" if first else "(a single value)"
        hint = (
            "shares of a whole sum to 1: rounded when written? keep more digits or divide each row by its sum"
            if support is constraints.simplex
            else "the right column? a count written as a fraction?"
        )
        raise ReconError(
            f"{what} has {int((~inside).sum())} value(s) outside {where} {row}; check the data "
            f"file ({hint}) or the model"
        )
