"""The one result type of every attack: a weighted empirical measure over pseudo-data.

A reconstruction is ``sum_j w_j delta_{x_j}``; the true data set is the measure with unit
weights. Everything downstream (statistics, relative errors, MMD, reports) reads this type.
Numpy only (no JAX, no torch): both ``bayes_recon`` and ``nn_recon`` return it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recon_core.jsonio import jsonable

Kernel = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], np.ndarray]
"""A kernel takes two point dicts (M rows and K rows) and returns the (M, K) Gram matrix."""


@dataclass(frozen=True)
class WeightedMeasure:
    """Points by name, each with the data-point axis first, and one non-negative weight per point."""

    points: Mapping[str, np.ndarray]
    weights: np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        points = {name: np.asarray(value) for name, value in self.points.items()}
        weights = np.asarray(self.weights, dtype=float)
        if not points:
            raise ValueError("a WeightedMeasure needs at least one named column of points")
        if weights.ndim != 1:
            raise ValueError(f"weights must be one-dimensional, got shape {weights.shape}")
        for name, value in points.items():
            if value.shape[:1] != weights.shape:
                raise ValueError(
                    f"column {name!r} has {value.shape[0] if value.ndim else 0} points "
                    f"but there are {weights.shape[0]} weights; the data-point axis must come first"
                )
        if not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError("weights must be finite and non-negative")
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "meta", dict(self.meta))

    @classmethod
    def empirical(cls, points: Mapping[str, np.ndarray], **meta: Any) -> WeightedMeasure:
        """The measure of a data set: every point with weight one."""
        n = len(next(iter(points.values())))
        return cls(points, np.ones(n), meta)

    @property
    def names(self) -> list[str]:
        return list(self.points)

    def __len__(self) -> int:
        return len(self.weights)

    def column(self, name: str) -> np.ndarray:
        if name not in self.points:
            raise KeyError(f"no column {name!r}; the measure has {self.names}")
        return np.asarray(self.points[name], dtype=float)

    def total_mass(self) -> float:
        """Sum of weights: the reconstructed number of data points."""
        return float(self.weights.sum())

    def expect(self, values: np.ndarray) -> np.ndarray:
        """Weighted mean of per-point values (axis 0), normalised by the total mass."""
        return np.tensordot(self.weights, np.asarray(values, dtype=float), axes=1) / self.total_mass()

    def integrate(self, values: np.ndarray) -> np.ndarray:
        """Weighted sum of per-point values (axis 0): the un-normalised statistic."""
        return np.tensordot(self.weights, np.asarray(values, dtype=float), axes=1)

    def mean(self, name: str) -> np.ndarray:
        return self.expect(self.column(name))

    def var(self, name: str) -> np.ndarray:
        x = self.column(name)
        return self.expect((x - self.mean(name)) ** 2)

    def cov(self, names: Sequence[str] | None = None) -> np.ndarray:
        """Weighted covariance matrix of the named columns, each flattened per point."""
        x = self.matrix(names)
        centred = x - self.expect(x)
        return self.expect(centred[:, :, None] * centred[:, None, :])

    def moment(self, powers: Mapping[str, int], central: bool = False) -> float:
        """Weighted mean of the product of scalar columns raised to powers, e.g. {"x": 2, "y": 1}."""
        term = np.ones(len(self))
        for name, power in powers.items():
            x = self.column(name).reshape(len(self), -1)
            if x.shape[1] != 1:
                raise ValueError(f"moment() takes scalar columns; {name!r} has shape {x.shape[1:]}")
            x = x[:, 0] - (self.mean(name).item() if central else 0.0)
            term = term * x**power
        return float(self.expect(term))

    def matrix(self, names: Sequence[str] | None = None) -> np.ndarray:
        """The named columns side by side, each flattened per point: shape (M, total width)."""
        names = self.names if names is None else list(names)
        return np.concatenate([self.column(n).reshape(len(self), -1) for n in names], axis=1)

    def linear_model_statistics(self, design: np.ndarray, response: np.ndarray) -> dict[str, np.ndarray]:
        """Sufficient statistics (N, XᵀWX, XᵀWy, yᵀWy) of a Gaussian linear model.

        ``design`` and ``response`` are per-point arrays computed from this measure's points
        (the design the likelihood sees, e.g. ``[1, mom_iq]``).
        """
        x = np.asarray(design, dtype=float).reshape(len(self), -1)
        y = np.asarray(response, dtype=float).reshape(len(self))
        w = self.weights
        return {
            "N": np.asarray(w.sum()),
            "XtX": (x * w[:, None]).T @ x,
            "Xty": (x * w[:, None]).T @ y,
            "yty": np.asarray((w * y) @ y),
        }

    def mmd(self, other: WeightedMeasure, kernel: Kernel) -> float:
        """Maximum mean discrepancy between the two (un-normalised) measures under ``kernel``.

        Mass counts: a reconstruction with the right shape but the wrong number of points is
        not at distance zero, which matches the Fisher-divergence view of the attack.
        """
        a, b = self.weights, other.weights
        kaa = kernel(self.points, self.points)
        kbb = kernel(other.points, other.points)
        kab = kernel(self.points, other.points)
        squared = a @ kaa @ a + b @ kbb @ b - 2 * a @ kab @ b
        return float(np.sqrt(max(squared, 0.0)))

    def flat_columns(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The named columns (all by default), each flattened per point: ``name``, or ``name[i]`` for every
        entry of a column with more than one per point."""
        columns = {}
        for name in self.names if names is None else names:
            flat = np.asarray(self.points[name]).reshape(len(self), -1)
            if flat.shape[1] == 1:
                columns[name] = flat[:, 0]
            else:
                columns.update({f"{name}[{i}]": flat[:, i] for i in range(flat.shape[1])})
        return columns

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"weight": self.weights, **self.flat_columns()})

    def save(self, path: str | Path) -> Path:
        """Write ``<path>.npz`` (arrays) and ``<path>.json`` (names, shapes, meta)."""
        base = Path(path).with_suffix("")
        base.parent.mkdir(parents=True, exist_ok=True)
        arrays = {f"points/{k}": np.asarray(v) for k, v in self.points.items()}
        np.savez(base.with_suffix(".npz"), weights=self.weights, **arrays)
        header = {
            "format": "weighted-measure/1",
            "names": self.names,
            "shapes": {k: list(np.shape(v)) for k, v in self.points.items()},
            "total_mass": self.total_mass(),
            "meta": jsonable(self.meta),
        }
        base.with_suffix(".json").write_text(json.dumps(header, indent=2))
        return base.with_suffix(".npz")

    @classmethod
    def load(cls, path: str | Path) -> WeightedMeasure:
        base = Path(path).with_suffix("")
        npz, header_file = base.with_suffix(".npz"), base.with_suffix(".json")
        if not npz.exists():
            raise FileNotFoundError(f"no saved measure at {npz}; save one with WeightedMeasure.save")
        with np.load(npz) as data:
            points = {k.removeprefix("points/"): data[k] for k in data.files if k.startswith("points/")}
            weights = data["weights"]
        meta = json.loads(header_file.read_text())["meta"] if header_file.exists() else {}
        return cls(points, weights, meta)


def linear_model_errors(
    estimate: Mapping[str, np.ndarray], truth: Mapping[str, np.ndarray]
) -> dict[str, float]:
    """Scale-free error of each linear-model statistic, the largest over its entries.

    N relative to the true N; every entry of XᵀX, Xᵀy and yᵀy as an entry (a, b) of the joint
    moment matrix Z = [X y]ᵀ[X y], against sqrt(Z_aa Z_bb), so that an entry near zero (a
    centred covariate) does not turn a tiny absolute error into a huge relative one.
    """

    def joint(stats: Mapping[str, np.ndarray]) -> np.ndarray:
        xtx, xty = np.asarray(stats["XtX"], float), np.asarray(stats["Xty"], float)
        top = np.concatenate([xtx, xty[:, None]], axis=1)
        bottom = np.concatenate([xty, np.atleast_1d(np.asarray(stats["yty"], float))])[None]
        return np.concatenate([top, bottom], axis=0)

    z_true, z_est = joint(truth), joint(estimate)
    scaled = np.abs(z_est - z_true) / np.sqrt(np.outer(np.diag(z_true), np.diag(z_true)))
    p = z_true.shape[0] - 1
    return {
        "N": float(abs(float(estimate["N"]) / float(truth["N"]) - 1)),
        "XtX": float(scaled[:p, :p].max()),
        "Xty": float(scaled[:p, p].max()),
        "yty": float(scaled[p, p]),
    }
