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

Binary columns (support ``constraints.boolean``) are not relaxed to (0, 1), where the true data
would sit on the boundary and the optimiser would chase infinite logits. Each pseudo-point
instead carries a probability per binary column and is split into its 2^B combinations of
exact 0/1 values, weighted by their probabilities. In the cloud, a binary column's logit is an
affine function of the whitened base point (a logistic regression on the continuous columns),
so the cloud already expresses the proportion and its association with the other columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.constraints import Constraint
from numpyro.distributions.transforms import biject_to

from bayes_recon.errors import ReconError

Array = jax.Array
MAX_BINARY = 4  # 2^B combinations per pseudo-point


class Cloud(NamedTuple):
    shift: Array  # (D,)
    log_diag: Array  # (D,)
    lower: Array  # (D, D), strictly-lower part used
    log_mass: Array  # ()
    binary_shift: Array  # (B,)
    binary_slope: Array  # (D, B)


class Points(NamedTuple):
    residual: Array  # (M, D)
    logit: Array  # (M,)
    binary_logit: Array  # (M, B)


class Pseudo(NamedTuple):
    cloud: Cloud
    points: Points


def is_binary(support: Constraint) -> bool:
    return support is constraints.boolean


@dataclass(frozen=True)
class Layout:
    """Names, trailing shapes and supports of the free columns: D continuous and B binary coordinates."""

    shapes: Mapping[str, tuple[int, ...]]
    supports: Mapping[str, Constraint]

    def __post_init__(self) -> None:
        if self.binary_dim > MAX_BINARY:
            raise ReconError(
                f"{self.binary_dim} binary data coordinates; each pseudo-point is split into 2^B "
                f"combinations, so at most {MAX_BINARY} are supported. Declare the others with "
                "support=constraints.unit_interval (a continuous relaxation)."
            )

    def support(self, name: str) -> Constraint:
        return self.supports.get(name, constraints.real)

    def widths(self, binary: bool) -> dict[str, int]:
        return {
            k: int(np.prod(s, dtype=int))
            for k, s in self.shapes.items()
            if is_binary(self.support(k)) == binary
        }

    @property
    def dim(self) -> int:
        """Continuous (unconstrained) coordinates D."""
        return sum(self.widths(False).values())

    @property
    def binary_dim(self) -> int:
        return sum(self.widths(True).values())

    def assemble(self, z: Array, bits: Array) -> dict[str, Array]:
        """(M, D) unconstrained and (M, B) 0/1 coordinates → {name: (M, *shape)} in each column's support."""
        out = {}
        for binary, block in ((False, z), (True, bits)):
            start = 0
            for name, width in self.widths(binary).items():
                part = block[:, start : start + width]
                value = part if binary else biject_to(self.support(name))(part)
                out[name] = value.reshape((block.shape[0], *self.shapes[name]))
                start += width
        return {name: out[name] for name in self.shapes}

    def unconstrain(self, points: Mapping[str, Array]) -> Array:
        """{name: (M, *shape)} → the (M, D) unconstrained continuous coordinates (inverse of ``assemble``)."""
        blocks = [
            biject_to(self.support(name)).inv(jnp.reshape(points[name], (-1, width)))
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
        """n points at the centre of each support (binary columns 0)."""
        return self.assemble(jnp.zeros((n, self.dim)), jnp.zeros((n, self.binary_dim)))

    def probe(self, key: Array, n: int) -> dict[str, Array]:
        """n random points spread over the supports (for spans of statistics)."""
        k1, k2 = jax.random.split(key)
        bits = jax.random.bernoulli(k2, 0.5, (n, self.binary_dim)).astype(float)
        return self.assemble(2.0 * jax.random.normal(k1, (n, self.dim)), bits)


def base_points(key: Array, n_points: int, dim: int) -> Array:
    """Standard normal points, whitened to mean 0 and covariance I exactly when n_points > dim."""
    u = jax.random.normal(key, (n_points, dim))
    if n_points <= dim + 1 or dim == 0:
        return u
    u = u - u.mean(axis=0)
    cov = u.T @ u / n_points
    return jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(cov), u.T, lower=True).T


def initial(n_points: int, layout: Layout) -> Pseudo:
    """A unit cloud at the origin of the unconstrained space, binary columns at ½, total mass ``n_points``."""
    d, b = layout.dim, layout.binary_dim
    cloud = Cloud(
        jnp.zeros(d), jnp.zeros(d), jnp.zeros((d, d)), jnp.zeros(()), jnp.zeros(b), jnp.zeros((d, b))
    )
    return Pseudo(cloud, Points(jnp.zeros((n_points, d)), jnp.zeros(n_points), jnp.zeros((n_points, b))))


LOG_SCALE_GRID = tuple(float(v) for v in range(-2, 13))  # e^-2 … e^12 ≈ 0.1 … 160,000
LOG_MASS_GRID = tuple(float(v) for v in range(-3, 9))  # total mass e^-3 … e^8 times M


def search_scales(objective: Callable[[Cloud], Array], cloud: Cloud, coordinates: Sequence[int]) -> Cloud:
    """Pick the order of magnitude of each listed coordinate, then of the total mass, from fixed grids.

    A data column may be 10⁴ while the initial cloud is 1, and from there the divergence falls
    fastest by shrinking the mass to nothing, a useless local minimum. One sweep costs 15 evaluations
    per coordinate and 12 for the mass, uses nothing but the objective, and leaves the rest to Newton.
    """

    def best(candidates: Cloud) -> Cloud:
        values = jax.vmap(objective)(candidates)
        values = jnp.where(jnp.isfinite(values), values, jnp.inf)
        return jax.tree_util.tree_map(lambda leaf: leaf[jnp.argmin(values)], candidates)

    def one(cloud: Cloud, index: Array) -> tuple[Cloud, None]:
        grid = jnp.asarray(LOG_SCALE_GRID)
        return best(jax.vmap(lambda s: cloud._replace(log_diag=cloud.log_diag.at[index].set(s)))(grid)), None

    cloud = jax.lax.scan(one, cloud, jnp.asarray(coordinates, dtype=int))[0] if coordinates else cloud
    return best(jax.vmap(lambda m: cloud._replace(log_mass=m))(jnp.asarray(LOG_MASS_GRID)))


def fit_cloud(cloud: Cloud, z: Array, weights: Array) -> Cloud:
    """The cloud whose whitened base points land on the weighted mean and covariance of the points ``z`` (M, D)."""
    p = weights / jnp.sum(weights)
    mean = p @ z
    centred = z - mean
    cov = (centred * p[:, None]).T @ centred
    chol = jnp.linalg.cholesky(cov + jnp.diag(1e-9 * jnp.diag(cov) + 1e-12))  # per coordinate: scales differ
    return cloud._replace(shift=mean, log_diag=jnp.log(jnp.diag(chol)), lower=jnp.tril(chol, -1))


def scale_matrix(cloud: Cloud) -> Array:
    return jnp.tril(cloud.lower, -1) + jnp.diag(jnp.exp(cloud.log_diag))


def measure(layout: Layout, params: Pseudo, base: Array) -> tuple[dict[str, Array], Array]:
    """The pseudo-data (by name, in each column's support) and their weights.

    With B binary columns every pseudo-point becomes 2^B points (its combinations of 0/1
    values), so there are M·2^B rows; with none, M.
    """
    cloud, points = params
    u = base + points.residual
    z = cloud.shift + u @ scale_matrix(cloud).T
    n = points.logit.shape[0]
    w = jnp.exp(cloud.log_mass) * n * jax.nn.softmax(points.logit)
    if layout.binary_dim == 0:
        return layout.assemble(z, jnp.zeros((n, 0))), w
    combos = jnp.asarray(list(itertools.product((0.0, 1.0), repeat=layout.binary_dim)))  # (C, B)
    log_p = jax.nn.log_sigmoid(cloud.binary_shift + u @ cloud.binary_slope + points.binary_logit)  # (M, B)
    log_not_p = log_p - (cloud.binary_shift + u @ cloud.binary_slope + points.binary_logit)
    combo_weight = jnp.exp(combos @ log_p.T + (1 - combos) @ log_not_p.T)  # (C, M)
    rows = combos.shape[0] * n
    return (
        layout.assemble(jnp.tile(z, (combos.shape[0], 1)), jnp.repeat(combos, n, axis=0)),
        (combo_weight * w).reshape(rows),
    )
