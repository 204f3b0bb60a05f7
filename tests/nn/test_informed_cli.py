"""The informed subcommands: glm end to end, reconn on a tiny digits run, bad input exits 2, and no
code runs from a model file."""

import pickle
import sys

import joblib
import numpy as np
import pytest
import skops.io
from sklearn.linear_model import LogisticRegression, Ridge

from nn_recon.cli import main
from recon_core.measure import WeightedMeasure


def _known(tmp_path, x, y):
    path = tmp_path / "known.npz"
    np.savez(path, x=x[:-1], y=y[:-1])
    return path


@pytest.mark.parametrize(
    ("name", "dump", "flags"),
    [("model.skops", skops.io.dump, []), ("model.joblib", joblib.dump, ["--trust-pickle"])],
)
def test_glm_reconstructs_a_saved_estimator(tmp_path, capsys, name, dump, flags):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4))
    y = (x @ rng.normal(size=4) + rng.normal(size=80) > 0).astype(int)
    estimator = LogisticRegression(C=2.0, solver="newton-cholesky", tol=1e-14).fit(x, y)
    dump(estimator, tmp_path / name)
    code = main(["--quiet", "glm", "--model", str(tmp_path / name), *flags, "--known",
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
    skops.io.dump(Ridge().fit(x, y), tmp_path / "ridge.skops")
    np.savez(tmp_path / "wrong.npz", x=x[:-1, :1], y=y[:-1])
    ridge, wrong = str(tmp_path / "ridge.skops"), str(tmp_path / "wrong.npz")
    assert main(["glm", "--model", ridge, "--known", wrong]) == 2
    assert "match" in capsys.readouterr().err
    (tmp_path / "junk.joblib").write_text("not a pickle")
    junk, known = str(tmp_path / "junk.joblib"), str(tmp_path / "wrong.npz")
    assert main(["glm", "--model", junk, "--trust-pickle", "--known", known]) == 2
    assert "junk.joblib (KeyError: " in capsys.readouterr().err  # the exception named, not a bare number
    (tmp_path / "junk.skops").write_text("not a zip")
    assert main(["glm", "--model", str(tmp_path / "junk.skops"), "--known", known]) == 2
    assert "junk.skops is not a readable skops file (BadZipFile" in capsys.readouterr().err


class WritesAFile:
    """Loading this object (by unpickling or by skops) writes the file at ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):  # what pickle calls to rebuild it: open(marker, "w")
        return open, (self.marker, "w")

    def __setstate__(self, state):  # what skops calls to rebuild it
        open(state["marker"], "w").close()


def _bad_input(capsys, argv):
    """The exit status and stderr of ``nn-recon argv``, which must be one line (no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert err.startswith("nn-recon: error: ") and err.count("\n") == 1, err
    return code, err


def test_a_crafted_pickle_runs_no_code_without_trust_pickle(tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    model = tmp_path / "model.joblib"
    model.write_bytes(pickle.dumps(WritesAFile(marker)))
    pickle.loads(model.read_bytes())  # the payload is real: unpickling writes the marker
    assert marker.exists()
    marker.unlink()
    rng = np.random.default_rng(4)
    known = _known(tmp_path, rng.normal(size=(10, 2)), rng.normal(size=10))
    code, err = _bad_input(capsys, ["glm", "--model", str(model), "--known", str(known)])
    assert code == 2 and not marker.exists()
    assert "runs any code" in err and "--trust-pickle" in err and ".skops" in err and ".npz" in err


def test_a_skops_file_with_a_type_outside_the_allow_list_is_refused_unloaded(tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    model = tmp_path / "model.skops"
    skops.io.dump(WritesAFile(marker), model)
    known = _known(tmp_path, np.zeros((3, 2)), np.zeros(3))
    code, err = _bad_input(capsys, ["glm", "--model", str(model), "--known", str(known)])
    assert code == 2 and not marker.exists()
    assert (
        "holds types other than the sklearn linear models" in err and "test_informed_cli.WritesAFile" in err
    )


def test_glm_npz_with_nan_coefficients_is_refused(tmp_path, capsys):
    np.savez(tmp_path / "glm.npz", family="gaussian", coef=[1.0, np.nan], intercept=[0.0], l2=0.5)
    known = _known(tmp_path, np.ones((4, 2)), np.ones(4))
    code, err = _bad_input(capsys, ["glm", "--model", str(tmp_path / "glm.npz"), "--known", str(known)])
    assert code == 2 and "coef or intercept holds NaN or infinite values" in err


def test_shadows_then_reconn_on_digits(tmp_path, capsys):
    common = ["--dataset", "digits", "--fixed-set", "50", "--shadows", "60", "--targets", "10", "--widths",
              "64,10,10", "--epochs", "5", "--chunk-size", "30", "--out", str(tmp_path)]  # fmt: skip
    assert main(["--quiet", "shadows", *common]) == 0
    assert len(list((tmp_path / "shadows_60").glob("chunk_*.pt"))) == 2
    assert main(["--quiet", "reconn", *common, "--reconn-epochs", "2", "--reconn-hidden", "16"]) == 0
    out = capsys.readouterr().out
    assert "success_rate" in out and "mean_psnr" in out and (tmp_path / "weights_60" / "grid.png").exists()
    assert main(["reconn", *common[:-2], "--widths", "784,10,10", "--out", str(tmp_path)]) == 2
    capsys.readouterr()
    assert main(["reconn", *common[:-2], "--shadows", "1", "--out", str(tmp_path / "one")]) == 2
    assert "needs >= 2, not 1" in capsys.readouterr().err and not (tmp_path / "one").exists()


@pytest.mark.parametrize("command", ["shadows", "reconn"])
def test_backend_ray_without_ray_is_refused_before_any_work(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where Ray is not installed
    out = tmp_path / "out"
    assert main([command, "--backend", "ray", "--dataset", "digits", "--out", str(out)]) == 2
    assert "pip install 'recon-audit[ray]'" in capsys.readouterr().err and not out.exists()
    assert main([command, "--address", "auto", "--dataset", "digits", "--out", str(out)]) == 2
    assert "goes with backend 'ray'" in capsys.readouterr().err and not out.exists()
