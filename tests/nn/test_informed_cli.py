"""The informed subcommands: glm end to end, reconn on a tiny digits run, bad input exits 2."""

import joblib
import numpy as np
from sklearn.linear_model import LogisticRegression, Ridge

from bayes_recon.measure import WeightedMeasure
from nn_recon.cli import main


def _known(tmp_path, x, y):
    path = tmp_path / "known.npz"
    np.savez(path, x=x[:-1], y=y[:-1])
    return path


def test_glm_reconstructs_a_saved_estimator(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4))
    y = (x @ rng.normal(size=4) + rng.normal(size=80) > 0).astype(int)
    estimator = LogisticRegression(C=2.0, solver="newton-cholesky", tol=1e-14).fit(x, y)
    joblib.dump(estimator, tmp_path / "model.joblib")
    code = main(["--quiet", "glm", "--model", str(tmp_path / "model.joblib"), "--known",
                 str(_known(tmp_path, x, y)), "--out", str(tmp_path / "recon")])  # fmt: skip
    assert code == 0
    measure = WeightedMeasure.load(tmp_path / "recon" / "reconstruction")
    np.testing.assert_allclose(measure.points["x"][0], x[-1], atol=1e-8)
    assert measure.points["y"][0] == y[-1] and measure.total_mass() == 1
    assert "target label:    " + str(y[-1]) in capsys.readouterr().out


def test_glm_from_plain_coefficients_and_csv(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 3))
    y = x @ np.array([1.0, -1.0, 2.0]) + rng.normal(size=60)
    ridge = Ridge(alpha=0.5).fit(x, y)
    np.savez(tmp_path / "glm.npz", family="gaussian", coef=ridge.coef_, intercept=[ridge.intercept_], l2=0.5)
    np.savetxt(tmp_path / "known.csv", np.column_stack([x[:-1], y[:-1]]), delimiter=",")
    model, known = str(tmp_path / "glm.npz"), str(tmp_path / "known.csv")
    code = main(["--quiet", "glm", "--model", model, "--known", known, "--out", str(tmp_path / "recon")])
    assert code == 0
    np.testing.assert_allclose(
        WeightedMeasure.load(tmp_path / "recon" / "reconstruction").points["x"][0], x[-1], atol=1e-8
    )


def test_glm_bad_input_exits_2(tmp_path, capsys):
    assert main(["glm", "--model", str(tmp_path / "missing.joblib"), "--known", str(tmp_path / "k.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    joblib.dump(Ridge().fit(x, y), tmp_path / "ridge.joblib")
    np.savez(tmp_path / "wrong.npz", x=x[:-1, :1], y=y[:-1])
    assert (
        main(["glm", "--model", str(tmp_path / "ridge.joblib"), "--known", str(tmp_path / "wrong.npz")]) == 2
    )
    assert "match" in capsys.readouterr().err
    (tmp_path / "junk.joblib").write_text("not a pickle")
    junk, known = str(tmp_path / "junk.joblib"), str(tmp_path / "wrong.npz")
    assert main(["glm", "--model", junk, "--known", known]) == 2
    assert "junk.joblib (KeyError: " in capsys.readouterr().err  # the exception named, not a bare number


def test_shadows_then_reconn_on_digits(tmp_path, capsys):
    common = ["--dataset", "digits", "--fixed-set", "50", "--shadows", "60", "--targets", "10", "--widths",
              "64,10,10", "--epochs", "5", "--chunk-size", "30", "--out", str(tmp_path)]  # fmt: skip
    assert main(["--quiet", "shadows", *common]) == 0
    assert len(list((tmp_path / "shadows_60").glob("chunk_*.pt"))) == 2
    assert main(["--quiet", "reconn", *common, "--reconn-epochs", "2", "--reconn-hidden", "16"]) == 0
    out = capsys.readouterr().out
    assert "success_rate" in out and (tmp_path / "weights_60" / "grid.png").exists()
    assert main(["reconn", *common[:-2], "--widths", "784,10,10", "--out", str(tmp_path)]) == 2
    capsys.readouterr()
    assert main(["reconn", *common[:-2], "--shadows", "1", "--out", str(tmp_path / "one")]) == 2
    assert "needs >= 2, not 1" in capsys.readouterr().err and not (tmp_path / "one").exists()
