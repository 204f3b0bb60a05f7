"""Label switching: a mixture's exchangeable components put in one order before two posteriors are compared.

A mixture whose components are exchangeable (the same prior for each, a likelihood that sums over
them) has a posterior invariant under relabelling its components: K! copies of every mode. A release
drawn by MCMC may visit several copies (posteriordb's low_dim_gauss_mix_collapse switches labels
about every 100 draws) while the self-check's own chain keeps one, and compared coordinate by
coordinate the two look like different posteriors when they are one. Putting every draw's components
in the order of one component parameter (an identifiability constraint imposed after sampling) maps
two posteriors that agree up to labels to one distribution, since the same map is applied to both.

The symmetry is found, not declared (:func:`find_relabelling`): the latent sites whose last axis has
K ≥ 2 entries are the candidates; with K = 2, a scalar on the unit interval may be a two-component
mixture's weight, relabelled as 1 − θ. A candidate is a symmetry if swapping components i and i + 1
(every i) leaves the prior density and every pseudo-point's log-likelihood unchanged, in constrained
coordinates, at several draws. The largest such set of sites is taken. A model without one (ordered
means, a regression's coefficients) is compared as it is. The symmetry is the pseudo-data's posterior's:
pseudo-data too degenerate to break one the true data break (a constant column) would have both samples
ordered, and the comparison lose power, not validity.

A sign can be exchangeable too: a network's hidden unit with an odd activation (tanh) computes the same
function with its incoming weights, bias and outgoing weights all negated, so a one-hidden-layer
regression's posterior has 2^K · K! copies of every mode. Sites on the real line among the candidates
are tested the same way, negating component i of a set of them (every i); where that is a symmetry,
every draw's components are first given the sign that makes one site's first entry of each component
non-negative (the site whose entries keep farthest from zero against their spread), then ordered. With
swaps, only sites that swap take part: a sign set by a unit's key must move with the unit. On a tanh
regression of three hidden units (300 rows, one NUTS chain of 1,000 draws that crossed between sign
copies) the true data reproduced the release at 1 of 10 NUTS seeds with the units ordered only (means
up to 0.72 posterior sd off) and at 5 of 10 with their signs set first (sd ratios up to 1.30 off the
0.8–1.25 band, where the release's own halves differ by up to 1.38).

One symmetry is taken: the components that swap at the smallest length K where any do (with their
signs), else the signs at the smallest K where any are exchangeable. A model with symmetries of two
lengths (a mixture beside a network) is compared with the other's copies as drawn.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.infer.util import constrain_fn

from bayes_recon.weighting import WeightedModel

Array = jax.Array

PROBE_DRAWS = 20  # released draws at which a candidate symmetry must hold
MOST_CANDIDATE_SITES = 6  # more sites of one K (or unit-interval scalars): only all or none are tried
INVARIANCE_TOLERANCE = 1e-8  # relative change of a log density that counts as none (rounding, in float64)


class Relabelling(NamedTuple):
    """Swapping the components of ``sites`` (along their last axis, K entries each), and for K = 2 taking
    1 − θ of each of ``flipped``, leaves the weighted posterior as it is; ``key``'s first K entries set
    the order. So does negating component i (every i) of every site in ``negated``, whose signs are set
    first, so that ``sign_key``'s first K entries are positive. ``sites`` is empty where only signs are
    exchangeable."""

    sites: tuple[str, ...]
    flipped: tuple[str, ...]
    key: str
    components: int
    negated: tuple[str, ...] = ()
    sign_key: str = ""

    def describe(self) -> str:
        flipped = f" (and {', '.join(self.flipped)} as 1 − itself)" if self.flipped else ""
        signs = f"the signs of {', '.join(self.negated)} set by {self.sign_key}" if self.negated else ""
        if not self.sites:
            return f"{signs} ({self.components} exchangeable signs)"
        ordered = (
            f"the {self.components} exchangeable components of {', '.join(self.sites)}{flipped} "
            f"compared in the order of {self.key}"
        )
        return f"{ordered}, {signs}" if signs else ordered


def find_relabelling(
    weighted: WeightedModel, data: Mapping[str, Array], theta: np.ndarray
) -> Relabelling | None:
    """The largest relabelling symmetry of the prior and of the likelihood of every point of ``data`` (see the
    module's docstring), or None; ``theta`` (S, d): draws in the model's flat unconstrained coordinates.
    A model without a latent site of two or more entries on its last axis stops before anything is
    compiled. The pseudo-data are traced arguments, never constants: a distribution whose parameters
    they set is not validated (and refused) as it is built."""
    data = {k: jnp.asarray(v) for k, v in data.items()}
    shapes, unit, real = _latent_sites(weighted, data, jnp.asarray(theta[0]))
    by_length: dict[int, list[str]] = {}
    for name, shape in shapes.items():
        if len(shape) >= 1 and shape[-1] >= 2:
            by_length.setdefault(shape[-1], []).append(name)
    probe = np.asarray(theta)[np.linspace(0, len(theta) - 1, min(PROBE_DRAWS, len(theta))).astype(int)]
    signs_only = None  # taken where no components are exchangeable
    for k, names in sorted(by_length.items()):
        flips = unit if k == 2 else []
        signed = [name for name in names if name in real]
        candidates = _candidates(names, flips)
        negations = [chosen for chosen in _subsets(signed) if chosen]
        values, unchanged, negatable = _test_swaps(
            weighted, data, probe, k, names, flips, signed, candidates, negations
        )
        swapped = next((pair for pair, ok in zip(candidates, unchanged, strict=True) if ok), None)
        # a sign set by one unit's key must move with that unit: with swaps, only sites that swap
        negated = next(
            (
                chosen
                for chosen, ok in zip(negations, negatable, strict=True)
                if ok and (swapped is None or set(chosen) <= set(swapped[0]))
            ),
            [],
        )
        sign_key = max(negated, key=lambda name: _off_zero(values[name], k)) if negated else ""
        values = _signs_set(values, negated, sign_key, k)
        if swapped is not None:
            chosen, flipped = swapped
            key = max(chosen, key=lambda name: _separation(values[name], k))
            return Relabelling(tuple(chosen), tuple(flipped), key, k, tuple(negated), sign_key)
        if negated and signs_only is None:
            signs_only = Relabelling((), (), "", k, tuple(negated), sign_key)
    return signs_only


def relabel(
    weighted: WeightedModel, data: Mapping[str, Array], relabelling: Relabelling, theta: np.ndarray
) -> np.ndarray:
    """Every draw of ``theta`` (S, d; flat unconstrained) with its signs and components in ``relabelling``'s
    order."""
    k = relabelling.components
    values = constrained_values(weighted, data, theta)
    values = _signs_set(values, list(relabelling.negated), relabelling.sign_key, k)
    if relabelling.sites:
        key = values[relabelling.key].reshape(len(theta), -1, k)[:, 0, :]
        order = np.argsort(key, axis=1, kind="stable")
        for name in relabelling.sites:
            v = values[name]
            index = order.reshape((len(theta),) + (1,) * (v.ndim - 2) + (k,))
            values[name] = np.take_along_axis(v, np.broadcast_to(index, v.shape), axis=-1)
        for name in relabelling.flipped:  # K = 2: where the labels were exchanged, the weight is the other's
            values[name] = np.where(order[:, 0] == 1, 1.0 - values[name], values[name])
    return weighted.to_unconstrained(values, data)


def _signs_set(
    values: Mapping[str, np.ndarray], negated: list[str], sign_key: str, k: int
) -> dict[str, np.ndarray]:
    """``values`` (a leading draw axis) with component i of every ``negated`` site negated in the draws
    where ``sign_key``'s first entry of that component is negative."""
    values = dict(values)
    if negated:
        key = values[sign_key].reshape(len(values[sign_key]), -1, k)[:, 0, :]
        sign = np.where(key < 0, -1.0, 1.0)
        for name in negated:
            v = values[name]
            values[name] = v * sign.reshape((len(v),) + (1,) * (v.ndim - 2) + (k,))
    return values


def constrained_values(
    weighted: WeightedModel, data: Mapping[str, Array], theta: np.ndarray
) -> dict[str, np.ndarray]:
    """The latent sites' constrained values at each flat unconstrained draw, {site: (S, ...)}."""
    each = jax.jit(jax.vmap(partial(_constrained_draw, weighted), (None, 0)))
    return {k: np.asarray(v) for k, v in each(dict(data), jnp.asarray(theta)).items()}


def _constrained_draw(weighted: WeightedModel, data: Mapping[str, Array], x: Array) -> dict[str, Array]:
    values = constrain_fn(weighted.model, (), weighted._kwargs(data), weighted.unravel(x))
    return {k: values[k] for k in weighted.latent_example}


def _latent_sites(
    weighted: WeightedModel, data: Mapping[str, Array], x: Array
) -> tuple[dict[str, tuple[int, ...]], list[str], list[str]]:
    """Every latent site's constrained shape, the scalars on the unit interval and the sites on the real
    line (traced, not compiled)."""
    supports: dict[str, constraints.Constraint] = {}

    def shapes(data: Mapping[str, Array], x: Array) -> dict[str, Array]:
        values = _constrained_draw(weighted, data, x)
        run = handlers.trace(handlers.substitute(weighted.model, values))
        trace = run.get_trace(**weighted._kwargs(data))
        supports.update({k: site["fn"].support for k, site in trace.items() if site["type"] == "sample"})
        return values

    found = jax.eval_shape(shapes, dict(data), x)
    unit = [
        k
        for k, v in found.items()
        if v.ndim == 0 and isinstance(supports[k], type(constraints.unit_interval))
    ]
    real = [k for k in found if _on_the_real_line(supports[k])]
    return {k: v.shape for k, v in found.items()}, unit, real


def _on_the_real_line(support: constraints.Constraint) -> bool:
    """Every entry anywhere on the real line (``real``, or ``real`` over an event), so negating one stays
    inside."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return isinstance(support, type(constraints.real))


def _subsets(items: list[str]) -> list[list[str]]:
    """Every subset of ``items``, the largest first; over MOST_CANDIDATE_SITES items, all or none."""
    if len(items) > MOST_CANDIDATE_SITES:
        return [items, []]
    return [list(c) for r in range(len(items), -1, -1) for c in itertools.combinations(items, r)]


def _candidates(names: list[str], flips: list[str]) -> list[tuple[list[str], list[str]]]:
    """Sets of sites to swap and unit-interval scalars to flip, the largest first."""
    pairs = [(chosen, flipped) for chosen in _subsets(names) if chosen for flipped in _subsets(flips)]
    return sorted(pairs, key=lambda pair: -(len(pair[0]) + len(pair[1])))


def _test_swaps(
    weighted: WeightedModel,
    data: Mapping[str, Array],
    probe: np.ndarray,
    k: int,
    names: list[str],
    flips: list[str],
    signed: list[str],
    candidates: list[tuple[list[str], list[str]]],
    negations: list[list[str]],
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The probe draws' constrained values; for each candidate whether swapping components i and i + 1
    (every i) of its sites, and flipping its scalars, leaves the prior and every point's log-likelihood
    (:meth:`~bayes_recon.weighting.WeightedModel.constrained_terms`) as they are at every probe draw; and
    for each of ``negations`` (sets of the ``signed`` sites) whether negating component i (every i) of
    its sites does. One program for all candidates (masks over ``names``, ``flips`` and ``signed``),
    taken one at a time. Constrained: a relabelling need not keep the Jacobian of NumPyro's
    unconstraining (a simplex's stick-breaking)."""
    chosen = np.array([[name in c for name in names] for c, _ in candidates])
    flipped = np.array([[name in f for name in flips] for _, f in candidates]).reshape(len(candidates), -1)
    negate = np.array([[name in c for name in signed] for c in negations], bool).reshape(
        len(negations), len(signed)
    )
    swaps = np.array([np.r_[np.arange(i), i + 1, i, np.arange(i + 2, k)] for i in range(k - 1)])
    signs = 1.0 - 2.0 * np.eye(k)  # row i negates component i

    @jax.jit
    def program(
        data: Mapping[str, Array], x: Array, chosen: Array, flipped: Array, negate: Array
    ) -> tuple[dict[str, Array], Array, Array]:
        values = jax.vmap(partial(_constrained_draw, weighted, data))(x)
        terms = jax.vmap(lambda v: weighted.constrained_terms(v, data))
        before = terms(values)

        def same(each: Array) -> Array:
            return jnp.all(jnp.abs(each - before) <= INVARIANCE_TOLERANCE * (1.0 + jnp.abs(before)))

        def unchanged(masks: tuple[Array, Array]) -> Array:
            def after(order: Array) -> Array:
                swapped = dict(values)
                for j, name in enumerate(names):
                    swapped[name] = jnp.where(masks[0][j], values[name][..., order], values[name])
                for j, name in enumerate(flips):
                    swapped[name] = jnp.where(masks[1][j], 1.0 - values[name], values[name])
                return terms(swapped)

            return same(jax.vmap(after)(jnp.asarray(swaps)))

        def negatable(mask: Array) -> Array:
            def after(sign: Array) -> Array:
                negated = dict(values)
                for j, name in enumerate(signed):
                    negated[name] = jnp.where(mask[j], values[name] * sign, values[name])
                return terms(negated)

            return same(jax.vmap(after)(jnp.asarray(signs)))

        found = jax.lax.map(negatable, negate) if len(negations) else jnp.zeros(0, bool)
        return values, jax.lax.map(unchanged, (chosen, flipped)), found

    values, unchanged, negatable = program(
        dict(data), jnp.asarray(probe), jnp.asarray(chosen), jnp.asarray(flipped), jnp.asarray(negate)
    )
    return {k: np.asarray(v) for k, v in values.items()}, np.asarray(unchanged), np.asarray(negatable)


def _off_zero(v: np.ndarray, k: int) -> float:
    """How far from zero a site's components keep, against their spread: its sign is then rarely in doubt."""
    size = np.abs(v.reshape(len(v), -1, k)[:, 0, :])
    return float(np.min(size.mean(axis=0) / (size.std(axis=0) + 1e-300)))


def _separation(v: np.ndarray, k: int) -> float:
    """How far apart a site's components lie within a draw, against their spread over all draws."""
    components = v.reshape(len(v), -1, k)[:, 0, :]
    return float(np.mean(np.std(components, axis=1)) / (np.std(components) + 1e-300))
