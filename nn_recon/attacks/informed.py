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
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, softmax

from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure

Family = Literal["gaussian", "bernoulli", "multinomial"]
FAMILIES: tuple[str, ...] = ("gaussian", "bernoulli", "multinomial")


class NotOptimalError(ReconError):
    """The released parameters are not a minimiser of the training objective on D⁻ ∪ {z}."""

    def __init__(self, message: str, gradient_norm: float) -> None:
        super().__init__(message)
        self.gradient_norm = gradient_norm


class SingularTargetError(ReconError):
    """The optimality condition does not determine the target (its residual is zero)."""


@dataclass(frozen=True)
class GLM:
    """A released GLM: ``coef`` (k, d), ``intercept`` (k,) or None, ridge strength ``l2`` = λ.

    ``classes`` maps output index to the original class label for classifiers (sklearn's ``classes_``).
    """

    family: Family
    coef: np.ndarray
    intercept: np.ndarray | None
    l2: float = 0.0
    classes: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ReconError(f"family must be one of {FAMILIES}, got {self.family!r}")
        coef = np.atleast_2d(np.asarray(self.coef, dtype=float))
        if coef.ndim != 2:
            raise ReconError(f"coef must be a (k, d) or (d,) array, got shape {np.shape(self.coef)}")
        intercept = None
        if self.intercept is not None:
            intercept = np.asarray(self.intercept, dtype=float).reshape(-1)
            if intercept.shape != (coef.shape[0],):
                raise ReconError(
                    f"intercept has shape {intercept.shape} but coef has {coef.shape[0]} output rows"
                )
        if not (np.all(np.isfinite(coef)) and (intercept is None or np.all(np.isfinite(intercept)))):
            raise ReconError(
                "the model's coef or intercept holds NaN or infinite values; refit the model and save it"
            )
        if not (np.isfinite(self.l2) and self.l2 >= 0):
            raise ReconError(f"the L2 strength must be finite and >= 0, got {self.l2}")
        if self.family == "multinomial" and coef.shape[0] < 3:
            raise ReconError("a multinomial model needs >= 3 classes; use family='bernoulli' for two")
        if self.family == "bernoulli" and coef.shape[0] != 1:
            raise ReconError(f"a bernoulli model has one output row, got {coef.shape[0]}")
        object.__setattr__(self, "coef", coef)
        object.__setattr__(self, "intercept", intercept)
        object.__setattr__(self, "l2", float(self.l2))

    @property
    def n_features(self) -> int:
        return self.coef.shape[1]

    def linear_predictor(self, x: np.ndarray) -> np.ndarray:
        eta = x @ self.coef.T
        return eta if self.intercept is None else eta + self.intercept

    def mean(self, eta: np.ndarray) -> np.ndarray:
        """The inverse canonical link μ, applied row-wise to (n, k) linear predictors."""
        if self.family == "gaussian":
            return eta
        if self.family == "bernoulli":
            return expit(eta)
        return softmax(eta, axis=-1)

    def encode_labels(self, y: Any) -> np.ndarray:
        """Responses as the (n, k) matrix the residuals live in (values, 0/1, or one-hot)."""
        y = np.asarray(y)
        if self.family == "gaussian":
            y = y.astype(float).reshape(len(y), -1)
            if y.shape[1] != self.coef.shape[0]:
                raise ReconError(f"y has {y.shape[1]} outputs but the model has {self.coef.shape[0]}")
            return y
        classes = self.classes if self.classes is not None else np.arange(max(2, self.coef.shape[0]))
        index = np.searchsorted(classes, y.reshape(-1))
        valid = (index < len(classes)) & (classes[np.minimum(index, len(classes) - 1)] == y.reshape(-1))
        if not np.all(valid):
            raise ReconError(f"labels {np.unique(y.reshape(-1)[~valid])[:5]} are not among {classes}")
        if self.family == "bernoulli":
            return index.astype(float)[:, None]
        return np.eye(len(classes))[index]

    def decode_label(self, response: np.ndarray) -> Any:
        """The nearest valid label to a reconstructed (k,) response."""
        if self.family == "gaussian":
            return response.item() if response.size == 1 else response
        classes = self.classes if self.classes is not None else np.arange(max(2, self.coef.shape[0]))
        index = int(response[0] > 0.5) if self.family == "bernoulli" else int(np.argmax(response))
        return classes[index]


def glm_from_estimator(estimator: Any) -> GLM:
    """The GLM of a fitted scikit-learn ``LinearRegression``, ``Ridge`` or ``LogisticRegression``."""
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge

    name = type(estimator).__name__
    if type(estimator) not in (LinearRegression, Ridge, LogisticRegression):
        raise ReconError(
            f"{name} is not supported; the closed form covers sklearn LinearRegression, Ridge and "
            "LogisticRegression, or a GLM(...) built from plain coefficient arrays"
        )
    if not hasattr(estimator, "coef_"):
        raise ReconError(f"the {name} is not fitted; fit it before attacking it")
    intercept = estimator.intercept_ if estimator.fit_intercept else None
    if getattr(estimator, "positive", False):
        raise ReconError(f"{name}(positive=True) has constraints; the closed form needs none")
    if type(estimator) is LinearRegression:
        return GLM("gaussian", estimator.coef_, intercept)
    if type(estimator) is Ridge:
        if np.ndim(estimator.alpha) != 0:
            raise ReconError("Ridge with one alpha per target is not supported; fit one per target")
        return GLM("gaussian", estimator.coef_, intercept, l2=float(estimator.alpha))
    problems = []
    if estimator.l1_ratio not in (0, 0.0, None) or estimator.penalty in ("l1", "elasticnet"):
        problems.append("an L1 penalty (non-smooth)")
    if estimator.solver == "liblinear" and estimator.fit_intercept:
        problems.append("solver='liblinear' (it penalises the intercept)")
    if estimator.class_weight is not None:
        problems.append("class_weight")
    if problems:
        raise ReconError(
            f"LogisticRegression with {', '.join(problems)} is not supported; refit with the default "
            "L2 penalty and solver='lbfgs'"
        )
    l2 = 0.0 if estimator.penalty is None or np.isinf(estimator.C) else 1.0 / estimator.C
    family: Family = "bernoulli" if len(estimator.classes_) == 2 else "multinomial"
    return GLM(family, estimator.coef_, intercept, l2=l2, classes=estimator.classes_)


def skops_allowed_types() -> frozenset[str]:
    """What a .skops GLM file may hold beyond skops's own trusted types: the three linear models and
    numpy's scalar types, by the names :func:`skops.io.get_untrusted_types` gives."""
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge

    numpy_types = (np.dtype, np.ndarray, np.bool_, np.str_, np.int32, np.int64, np.float32, np.float64)
    return frozenset(
        f"{t.__module__}.{t.__name__}" for t in (LinearRegression, Ridge, LogisticRegression, *numpy_types)
    )


def _load_skops(path: Path) -> Any:
    """The estimator in a skops file, built without running code from it: a type that skops does not
    trust by default must be one of :func:`skops_allowed_types`, and only those are trusted."""
    import skops.io

    def unreadable(error: Exception) -> ReconError:
        return ReconError(f"{path} is not a readable skops file ({type(error).__name__}: {error})")

    try:
        untrusted = skops.io.get_untrusted_types(file=path)
    except Exception as error:
        raise unreadable(error) from None
    refused = sorted(set(untrusted) - skops_allowed_types())
    if refused:
        raise ReconError(
            f"{path} holds types other than the sklearn linear models and numpy types a model file may "
            f"hold: {', '.join(refused)}; save a fitted LinearRegression, Ridge or LogisticRegression with "
            "skops.io.dump"
        )
    try:
        return skops.io.load(path, trusted=untrusted)
    except Exception as error:
        raise unreadable(error) from None


def _glm_from_npz(path: Path) -> GLM:
    with np.load(path, allow_pickle=False) as saved:
        missing = {"family", "coef"} - set(saved.files)
        if missing:
            raise ReconError(f"{path} lacks {sorted(missing)}; it needs family, coef[, intercept, l2]")
        return GLM(
            str(saved["family"]),
            saved["coef"],
            saved["intercept"] if "intercept" in saved.files else None,
            float(saved["l2"]) if "l2" in saved.files else 0.0,
        )


def load_glm(path: str | Path, trust_pickle: bool = False) -> GLM:
    """The released GLM in ``path``, read without running code from it unless ``trust_pickle``.

    ``.npz``: plain arrays family, coef[, intercept, l2]. ``.skops``: a fitted sklearn
    LinearRegression, Ridge or LogisticRegression saved with ``skops.io.dump``, read by skops's secure
    loader. Anything else is a joblib/pickle file, whose unpickling runs whatever code it holds: it is
    refused unless ``trust_pickle``.
    """
    path = Path(path)
    if not path.is_file():
        raise ReconError(f"{path} does not exist")
    if path.suffix == ".npz":
        return _glm_from_npz(path)
    if path.suffix == ".skops":
        return glm_from_estimator(_load_skops(path))
    if not trust_pickle:
        raise ReconError(
            f"refusing to unpickle {path}: loading a joblib/pickle file runs any code it holds. Save the "
            "model as .skops (skops.io.dump) or as an .npz of family, coef, intercept, l2; or, for a file "
            "you made yourself, pass --trust-pickle"
        )
    import joblib

    try:
        estimator = joblib.load(path)
    except Exception as error:
        raise ReconError(
            f"could not load a fitted estimator from {path} ({type(error).__name__}: {error})"
        ) from error
    return glm_from_estimator(estimator)


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

    def max_relative_error(self, true_features: Any) -> float:
        """The closest candidate's largest feature error over the true target's largest feature.

        max_j |x̂_j − x_j| / max_j |x_j|: scale-free, and finite where some true features are 0.
        """
        true = np.asarray(true_features, dtype=float).reshape(-1)
        if true.shape != self.features.shape[1:]:
            raise ReconError(
                f"the true target has {true.size} features but the reconstruction {self.features.shape[1]}"
            )
        error = np.abs(self.features - true).max(axis=1).min()
        return float(error / max(np.abs(true).max(), np.finfo(float).tiny))

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
    tol: float = 1e-6,
) -> GLMReconstruction:
    """Recover the missing training point of ``model`` from D⁻ = (``x_minus``, ``y_minus``).

    ``model`` is a fitted sklearn LinearRegression / Ridge / LogisticRegression or a ``GLM``.
    ``label`` is the target's label if the adversary knows it (required without an intercept).
    Raises ``NotOptimalError`` when the relative gradient norm exceeds ``tol``.
    """
    if not tol > 0:
        raise ReconError(f"tol must be > 0, got {tol}")
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
    if not worst <= tol:
        raise NotOptimalError(
            f"the released parameters are not optimal for D⁻ plus any single target: relative gradient "
            f"norm {worst:.3g} > tol {tol:g}. Train to convergence (tighter tol, more iterations) or "
            "check the regularisation strength and the data",
            worst,
        )
    return GLMReconstruction(features, np.asarray(labels), worst)
