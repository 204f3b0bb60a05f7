"""The pseudo-data measure Σ_j w_j δ_{x_j} as unconstrained, well-conditioned parameters.

The hard part of the attack is conditioning: a data column may sit near 100 or 20,000 while
the initial guess sits near 0, and the total mass (the number of data points, hundreds) is
unknown. Nothing about the true data may be assumed, so the scale is learned, in two layers:

* a *cloud*: a location ``shift`` and a lower-triangular ``scale`` (log diagonal) acting on fixed
  base points (standard normal, whitened so their mean is exactly 0 and covariance exactly I)
  and one ``log_mass``. Its few parameters move the whole cloud; for a model whose features are
  first and second moments (any Gaussian linear model) the cloud alone spans every reachable
  statistic, so a first stage fitting the cloud alone lands near the optimum.
* *point* parameters: per-point residuals in the cloud's whitened units, and per-point log
  weights through a softmax (so they never collapse to zero and do not compete with the mass).

Points are z_j = shift + scale (u_j + r_j) in each column's unconstrained space, then mapped to
the data's support (positive, bounded, real) by NumPyro's bijections.

Discrete columns of few values — binary (support ``constraints.boolean``, or :class:`Dummy` for the
indicators of one categorical variable) and small integer ranges (a Categorical or ordinal
response, ``constraints.integer_interval(0, K - 1)``) — are not relaxed to an interval, where the
true data would sit on the boundary and the optimiser would chase infinite logits (and where a
Categorical's log-probability is not even defined). They stratify the pseudo-data instead: each
combination of their values (fewer when dummies of one variable exclude each other) gets M
points with exact values and a cloud (and mass) of its own, so group sizes and within-group
moments (an interaction term's statistics) are all in reach of the clouds. Every array below
carries the leading stratum axis C (C = 1 without discrete columns).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.constraints import Constraint
from numpyro.distributions.transforms import biject_to

from bayes_recon.divergence import map_in_chunks
from recon_core.errors import ReconError

Array = jax.Array
MAX_STRATA = 16


class Cloud(NamedTuple):
    shift: Array  # (C, D)
    log_diag: Array  # (C, D)
    lower: Array  # (C, D(D-1)/2): the strictly-lower entries of the scale, row by row
    log_mass: Array  # (C,)

    def scale(self) -> Array:
        """The lower-triangular scale matrices (C, D, D)."""
        c, d = self.shift.shape
        rows, cols = np.tril_indices(d, -1)
        lower = jnp.zeros((c, d, d)).at[:, rows, cols].set(self.lower)
        return lower + jax.vmap(jnp.diag)(jnp.exp(self.log_diag))


class Points(NamedTuple):
    residual: Array  # (C, M, D)
    logit: Array  # (C, M)


class Pseudo(NamedTuple):
    cloud: Cloud
    points: Points


class Dummy(constraints.Constraint):
    """0/1 values, one indicator of a categorical variable: at most one indicator of ``variable`` is 1.

    Declaring a dummy-coded variable this way (``support={"age30_44": Dummy("age"), ...}``) keeps
    its K indicators to K + 1 strata instead of 2^K combinations that the data cannot contain.
    """

    is_discrete = True
    event_dim = 0

    def __init__(self, variable: str) -> None:
        self.variable = variable

    def __call__(self, x: Array) -> Array:
        return (x == 0) | (x == 1)

    def feasible_like(self, prototype: Array) -> Array:
        return jnp.zeros_like(prototype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dummy) and other.variable == self.variable

    def __hash__(self) -> int:
        return hash(("Dummy", self.variable))


def levels(support: Constraint) -> tuple[float, ...] | None:
    """The values of a discrete column that stratifies the pseudo-data, or None for a continuous one."""
    if support is constraints.boolean or isinstance(support, Dummy):
        return (0.0, 1.0)
    if isinstance(support, constraints._IntegerInterval):
        low, high = common_bound(support.lower_bound), common_bound(support.upper_bound)
        if low is not None and high is not None and 0 <= high - low < MAX_STRATA:
            return tuple(float(v) for v in range(int(low), int(high) + 1))
    return None


def common_bound(bound: Any) -> float | None:
    """A support's bound as one number, or None when it differs between rows.

    NumPyro broadcasts a Binomial's ``total_count`` to the batch, so a scalar count arrives as an
    array of equal values."""
    values = np.unique(np.asarray(bound))
    return float(values[0]) if values.size == 1 else None


def is_discrete(support: Constraint) -> bool:
    return levels(support) is not None


def is_binary(support: Constraint) -> bool:
    return levels(support) == (0.0, 1.0)


@dataclass(frozen=True)
class Layout:
    """Names, trailing shapes and supports of the free columns: D continuous and B discrete coordinates."""

    shapes: Mapping[str, tuple[int, ...]]
    supports: Mapping[str, Constraint]

    def __post_init__(self) -> None:
        # counted without listing them all: a column with a row's worth of binary entries has 2^N
        if sum(1 for _ in itertools.islice(self._combinations(), MAX_STRATA + 1)) > MAX_STRATA:
            raise ReconError(
                f"{self.discrete_dim} binary or discrete data coordinates make over {MAX_STRATA} "
                "combinations of values; the pseudo-data has M points per combination, so at most "
                f"{MAX_STRATA} are supported. "
                "Declare the indicators of one categorical variable support=bayes_recon.Dummy(variable), "
                "or others with support=constraints.unit_interval (a continuous relaxation), or fix some "
                "of them (fixed=...)."
            )

    def support(self, name: str) -> Constraint:
        return self.supports.get(name, constraints.real)

    def unbounded(self) -> set[str]:
        """Continuous columns whose support has no upper bound (real, positive): no natural centre. A
        simplex's centre is the even composition, 0 in its unconstrained coordinates."""
        return {
            k
            for k in self.widths(False)
            if not hasattr(self.support(k), "upper_bound") and self.support(k) is not constraints.simplex
        }

    def widths(self, discrete: bool) -> dict[str, int]:
        """Coordinates per column: a continuous column's in its unconstrained space (a simplex of K
        entries has K − 1), a discrete column's one per entry."""
        return {
            k: int(np.prod(s if discrete else self.unconstrained_shape(k), dtype=int))
            for k, s in self.shapes.items()
            if is_discrete(self.support(k)) == discrete
        }

    def unconstrained_shape(self, name: str) -> tuple[int, ...]:
        """A continuous column's trailing shape in its unconstrained space: its own, but for a support on a
        vector (a simplex's last axis loses one entry)."""
        support, shape = self.support(name), self.shapes[name]
        return tuple(biject_to(support).inverse_shape(shape)) if support.event_dim else shape

    @property
    def dim(self) -> int:
        """Continuous (unconstrained) coordinates D."""
        return sum(self.widths(False).values())

    @property
    def discrete_dim(self) -> int:
        return sum(self.widths(True).values())

    @property
    def strata(self) -> Array:
        """The C combinations of discrete values the data can take, (C, B): at most one dummy per variable."""
        combinations = list(self._combinations())
        return jnp.asarray(combinations, dtype=float).reshape(len(combinations), self.discrete_dim)

    def _combinations(self) -> Iterator[tuple[float, ...]]:
        coordinates = [self.support(name) for name, width in self.widths(True).items() for _ in range(width)]
        variables = [getattr(support, "variable", None) for support in coordinates]
        exclusive = [[i for i, v in enumerate(variables) if v == var] for var in set(variables) - {None}]
        for bits in itertools.product(*(levels(support) for support in coordinates)):
            if all(sum(bits[i] for i in group) <= 1 for group in exclusive):
                yield bits

    def assemble(self, z: Array, bits: Array) -> dict[str, Array]:
        """(M, D) unconstrained and (M, B) discrete coordinates → {name: (M, *shape)} on each support."""
        out = {}
        for discrete, block in ((False, z), (True, bits)):
            start = 0
            for name, width in self.widths(discrete).items():
                part = block[:, start : start + width]
                if discrete:
                    value = self._discrete(name, part)
                else:
                    part = part.reshape((block.shape[0], *self.unconstrained_shape(name)))
                    value = biject_to(self.support(name))(part)
                out[name] = value.reshape((block.shape[0], *self.shapes[name]))
                start += width
        return {name: out[name] for name in self.shapes}

    def _discrete(self, name: str, values: Array) -> Array:
        """Class labels as integers (a Categorical indexes with them); 0/1 columns stay floats."""
        return values if is_binary(self.support(name)) else jnp.round(values).astype(int)

    def typed(self, points: Mapping[str, Any]) -> dict[str, Array]:
        """Data read from a file ({name: (M, *shape)}, floats) as :meth:`assemble` gives points: class
        labels as integers, an ordered logistic's or a Categorical's index (floats fail there)."""
        return {
            name: self._discrete(name, jnp.asarray(v)) if is_discrete(self.support(name)) else jnp.asarray(v)
            for name, v in points.items()
        }

    def unconstrain(self, points: Mapping[str, Array]) -> Array:
        """{name: (M, *shape)} → the (M, D) unconstrained continuous coordinates (inverse of ``assemble``)."""
        blocks = [
            biject_to(self.support(name))
            .inv(jnp.reshape(points[name], (-1, *self.shapes[name])))
            .reshape(-1, width)
            for name, width in self.widths(False).items()
        ]
        return jnp.concatenate(blocks, axis=1) if blocks else jnp.zeros((len(next(iter(points.values()))), 0))

    def coordinates_of(self, names: set[str]) -> list[int]:
        """Indices of the continuous coordinates that belong to the named columns."""
        indices, start = [], 0
        for name, width in self.widths(False).items():
            if name in names:
                indices += list(range(start, start + width))
            start += width
        return indices

    def example(self, n: int) -> dict[str, Array]:
        """n points at the centre of each support (discrete columns at their first stratum's values)."""
        return self.assemble(
            jnp.zeros((n, self.dim)), jnp.broadcast_to(self.strata[0], (n, self.discrete_dim))
        )

    def probe(self, seed: int, n: int) -> dict[str, Array]:
        """n random points spread over the supports (for spans of statistics), from numpy's generator
        seeded with ``seed``: the checks of a model call it before the attack, where JAX's random
        numbers were two dozen small compilations (1.2 s of kidiq's 5 s of checks)."""
        return self.assemble(*self.probe_coordinates(np.random.default_rng(seed), n))

    def probe_coordinates(self, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        """The unconstrained coordinates (n, dim) and discrete values (n, B) of :meth:`probe`'s points."""
        strata = np.asarray(self.strata)
        z, rows = 2.0 * rng.standard_normal((n, self.dim)), rng.integers(len(strata), size=n)
        return jnp.asarray(z), jnp.asarray(strata[rows])

    def random_bits(self, key: Array, n: int) -> Array:
        """(n, B) discrete values drawn from ``strata``: indicators of one variable are never 1 together
        (statistics of such rows are out of the data's reach)."""
        return self.strata[jax.random.randint(key, (n,), 0, len(self.strata))]


def base_points(key: Array, n_points: int, dim: int) -> Array:
    """Standard normal points, whitened to mean 0 and covariance I exactly when n_points > dim."""
    u = jax.random.normal(key, (n_points, dim))
    if n_points <= dim:
        return u
    u = u - u.mean(axis=0)
    cov = u.T @ u / n_points
    return jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(cov), u.T, lower=True).T


def unit_points(cloud: Cloud, n_points: int) -> Points:
    """Points on the cloud's base points, all of one weight."""
    c, d = cloud.shift.shape
    return Points(jnp.zeros((c, n_points, d)), jnp.zeros((c, n_points)))


def initial(n_points: int, layout: Layout) -> Pseudo:
    """Unit clouds at the origin of the unconstrained space, total mass ``n_points`` shared by the strata."""
    c, d = layout.strata.shape[0], layout.dim
    lower = jnp.zeros((c, d * (d - 1) // 2))
    cloud = Cloud(jnp.zeros((c, d)), jnp.zeros((c, d)), lower, jnp.full(c, -np.log(c)))
    return Pseudo(cloud, Points(jnp.zeros((c, n_points, d)), jnp.zeros((c, n_points))))


# A column's spread and location may sit anywhere from 1e-6 to 1e6 (a unit change of 10⁴ either way
# of a column at 0.01 or 100): coarse grids over e^-14 … e^14, each refined around its best by
# halving steps. A covariate behind a log link is sharp in its scale: on a negative binomial
# regression (x at 10³) the profiled objective fell from -0.59 at log-scale 6 to -1.00 at 6.5 and
# rose to -0.76 at 7; refined by ±1 only, the grid took 6 and then a collapsed covariate.
LOG_SCALE_GRID = tuple(float(v) for v in range(-14, 15, 2))
SCALE_REFINEMENTS = (1.0, 0.25)  # log-scale ± the first, halved down to the last
SHIFT_GRID = (0.0, *(sign * float(np.exp(k)) for k in range(-14, 15) for sign in (1, -1)))
# shift × e^± the first, halved until a step moves the shift by under SHIFT_PRECISION of the coordinate's
# spread (at most down to the last): Newton finds a location from there, but not from a few spreads off,
# where the best spread is a collapsed one it cannot leave (its gradient vanishes with the spread). A
# column far from its origin needs it: earnings' log-height, 4.17 ± 0.06, ended collapsed within each
# stratum at the grid's e^±0.125 (ΔJ +0.50 over the truth).
SHIFT_REFINEMENTS = (0.5, 2.0**-24)
SHIFT_PRECISION = 0.1
LOG_MASS_RANGE = (-3.0, 8.0)  # total mass e^-3 … e^8 times M


# (a, b, c) of a cloud: the objective at t times its mass is a t² + b t + c
InMass = Callable[[Cloud], tuple[Array, Array, Array]]


def at_best_mass(in_mass: InMass, cloud: Cloud) -> tuple[Array, Cloud]:
    """The objective at the cloud's best total mass (within ``LOG_MASS_RANGE`` of M), and the cloud with it.

    The weighted log-likelihood is linear in the mass, so the score-matching objective is exactly a
    quadratic in it: J(t) = a t² + b t + c, t the mass relative to the cloud's (``in_mass``: see
    :func:`bayes_recon.objective.build_mass_quadratic`). Profiling the mass out this way lets a search
    over the cloud's shape compare shapes each at its own mass; at a fixed mass far from the data's
    (M points against hundreds), the shape that scores best can be a degenerate one that Newton cannot
    leave.
    """
    a, b, c = in_mass(cloud)
    lowest, highest = (jnp.exp(v) for v in LOG_MASS_RANGE)
    vertex = jnp.clip(-b / jnp.where(a > 0, 2.0 * a, 1.0), lowest, highest)
    t = jnp.stack([jnp.asarray(lowest), jnp.asarray(highest), jnp.where(a > 0, vertex, lowest)])
    values = a * t**2 + b * t + c
    values = jnp.where(jnp.isfinite(values), values, jnp.inf)
    i = jnp.argmin(values)
    return values[i], cloud._replace(log_mass=cloud.log_mass + jnp.log(t[i]))


def search_scales(
    in_mass: InMass,
    cloud: Cloud,
    coordinates: Sequence[int],
    located: Sequence[int] = (),
    at_once: int | None = None,
) -> Cloud:
    """Pick the order of magnitude of each listed coordinate's spread and location, each at its best mass.

    A data column may be 10⁴ while the initial cloud is 1 (or, for a positive column, its log may sit at
    4), and from there the divergence falls fastest by shrinking the mass to nothing, a useless local
    minimum. Per coordinate, its scale from ``LOG_SCALE_GRID``; for the ``located`` ones (unbounded
    supports, which have no natural centre) then its location from ``SHIFT_GRID`` and its scale again
    (each grid refined around its best); every candidate is scored at its own best total mass
    (:func:`at_best_mass`). A bounded column starts at its support's centre: shifting it towards a bound
    only saturates the map. It uses nothing but the objective and leaves the rest to Newton. Every stratum
    moves together. ``at_once``: grid points evaluated together (memory), None: a whole grid.
    """

    def best(cloud: Cloud, candidate: Callable[[Cloud, Array], Cloud], grid: Array) -> Cloud:
        """The grid's best ``candidate(cloud, value)``, at its best mass. Only the grid goes through the
        chunked map: a cloud with one coordinate has an empty ``lower``, which ``lax.map``'s batching
        cannot reshape (a division by zero in JAX 0.10)."""

        def score(value: Array) -> tuple[Array, Array]:
            value_at_best, scaled = at_best_mass(in_mass, candidate(cloud, value))
            return value_at_best, scaled.log_mass

        values, log_masses = map_in_chunks(score, grid, at_once)
        i = jnp.argmin(values)
        return candidate(cloud, grid[i])._replace(log_mass=log_masses[i])

    def search(
        put: Callable[[Cloud, Array, Array], Cloud],
        grid: Sequence[float],
        around: Callable[[Cloud, Array, Array], Array],
        refinements: tuple[float, float],
        fine_enough: Callable[[Cloud, Array, Array], Array],
    ) -> Callable[[Cloud, Array], Cloud]:
        """One coordinate's grid, then refinements around the best so far, each step half the last,
        from the first of ``refinements`` until ``fine_enough`` or below the last; every candidate is
        the given cloud with only that coordinate's value put in."""
        first, last = refinements

        def run(cloud: Cloud, index: Array) -> Cloud:
            def candidate(base: Cloud, value: Array) -> Cloud:
                return put(base, index, value)

            def refining(state: tuple[Cloud, Array]) -> Array:
                found, step = state
                return (step >= last) & ~fine_enough(found, index, step)

            def refine(state: tuple[Cloud, Array]) -> tuple[Cloud, Array]:
                found, step = state
                return best(cloud, candidate, around(found, index, step)), step / 2.0

            found = best(cloud, candidate, jnp.asarray(grid))
            return jax.lax.while_loop(refining, refine, (found, jnp.asarray(first)))[0]

        return run

    sides = jnp.asarray([-1.0, 0.0, 1.0])
    scale = search(
        lambda c, i, v: c._replace(log_diag=c.log_diag.at[:, i].set(v)),
        LOG_SCALE_GRID,
        lambda found, i, step: found.log_diag[0, i] + step * sides,
        SCALE_REFINEMENTS,
        lambda found, i, step: jnp.asarray(False),
    )
    shift = search(
        lambda c, i, v: c._replace(shift=c.shift.at[:, i].set(v)),
        SHIFT_GRID,
        lambda found, i, step: found.shift[0, i] * jnp.exp(step * sides),
        SHIFT_REFINEMENTS,
        lambda found, i, step: (
            jnp.abs(found.shift[0, i]) * step < SHIFT_PRECISION * jnp.exp(found.log_diag[0, i])
        ),
    )

    # The first sweep starts every searched coordinate collapsed, so each is sized as if it were the
    # only one varying (a covariate still 1,000 times too wide would swamp the others' scores); the
    # second sizes each again with the others at their first-sweep scales. A coordinate of unknown
    # location is scaled, located, and scaled again. The sweeps are one loop over that plan, so the
    # objective is compiled four times (each search's grid and refinements) whatever the number of
    # coordinates: unrolled, a logistic regression with three covariates compiled it 66 times, 56 s.
    scaling, shifting = 0, 1
    plan = [
        (kind, index)
        for _ in range(2)
        for index in coordinates
        for kind in ((scaling, shifting, scaling) if index in located else (scaling,))
    ]
    cloud = cloud._replace(log_diag=cloud.log_diag.at[:, list(coordinates)].set(LOG_SCALE_GRID[0]))
    if plan:
        kinds, indices = (jnp.asarray(column) for column in zip(*plan, strict=True))

        def operate(cloud: Cloud, step: tuple[Array, Array]) -> tuple[Cloud, None]:
            kind, index = step
            if not located:
                return scale(cloud, index), None
            return jax.lax.cond(kind == shifting, shift, scale, cloud, index), None

        cloud = jax.lax.scan(operate, cloud, (kinds, indices))[0]
    return cloud if coordinates else at_best_mass(in_mass, cloud)[1]  # a grid's best has its best mass


def regularised_cholesky(covariance: Array) -> Array:
    """The Cholesky factor of a covariance with a little added per coordinate: a collapsed one has none."""
    return jnp.linalg.cholesky(covariance + jnp.diag(1e-9 * jnp.diag(covariance) + 1e-12))


def fit_cloud(cloud: Cloud, z: Array, weights: Array) -> Cloud:
    """Clouds whose base points land on each stratum's weighted mean and covariance of ``z`` (C, M, D)."""

    def one(z: Array, weights: Array) -> tuple[Array, Array]:
        p = weights / jnp.sum(weights)
        mean = p @ z
        centred = z - mean
        cov = (centred * p[:, None]).T @ centred
        return mean, regularised_cholesky(cov)

    mean, chol = jax.vmap(one)(z, weights)
    log_diag = jnp.log(jnp.diagonal(chol, axis1=1, axis2=2))
    rows, cols = np.tril_indices(z.shape[-1], -1)
    return cloud._replace(shift=mean, log_diag=log_diag, lower=chol[:, rows, cols])


def whiten(cloud: Cloud, z: Array) -> Array:
    """The cloud's base-point coordinates of the points z (C, M, D): the inverse of its affine map, by
    triangular solves (the scale is lower-triangular)."""

    def solve(scale: Array, centred: Array) -> Array:
        return jax.scipy.linalg.solve_triangular(scale, centred.T, lower=True).T

    return jax.vmap(solve)(cloud.scale(), z - cloud.shift[:, None, :])


def coordinates(layout: Layout, params: Pseudo, base: Array) -> tuple[Array, Array, Array]:
    """The pseudo-data's unconstrained continuous (C·M, D) and discrete (C·M, B) coordinates and their
    weights: C·M rows, stratum by stratum."""
    cloud, points = params
    z = cloud.shift[:, None, :] + jnp.einsum("cmd,ced->cme", base + points.residual, cloud.scale())
    n = points.logit.shape[1]
    w = jnp.exp(cloud.log_mass)[:, None] * n * jax.nn.softmax(points.logit, axis=1)
    # by the rows' count, not −1: all-discrete data have no continuous coordinate (D = 0)
    return z.reshape(w.size, layout.dim), jnp.repeat(layout.strata, n, axis=0), w.reshape(-1)


def measure(layout: Layout, params: Pseudo, base: Array) -> tuple[dict[str, Array], Array]:
    """The pseudo-data (by name, in each column's support) and their weights: C·M rows, stratum by stratum."""
    z, bits, w = coordinates(layout, params, base)
    return layout.assemble(z, bits), w
