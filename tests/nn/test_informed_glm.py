"""The GLM closed form recovers the missing point exactly, and refuses what it cannot solve."""

import numpy as np
import pytest
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression, Ridge
from sklearn.svm import SVR

from nn_recon.attacks.informed import (
    GLMAttackConfig,
    NotOptimalError,
    SingularTargetError,
    reconstruct_target,
)
from nn_recon.glm import GLM
from recon_core.errors import ReconError


def _regression(n=120, d=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = x @ rng.normal(size=d) + 0.3 + 0.5 * rng.normal(size=n)
    return x, y


def _classes(n_classes, n=150, d=5, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    score = x @ rng.normal(size=d) + rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]))
    return x, np.array(["a", "b", "c", "d"])[y]


def _exact_logistic(**kwargs):
    return LogisticRegression(solver="newton-cholesky", tol=1e-14, max_iter=1000, **kwargs)


@pytest.mark.parametrize("estimator", [LinearRegression(), Ridge(alpha=2.5)])
def test_regression_target_recovered_exactly(estimator):
    x, y = _regression()
    estimator.fit(x, y)
    result = reconstruct_target(estimator, x[:-1], y[:-1])
    np.testing.assert_allclose(result.features[0], x[-1], rtol=0, atol=1e-8)
    assert result.labels[0] == pytest.approx(y[-1], abs=1e-8)
    assert result.gradient_norm < 1e-12


@pytest.mark.parametrize("n_classes", [2, 3])
def test_logistic_target_and_label_recovered_exactly(n_classes):
    x, y = _classes(n_classes)
    estimator = _exact_logistic(C=0.7).fit(x, y)
    result = reconstruct_target(estimator, x[:-1], y[:-1])
    np.testing.assert_allclose(result.features[0], x[-1], rtol=0, atol=1e-8)
    assert result.labels[0] == y[-1]


def test_plain_arrays_match_the_estimator():
    x, y = _regression()
    ridge = Ridge(alpha=1.5).fit(x, y)
    glm = GLM("gaussian", ridge.coef_, np.atleast_1d(ridge.intercept_), l2=1.5)
    np.testing.assert_allclose(reconstruct_target(glm, x[:-1], y[:-1]).features[0], x[-1], atol=1e-8)


@pytest.mark.parametrize("kind", ["ridge", "logistic"])
def test_without_intercept_known_label_gives_the_target_among_exact_candidates(kind):
    if kind == "ridge":
        x, y = _regression()
        estimator = Ridge(alpha=2.0, fit_intercept=False).fit(x, y)
    else:
        x, y = _classes(2)
        estimator = _exact_logistic(C=0.7, fit_intercept=False).fit(x, y)
    result = reconstruct_target(estimator, x[:-1], y[:-1], label=y[-1])
    errors = np.abs(result.features - x[-1]).max(axis=1)
    assert errors.min() < 1e-8
    measure = result.to_measure()
    assert measure.total_mass() == pytest.approx(1.0)


def test_without_intercept_requires_the_label():
    x, y = _regression()
    estimator = Ridge(alpha=1.0, fit_intercept=False).fit(x, y)
    with pytest.raises(ReconError, match="label"):
        reconstruct_target(estimator, x[:-1], y[:-1])


def test_not_optimal_reports_gradient_norm():
    x, y = _classes(2)
    with pytest.warns(Warning):
        estimator = LogisticRegression(C=0.7, max_iter=2).fit(x, y)
    with pytest.raises(NotOptimalError, match="gradient norm") as info:
        reconstruct_target(estimator, x[:-1], y[:-1])
    assert info.value.gradient_norm > 1e-6


def test_wrong_known_label_is_not_optimal():
    x, y = _regression()
    estimator = LinearRegression().fit(x, y)
    with pytest.raises(NotOptimalError):
        reconstruct_target(estimator, x[:-1], y[:-1], label=y[-1] + 1.0)


def test_target_on_the_fit_is_singular():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 1.0  # noiseless: every residual is zero
    with pytest.raises(SingularTargetError):
        reconstruct_target(LinearRegression().fit(x, y), x[:-1], y[:-1])


def test_unsupported_estimator_and_bad_shapes_are_clear_errors():
    x, y = _regression()
    with pytest.raises(ReconError, match="not supported"):
        reconstruct_target(Lasso(alpha=0.1).fit(x, y), x[:-1], y[:-1])
    with pytest.raises(ReconError, match="not fitted"):
        reconstruct_target(Ridge(), x[:-1], y[:-1])
    with pytest.raises(ReconError, match="SVR is not supported"):  # fitted, but kernelised
        reconstruct_target(SVR().fit(x, y), x[:-1], y[:-1])
    with pytest.raises(ReconError, match="positive=True"):  # constrained: KKT, not a zero gradient
        reconstruct_target(LinearRegression(positive=True).fit(x, y), x[:-1], y[:-1])
    with pytest.raises(ReconError, match="tol must be > 0"):
        reconstruct_target(LinearRegression().fit(x, y), x[:-1], y[:-1], config=GLMAttackConfig(tol=-1))
    with pytest.raises(ReconError, match="match"):
        reconstruct_target(LinearRegression().fit(x, y), x[:-1, :3], y[:-1])
