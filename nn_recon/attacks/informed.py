"""Exact reconstruction of the one unknown training point of a generalised linear model.

Threat model (informed adversary): the adversary knows every training point but one (D⁻), the
regularisation strength and the released parameters, which are an exact minimiser of

    Σ_i ℓ(y_i, W x_i + b) + (λ/2) ‖W‖²          (intercept b not penalised)

with ℓ the negative log-likelihood of a canonical-link GLM (Gaussian: linear/ridge regression;
Bernoulli / multinomial: logistic regression). With residuals r_i = y_i − μ(W x_i + b) the
optimality condition is the same for all three families:

    Σ_i r_i x_iᵀ = λ W        and, with an intercept,        Σ_i r_i = 0.

Everything of D⁻ is known, so with an intercept the target's residual is r_z = −Σ_{D⁻} r_i and the
first equation is the rank-one system r_z x_zᵀ = λ W − Σ_{D⁻} r_i x_iᵀ =: M, whose solution is
x_z = Mᵀ r_z / ‖r_z‖²; the label follows as y_z = μ(W x_z + b) + r_z. Without an intercept the
adversary must know the label: x_z = M / r_z with the scalar r_z solving r_z = y_z − μ(a / r_z),
a = W·M (a quadratic for regression, so up to two targets fit the released model exactly).

Caveat: with an intercept every linear/ridge parameter vector is optimal for *some* target, so
optimality can only be checked for classifiers (the label must come out 0/1 or one-hot) or when
the label is known; the gradient norm of the training objective at the reconstruction is reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import brentq

from nn_recon.glm import GLM, glm_from_estimator
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure


@dataclass(frozen=True)
class GLMAttackConfig:
    """``tol``: the largest relative gradient norm of the training objective at the reconstruction
    accepted as optimal."""

    tol: float = 1e-6

    def __post_init__(self) -> None:
        if not self.tol > 0:
            raise ReconError(f"tol must be > 0, got {self.tol}")


class NotOptimalError(ReconError):
    """The released parameters are not a minimiser of the training objective on D⁻ ∪ {z}."""

    def __init__(self, message: str, gradient_norm: float) -> None:
        super().__init__(message)
        self.gradient_norm = gradient_norm


class SingularTargetError(ReconError):
    """The optimality condition does not determine the target (its residual is zero)."""


@dataclass(frozen=True)
class GLMReconstruction:
    """Targets consistent with the released model: ``features`` (m, d) and their ``labels`` (m,).

    m is 1 except without an intercept, where up to two targets can fit the model exactly.
    ``gradient_norm`` is the training objective's gradient norm at the released parameters on
    D⁻ ∪ {reconstruction}, relative to the size of its terms (0 at an exact optimum).
    """

    features: np.ndarray
    labels: np.ndarray
    gradient_norm: float

    def to_measure(self, **meta: Any) -> WeightedMeasure:
        """One point of total weight 1 per target, split evenly over equally consistent candidates."""
        m = len(self.features)
        return WeightedMeasure(
            {"x": self.features, "y": self.labels},
            np.full(m, 1.0 / m),
            {"attack": "glm-closed-form", "relative_gradient_norm": self.gradient_norm, **meta},
        )


def _as_glm(model: Any) -> GLM:
    return model if isinstance(model, GLM) else glm_from_estimator(model)


def _checked_data(glm: GLM, x_minus: Any, y_minus: Any) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x_minus, dtype=float)
    if x.ndim != 2 or x.shape[1] != glm.n_features:
        raise ReconError(
            f"D⁻ features must be an (n, {glm.n_features}) array matching the model, got shape {x.shape}"
        )
    if len(np.asarray(y_minus)) != len(x):
        raise ReconError(f"D⁻ has {len(x)} feature rows but {len(np.asarray(y_minus))} labels")
    if not np.all(np.isfinite(x)):
        raise ReconError("D⁻ features contain NaN or infinite values")
    return x, glm.encode_labels(y_minus)


def objective_gradient(glm: GLM, x: np.ndarray, responses: np.ndarray) -> tuple[np.ndarray, float]:
    """Gradient of the training objective at the released parameters, and the size of its terms."""
    means = glm.mean(glm.linear_predictor(x))
    residuals = responses - means
    coef_part = glm.l2 * glm.coef - residuals.T @ x
    parts = [coef_part.ravel()]
    if glm.intercept is not None:
        parts.append(-residuals.sum(axis=0))
    response_size = (np.abs(responses) + np.abs(means)).sum(axis=1)
    scale = glm.l2 * np.abs(glm.coef).sum() + response_size @ (1 + np.abs(x).sum(axis=1))
    return np.concatenate(parts), float(scale)


def _residual_roots(glm: GLM, response: np.ndarray, a: float) -> list[float]:
    """All r with r = y − μ(a / r): scan t = 1/r over a log grid of both signs, refine with brentq."""

    def h(t: float) -> float:
        return t * (response[0] - glm.mean(np.array([[a * t]]))[0, 0]) - 1.0

    magnitudes = np.logspace(-12, 12, 4801)
    roots = []
    for grid in (magnitudes, -magnitudes):
        values = np.array([h(t) for t in grid])
        for i in np.flatnonzero(np.sign(values[:-1]) * np.sign(values[1:]) < 0):
            t = brentq(h, grid[i], grid[i + 1], xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
            roots.append(1.0 / t)
    return roots


def reconstruct_target(
    model: GLM | Any,
    x_minus: Any,
    y_minus: Any,
    *,
    label: Any = None,
    config: GLMAttackConfig = GLMAttackConfig(),
) -> GLMReconstruction:
    """Recover the missing training point of ``model`` from D⁻ = (``x_minus``, ``y_minus``).

    ``model`` is a fitted sklearn LinearRegression / Ridge / LogisticRegression or a ``GLM``.
    ``label`` is the target's label if the adversary knows it (required without an intercept).
    Raises ``NotOptimalError`` when the relative gradient norm exceeds ``config.tol``.
    """
    glm = _as_glm(model)
    x, responses = _checked_data(glm, x_minus, y_minus)
    known = None if label is None else glm.encode_labels(np.asarray([label]))[0]
    residuals = responses - glm.mean(glm.linear_predictor(x))
    m = glm.l2 * glm.coef - residuals.T @ x  # (k, d): equals r_z x_zᵀ at the optimum
    _, scale = objective_gradient(glm, x, responses)
    scale = max(scale, np.finfo(float).tiny)

    if glm.intercept is not None:
        target_residual = -residuals.sum(axis=0)
        if np.abs(target_residual).sum() <= 1e-10 * (np.abs(responses).sum() + np.abs(residuals).sum()):
            raise SingularTargetError(
                "the target's residual is zero (it lies exactly on the fitted model), so the optimality "
                "condition does not determine its features"
            )
        candidates = [m.T @ target_residual / (target_residual @ target_residual)]
        residual_of = [target_residual]
    else:
        if known is None:
            raise ReconError(
                "the model has no intercept, so the target's label must be known: pass label=... (--label)"
            )
        if glm.coef.shape[0] != 1:
            raise ReconError("without an intercept only single-output models are supported")
        roots = _residual_roots(glm, known, float(glm.coef[0] @ m[0]))
        if not roots:
            raise SingularTargetError(
                "no target with this label makes the released parameters optimal; check the label, "
                "the regularisation strength and that the model was trained to convergence"
            )
        candidates = [m[0] / r for r in roots]
        residual_of = [np.array([r]) for r in roots]

    features = np.stack(candidates)
    responses_z = glm.mean(glm.linear_predictor(features)) + np.stack(residual_of)
    if known is None:
        labels = [glm.decode_label(response) for response in responses_z]
        encoded = glm.encode_labels(np.asarray(labels))
    else:
        labels = [label] * len(features)
        encoded = np.repeat(known[None], len(features), axis=0)
    worst = 0.0
    for xz, yz in zip(features, encoded, strict=True):
        gradient, _ = objective_gradient(glm, np.vstack([x, xz]), np.vstack([responses, yz]))
        worst = max(worst, float(np.linalg.norm(gradient, 1)) / scale)
    if not worst <= config.tol:
        raise NotOptimalError(
            f"the released parameters are not optimal for D⁻ plus any single target: relative gradient "
            f"norm {worst:.3g} > tol {config.tol:g}. Train to convergence (tighter tol, more iterations) or "
            "check the regularisation strength and the data",
            worst,
        )
    return GLMReconstruction(features, np.asarray(labels), worst)
