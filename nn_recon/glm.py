"""A released generalised linear model: its parameters, and reading them from a file or a fitted estimator.

The release side of the GLM closed form (:mod:`nn_recon.attacks.informed`): a :class:`GLM` holds the
coefficients, intercept and ridge strength of a linear/ridge regression or a logistic regression;
:func:`load_glm` reads one from an ``.npz`` of plain arrays or a ``.skops`` file without running code
from it, and a joblib/pickle file only when told to trust it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.special import expit, softmax

from recon_core.errors import ReconError

Family = Literal["gaussian", "bernoulli", "multinomial"]
FAMILIES: tuple[str, ...] = ("gaussian", "bernoulli", "multinomial")


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
