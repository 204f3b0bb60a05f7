"""WeightedMeasure: statistics of sum_j w_j delta_{x_j}; integer weights are repeated rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recon_core.measure import WeightedMeasure, linear_model_errors

RNG = np.random.default_rng(11)


@pytest.fixture
def repeated():
    """A measure with integer weights and the data set it stands for (each row repeated w_j times)."""
    n = 9
    points = {"x": RNG.normal(2, 3, n), "y": RNG.normal(-1, 1, n), "v": RNG.normal(0, 1, (n, 2))}
    weights = np.array([1, 3, 0, 2, 5, 1, 1, 4, 2])
    expanded = {k: np.repeat(v, weights, axis=0) for k, v in points.items()}
    return WeightedMeasure(points, weights.astype(float)), expanded


def test_total_mass_and_length(repeated):
    measure, expanded = repeated
    assert measure.total_mass() == 19.0 == len(expanded["x"])
    assert len(measure) == 9
    assert measure.names == ["x", "y", "v"]
    assert WeightedMeasure.empirical({"x": np.arange(4.0)}).total_mass() == 4.0


def test_mean_var_cov_against_numpy(repeated):
    measure, e = repeated
    np.testing.assert_allclose(measure.mean("x"), e["x"].mean())
    np.testing.assert_allclose(measure.mean("v"), e["v"].mean(axis=0))
    np.testing.assert_allclose(measure.var("y"), e["y"].var())
    np.testing.assert_allclose(measure.var("v"), e["v"].var(axis=0))
    stacked = np.column_stack([e["x"], e["y"], e["v"]])
    np.testing.assert_allclose(measure.cov(["x", "y", "v"]), np.cov(stacked, rowvar=False, ddof=0))
    np.testing.assert_allclose(measure.cov(), np.cov(stacked, rowvar=False, ddof=0))
    np.testing.assert_allclose(
        measure.matrix(["y", "v"]), np.column_stack([measure.points["y"], measure.points["v"]])
    )


def test_moments_against_numpy(repeated):
    measure, e = repeated
    assert measure.moment({"x": 2}) == pytest.approx(np.mean(e["x"] ** 2))
    assert measure.moment({"x": 2, "y": 1}) == pytest.approx(np.mean(e["x"] ** 2 * e["y"]))
    centred = (e["x"] - e["x"].mean()) ** 3 * (e["y"] - e["y"].mean())
    assert measure.moment({"x": 3, "y": 1}, central=True) == pytest.approx(np.mean(centred))
    with pytest.raises(ValueError, match="scalar columns"):
        measure.moment({"v": 1})


def test_expect_and_integrate(repeated):
    measure, e = repeated
    values = np.sin(measure.points["x"])
    np.testing.assert_allclose(measure.integrate(values), np.sin(e["x"]).sum())
    np.testing.assert_allclose(measure.expect(values), np.sin(e["x"]).mean())


def test_scaling_weights_keeps_normalised_statistics():
    points = {"x": RNG.normal(size=6)}
    w = RNG.uniform(0.1, 2, 6)
    a, b = WeightedMeasure(points, w), WeightedMeasure(points, 7 * w)
    assert b.total_mass() == pytest.approx(7 * a.total_mass())
    assert b.mean("x") == pytest.approx(a.mean("x")) and b.var("x") == pytest.approx(a.var("x"))


def test_linear_model_statistics_against_explicit_sums(repeated):
    measure, _ = repeated
    x = np.column_stack([np.ones(len(measure)), measure.points["x"], measure.points["v"][:, 0]])
    y = measure.points["y"]
    w = measure.weights
    stats = measure.linear_model_statistics(x, y)
    assert float(stats["N"]) == w.sum()
    xtx = sum(w[j] * np.outer(x[j], x[j]) for j in range(len(w)))
    xty = sum(w[j] * x[j] * y[j] for j in range(len(w)))
    np.testing.assert_allclose(stats["XtX"], xtx)
    np.testing.assert_allclose(stats["Xty"], xty)
    np.testing.assert_allclose(stats["yty"], sum(w[j] * y[j] ** 2 for j in range(len(w))))


def _stats(n, xtx, xty, yty):
    return {
        "N": np.asarray(n),
        "XtX": np.asarray(xtx, float),
        "Xty": np.asarray(xty, float),
        "yty": np.asarray(yty),
    }


def test_linear_model_errors_zero_on_identical_inputs(repeated):
    measure, _ = repeated
    x = np.column_stack([np.ones(len(measure)), measure.points["x"]])
    stats = measure.linear_model_statistics(x, measure.points["y"])
    assert linear_model_errors(stats, stats) == {"N": 0.0, "XtX": 0.0, "Xty": 0.0, "yty": 0.0}


def test_linear_model_errors_hand_made_perturbation():
    # Z = [[4, 2, 3], [2, 9, 1], [3, 1, 16]]: sqrt(Z_aa Z_bb) = 2·3 for (0, 1), 2·4 for (0, 2), 3·4 for (1, 2)
    truth = _stats(10, [[4, 2], [2, 9]], [3, 1], 16)
    estimate = _stats(12, [[4, 2.6], [2.6, 9]], [3, 2.2], 15)
    errors = linear_model_errors(estimate, truth)
    assert errors["N"] == pytest.approx(0.2)
    assert errors["XtX"] == pytest.approx(0.6 / 6)
    assert errors["Xty"] == pytest.approx(1.2 / 12)  # the largest of 0/8 and 1.2/12
    assert errors["yty"] == pytest.approx(1 / 16)
    diagonal = _stats(10, [[5, 2], [2, 9]], [3, 1], 16)
    assert linear_model_errors(diagonal, truth)["XtX"] == pytest.approx(1 / 4)


def _rows(points):
    return np.asarray(points["x"]).reshape(len(points["x"]), -1)


def _linear_kernel(a, b):
    return _rows(a) @ _rows(b).T


def _gaussian_kernel(a, b):
    return np.exp(-0.5 * ((_rows(a)[:, None, :] - _rows(b)[None, :, :]) ** 2).sum(-1))


def test_mmd_zero_for_the_same_measure():
    points = {"x": RNG.normal(size=(7, 2))}
    w = RNG.uniform(0.5, 2, 7)
    a = WeightedMeasure(points, w)
    assert a.mmd(a, _gaussian_kernel) == pytest.approx(0.0, abs=1e-6)
    # the same measure written differently: one point split in two halves of its weight
    split = WeightedMeasure(
        {"x": np.vstack([points["x"], points["x"][:1]])}, np.r_[w[0] / 2, w[1:], w[0] / 2]
    )
    assert a.mmd(split, _gaussian_kernel) == pytest.approx(0.0, abs=1e-6)


def test_mmd_linear_kernel_closed_form():
    a = WeightedMeasure({"x": RNG.normal(size=(5, 3))}, RNG.uniform(0, 2, 5))
    b = WeightedMeasure({"x": RNG.normal(size=(8, 3))}, RNG.uniform(0, 2, 8))
    expected = np.linalg.norm(a.weights @ a.points["x"] - b.weights @ b.points["x"])
    assert a.mmd(b, _linear_kernel) == pytest.approx(expected, rel=1e-10)
    assert b.mmd(a, _linear_kernel) == pytest.approx(expected, rel=1e-10)
    # mass counts: doubling every weight of one measure moves it
    doubled = WeightedMeasure(a.points, 2 * a.weights)
    assert a.mmd(doubled, _linear_kernel) == pytest.approx(np.linalg.norm(a.weights @ a.points["x"]))


def test_save_load_round_trip(tmp_path, repeated):
    measure = WeightedMeasure(
        repeated[0].points,
        repeated[0].weights,
        {"attack": "fisher", "steps": np.int64(5), "grid": np.arange(3)},
    )
    written = measure.save(tmp_path / "sub" / "result.npz")
    assert written == tmp_path / "sub" / "result.npz" and written.exists()
    header = json.loads((tmp_path / "sub" / "result.json").read_text())
    assert header["names"] == ["x", "y", "v"] and header["shapes"]["v"] == [9, 2]
    assert header["total_mass"] == 19.0
    loaded = WeightedMeasure.load(tmp_path / "sub" / "result")
    np.testing.assert_array_equal(loaded.weights, measure.weights)
    assert loaded.names == measure.names
    for name in measure.names:
        np.testing.assert_array_equal(loaded.points[name], measure.points[name])
    assert loaded.meta == {"attack": "fisher", "steps": 5, "grid": [0, 1, 2]}
    with pytest.raises(FileNotFoundError, match="no saved measure"):
        WeightedMeasure.load(tmp_path / "missing")


def test_to_dataframe(repeated):
    measure, _ = repeated
    frame = measure.to_dataframe()
    assert list(frame.columns) == ["weight", "x", "y", "v[0]", "v[1]"]
    assert len(frame) == 9
    np.testing.assert_array_equal(frame["weight"].to_numpy(), measure.weights)
    np.testing.assert_array_equal(frame["v[1]"].to_numpy(), measure.points["v"][:, 1])
    np.testing.assert_array_equal(frame["x"].to_numpy(), measure.points["x"])


@pytest.mark.parametrize(
    ("points", "weights", "match"),
    [
        ({}, np.ones(2), "at least one"),
        ({"x": np.ones(3)}, np.ones(2), "data-point axis"),
        ({"x": np.ones(2)}, np.ones((2, 1)), "one-dimensional"),
        ({"x": np.ones(2)}, np.array([1.0, -1.0]), "non-negative"),
        ({"x": np.ones(2)}, np.array([1.0, np.nan]), "finite"),
    ],
)
def test_invalid_measures_are_rejected(points, weights, match):
    with pytest.raises(ValueError, match=match):
        WeightedMeasure(points, weights)


def test_unknown_column_names_the_columns(repeated):
    with pytest.raises(KeyError, match="'x', 'y', 'v'"):
        repeated[0].column("z")
