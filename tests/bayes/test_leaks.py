"""What a draws file gives away besides the draws, rows recovered from a log-likelihood, and ``strip``.

The model is a Gaussian linear regression on two covariates (N = 30) in a file of its own; its
draws are fabricated from the exact posterior shape (OLS plus noise scaled by a χ² draw of σ), and
the per-row log-likelihood, predictive draws and fitted values are computed from the true data, as
ArviZ and CmdStan would store them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import gammaln

from bayes_recon.cli import main
from bayes_recon.leaks import find_leaks, loglik_matrix, read_release, recover_from_loglik, row_count
from bayes_recon.userfiles import read_draws

N_ROWS, N_DRAWS = 30, 200

LINEAR = """\
import numpyro
import numpyro.distributions as dist


def model(X, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([3]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("rows", X.shape[0]):
        numpyro.sample("y", dist.Normal(beta[0] + X @ beta[1:], sigma), obs=y)
"""


def poisson(x, y=None):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    beta = numpyro.sample("beta", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(beta[0] + beta[1] * x)), obs=y)


def _cmdstan_csv(path: Path, columns: dict[str, np.ndarray]) -> None:
    """A CmdStan output file: comment lines, sampler columns, then the model's columns (Stan names)."""
    names, values = ["lp__", "accept_stat__"], [np.full(N_DRAWS, -10.5), np.full(N_DRAWS, 0.9)]
    for name, array in columns.items():
        flat = array.reshape(N_DRAWS, -1)
        names += [name] if array.ndim == 1 else [f"{name}.{i + 1}" for i in range(flat.shape[1])]
        values += list(flat.T)
    table = np.column_stack(values)
    lines = ["# stan_version_major = 2", ",".join(names), "# Adaptation terminated"]
    lines += [",".join(f"{v:.17g}" for v in row) for row in table]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def fit(tmp_path_factory) -> dict:
    """The model file, the true data, the draws and the files holding them with the data's traces."""
    d = tmp_path_factory.mktemp("leaks")
    (d / "linear.py").write_text(LINEAR)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_ROWS, 2)) * [1.0, 3.0] + [0.0, 5.0]
    y = 1.0 + X @ [2.0, -0.5] + rng.normal(size=N_ROWS)
    design = np.column_stack([np.ones(N_ROWS), X])
    ols = np.linalg.lstsq(design, y, rcond=None)[0]
    s = np.sqrt(np.sum((y - design @ ols) ** 2) / (N_ROWS - 3))
    sigma = s * np.sqrt((N_ROWS - 3) / rng.chisquare(N_ROWS - 3, N_DRAWS))
    chol = np.linalg.cholesky(np.linalg.inv(design.T @ design))
    beta = ols + (rng.normal(size=(N_DRAWS, 3)) @ chol.T) * sigma[:, None]
    mu = beta @ design.T  # (S, N) fitted values
    loglik = -0.5 * np.log(2 * np.pi * sigma[:, None] ** 2) - (y - mu) ** 2 / (2 * sigma[:, None] ** 2)
    y_rep = mu + sigma[:, None] * rng.normal(size=mu.shape)

    (d / "data.csv").write_text(
        "X.1,X.2,y\n" + "".join(f"{a:.17g},{b:.17g},{c:.17g}\n" for (a, b), c in zip(X, y, strict=True))
    )
    chains = lambda a: a.reshape(2, N_DRAWS // 2, *a.shape[1:])  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz

        full = arviz.from_dict(
            posterior={"beta": chains(beta), "sigma": chains(sigma), "mu": chains(mu)},
            log_likelihood={"y": chains(loglik)},
            posterior_predictive={"y": chains(y_rep)},
            sample_stats={"lp": chains(np.full(N_DRAWS, -10.0)), "log_lik": chains(loglik)},
            observed_data={"y": y},
            constant_data={"X": X},
        )
        full.to_netcdf(d / "fit.nc")
        bare = arviz.from_dict(posterior={"beta": chains(beta), "sigma": chains(sigma)},
                               log_likelihood={"y": chains(loglik)})  # fmt: skip
        bare.to_netcdf(d / "loglik_only.nc")
        full.to_datatree().to_zarr(d / "fit.zarr", mode="w")
        arviz.from_dict(posterior_predictive={"y": chains(y_rep)}).to_netcdf(d / "predictive.nc")
    _cmdstan_csv(d / "fit.csv", {"beta": beta, "sigma": sigma, "log_lik": loglik, "y_rep": y_rep})
    np.savez(d / "fit.npz", beta=beta, sigma=sigma, a=mu, b=y_rep)
    halves = [slice(0, N_DRAWS // 2), slice(N_DRAWS // 2, N_DRAWS)]
    named = {f"beta[{j + 1}]": beta[:, j] for j in range(3)} | {"sigma": sigma}
    named |= {f"log_lik[{i + 1}]": loglik[:, i] for i in range(N_ROWS)}
    (d / "fit.json").write_text(json.dumps([{k: v[h].tolist() for k, v in named.items()} for h in halves]))
    return {"dir": d, "X": X, "y": y, "beta": beta, "sigma": sigma, "loglik": loglik}


def _labels(findings) -> dict[str, str]:
    return {f"{f.group}/{f.variable}": f.reveals for f in findings}


def test_findings_on_inference_data(fit):
    findings = find_leaks(read_release([fit["dir"] / "fit.nc"]))
    assert _labels(findings) == {
        "observed_data/y": "the data itself: 30 rows of y",
        "constant_data/X": "the data itself: 30 rows of X",
        "log_likelihood/y": "log p(x_i|θ) for 30 rows over 200 draws",
        "sample_stats/log_lik": "log p(x_i|θ) for 30 rows over 200 draws",
        "posterior_predictive/y": "draws of the data (posterior predictive) for 30 rows over 200 draws",
        "posterior/mu": "a per-row quantity for 30 rows over 200 draws (fitted values or another "
        "function of each row)",
    }
    assert [f.severity for f in findings] == ["high"] * 6
    assert [f.kind for f in findings][:2] == ["data", "data"]  # the data first
    assert findings[0].to_json()["shape"] == [30] and findings[0].to_json()["rows_recovered"] is None


def test_loglik_is_read_once_when_stored_twice(fit):
    """An older ArviZ kept log_lik in sample_stats too: the log_likelihood group is read, not the sum."""
    release = read_release([fit["dir"] / "fit.nc"])
    matrix, used = loglik_matrix(release, find_leaks(release), N_ROWS)
    assert used == {("log_likelihood", "y")}
    np.testing.assert_array_equal(matrix, fit["loglik"])


def test_findings_on_cmdstan_csv_posteriordb_json_and_npz(fit):
    """No observed data: N is the length the per-row names share (log_lik, y_rep), or the length
    two unnamed arrays share."""
    csv = read_release([fit["dir"] / "fit.csv"])
    assert row_count(csv) == N_ROWS
    assert _labels(find_leaks(csv)) == {
        "columns/log_lik": "log p(x_i|θ) for 30 rows over 200 draws",
        "columns/y_rep": "a per-row quantity for 30 rows over 200 draws (fitted values or another "
        "function of each row)",
    }
    posteriordb = read_release([fit["dir"] / "fit.json"])
    assert _labels(find_leaks(posteriordb)) == {"columns/log_lik": "log p(x_i|θ) for 30 rows over 200 draws"}
    npz = read_release([fit["dir"] / "fit.npz"])
    assert {f.variable for f in find_leaks(npz)} == {"a", "b"}
    assert find_leaks(npz, n_rows=7) == []  # N given: no axis of length 7


def test_gaussian_regression_rows_recovered_exactly_from_the_log_likelihood(fit):
    """Every column free (both covariates and the response): each row from its log-likelihood alone."""
    draws = {"beta": fit["beta"], "sigma": fit["sigma"]}
    recovery = recover_from_loglik(
        _linear_model(fit), draws, fit["loglik"], {"X": (2,), "y": ()}, truth={"X": fit["X"], "y": fit["y"]}
    )
    assert recovery.n_recovered == N_ROWS and recovery.share_exact == 1.0
    np.testing.assert_allclose(recovery.rows["X"], fit["X"], atol=1e-5)
    np.testing.assert_allclose(recovery.rows["y"], fit["y"], atol=1e-5)


def test_poisson_counts_recovered_given_the_covariate_and_both_when_free():
    rng = np.random.default_rng(1)
    x = rng.normal(size=N_ROWS)
    y = rng.poisson(np.exp(1.0 + 0.7 * x)).astype(float)
    beta = np.array([1.0, 0.7]) + 0.1 * rng.normal(size=(N_DRAWS, 2))
    eta = beta[:, :1] + beta[:, 1:] * x
    loglik = y * eta - np.exp(eta) - gammaln(y + 1)
    counts = recover_from_loglik(poisson, {"beta": beta}, loglik, {"y": ()}, fixed={"x": x}, truth={"y": y})
    assert counts.n_recovered == N_ROWS
    np.testing.assert_array_equal(counts.rows["y"], y)  # integers: rounded, as the model's support says
    both = recover_from_loglik(poisson, {"beta": beta}, loglik, {"x": (), "y": ()}, truth={"x": x, "y": y})
    # the covariate is free too: y·η − e^η − log y! at 40 draws pins down both
    assert both.n_recovered == N_ROWS and both.max_error["x"] < 1e-6 and both.max_error["y"] == 0


def binomial(x, n, y=None):
    import numpyro
    import numpyro.distributions as dist

    beta = numpyro.sample("beta", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Binomial(n, logits=beta[0] + beta[1] * x), obs=y)


def test_binomial_successes_recovered_given_the_trials_of_each_row():
    """The trials known row by row bound the response row by row: solved for over the reals, then rounded
    (the support's probe had refused it as a response bounded by another column)."""
    rng = np.random.default_rng(2)
    x, n = rng.normal(size=N_ROWS), rng.integers(1, 12, N_ROWS)
    y = rng.binomial(n, 1 / (1 + np.exp(-(0.3 + 0.8 * x)))).astype(float)
    beta = np.array([0.3, 0.8]) + 0.1 * rng.normal(size=(N_DRAWS, 2))
    eta = beta[:, :1] + beta[:, 1:] * x
    loglik = y * eta - n * np.logaddexp(0, eta) + gammaln(n + 1) - gammaln(y + 1) - gammaln(n - y + 1)
    found = recover_from_loglik(
        binomial, {"beta": beta}, loglik, {"y": ()}, fixed={"x": x, "n": n}, truth={"y": y}
    )
    assert found.n_recovered >= 0.9 * N_ROWS and found.share_exact >= 0.9  # 28 of 30 before this probe


def _linear_model(fit):
    from bayes_recon.userfiles import load_model

    return load_model(f"{fit['dir']}/linear.py:model")


@pytest.mark.parametrize("name", ["fit.nc", "fit.zarr", "fit.csv", "fit.npz"])
def test_strip_keeps_the_draws_alone(fit, tmp_path, capsys, name):
    source = fit["dir"] / name
    target = tmp_path / f"stripped{source.suffix}"
    assert main(["strip", str(source), str(target)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"removed from {source}: ") and f"wrote {target}" in out
    assert find_leaks(read_release([target]), n_rows=N_ROWS) == []
    if name == "fit.npz":  # no Stan site names: the per-row arrays went, the draws are as they were
        kept = np.load(target)
        assert sorted(kept.files) == ["beta", "sigma"]
        np.testing.assert_array_equal(kept["beta"], fit["beta"])
        return
    draws = read_draws([str(target)])
    assert set(draws) == {"beta", "sigma"}
    np.testing.assert_array_equal(draws["beta"], fit["beta"])
    np.testing.assert_array_equal(draws["sigma"], fit["sigma"])


def test_strip_reports_what_it_removed_and_keeps_what_is_asked(fit, tmp_path, capsys):
    target = tmp_path / "kept.nc"
    assert main(["strip", str(fit["dir"] / "fit.nc"), str(target), "--keep", "mu"]) == 0
    out = capsys.readouterr().out
    removed = out.splitlines()[0]
    for part in (
        "posterior_predictive",
        "log_likelihood",
        "observed_data",
        "constant_data",
        "sample_stats/log_lik",
    ):
        assert part in removed
    assert "posterior/mu" in out.splitlines()[1]  # kept, as asked
    assert set(read_release([target]).groups()) == {"posterior", "sample_stats"}
    assert _labels(find_leaks(read_release([target]), n_rows=N_ROWS)) == {
        "posterior/mu": "a per-row quantity for 30 rows over 200 draws (fitted values or another "
        "function of each row)"
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("strip {d}/fit.nc {d}/fit.nc", "OUT is IN"),
        ("strip {d}/fit.nc {d}/no_such_folder/out.nc", "no_such_folder does not exist"),
        ("strip {d}/fit.nc {d}/out.npz", "same suffix"),
        ("strip {d}/fit.nc {d}/out.nc --keep nope", "--keep nope: no such variable"),
        ("strip {d}/missing.nc {d}/out.nc", "no file"),
        ("strip {d}/fit.zarr {d}/fit.zarr", "OUT is IN"),
        ("strip {d}/fit.csv {d}/out.csv --rows 0", "--rows must be at least 1"),
        ("strip {d}/predictive.nc {d}/out.nc", "no 'posterior' group"),
        ("strip {d}/fit.json {d}/out.json", "not JSON"),
    ],
)
def test_strip_bad_input_exits_2_with_one_line(fit, capsys, argv, message):
    assert main(argv.replace("{d}", str(fit["dir"])).split()) == 2
    err = capsys.readouterr().err
    assert err.startswith("bayes-recon: error: ") and err.count("\n") == 1 and message in err, err


def test_check_says_first_what_the_file_gives_away(fit, capsys, tmp_path):
    d = fit["dir"]
    argv = ["check", "--model", f"{d}/linear.py:model", "--draws", str(d / "loglik_only.nc"),
            "--data", str(d / "data.csv"), "--free", "X,y", "--json", str(tmp_path / "c.json")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    first, second = out.splitlines()[:2]
    assert first.startswith(f"{d / 'loglik_only.nc'} gives away more than the posterior draws")
    assert "high    log_likelihood/y (200x30): log p(x_i|θ) for 30 rows over 200 draws" in second
    assert "30 rows recovered" in second
    (leak,) = json.loads((tmp_path / "c.json").read_text())["file_leaks"]
    assert leak["group"] == "log_likelihood" and leak["rows_recovered"] == N_ROWS
    assert leak["max_error"] < 1e-5 and leak["shape"] == [N_DRAWS, N_ROWS]


def test_audit_lists_the_leaks_before_it_attacks(fit, capsys, monkeypatch):
    import bayes_recon.audit as module
    from recon_core.errors import ReconError

    def attack(*args, **kwargs):
        raise ReconError("the attack would start here")

    monkeypatch.setattr(module, "audit_posterior", attack)
    d = fit["dir"]
    argv = ["--quiet", "audit", "--model", f"{d}/linear.py:model", "--draws", str(d / "fit.csv"),
            "--data", str(d / "data.csv"), "--free", "X,y"]  # fmt: skip
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"{d / 'fit.csv'} gives away more than the posterior draws")
    assert "log_lik (200x30)" in out and "30 rows recovered from it, max error" in out
