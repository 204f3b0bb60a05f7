"""``bayes-recon`` on a user's own model and files, and bad input of every kind: exit 2, one line.

The user's model is a linear regression in a file of its own; its draws are fabricated from the
exact posterior shape (OLS plus noise scaled by a χ² draw of σ: no sampler, no compiling) and
written in every format the CLI reads. The tests swap the attack for a stand-in
(``fake_reconstruct``); the real attack on the user's files runs in the slow tests.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
import zipfile
from pathlib import Path

import jax
import numpy as np
import pytest

from bayes_recon import pipeline
from bayes_recon.cli import main
from bayes_recon.posteriordb import EMBEDDED
from bayes_recon.userfiles import read_draws

N_ROWS, N_DRAWS = 40, 200
KIDIQ = "kidiq-kidscore_momiq"

LINEAR = """\
import numpyro
import numpyro.distributions as dist


def model(x, y=None, prior_sd=10.0):
    beta = numpyro.sample("beta", dist.Normal(0.0, prior_sd).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(beta[0] + beta[1] * x, sigma), obs=y)
"""

POISSON = """\
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(beta[0] + beta[1] * x)), obs=y)
"""

BINOMIAL = """\
import numpyro
import numpyro.distributions as dist


def model(x, n, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Binomial(n, logits=beta[0] + beta[1] * x), obs=y)
"""

GROUPS = """\
import numpyro
import numpyro.distributions as dist


def model(g, x, y=None):
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 1.0).expand([4]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(alpha[g] + x, 1.0), obs=y)
"""

NOT_OBSERVED = """\
import numpyro
import numpyro.distributions as dist


def model(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    numpyro.sample("y", dist.Normal(beta[0], sigma))  # y is never passed as obs=
"""

KIDIQ_MODEL = "from bayes_recon.models.regression import kidscore_momiq as model  # noqa: F401\n"


def _cmdstan_csv(path: Path, names: list[str], rows: np.ndarray) -> None:
    """A CmdStan output file: '#' comment lines, the sampler's columns, then the parameters."""
    sampler = [
        "lp__",
        "accept_stat__",
        "stepsize__",
        "treedepth__",
        "n_leapfrog__",
        "divergent__",
        "energy__",
    ]
    lines = ["# stan_version_major = 2", "# model = linear_model", "# method = sample (Default)"]
    lines += [",".join(sampler + names), "# Adaptation terminated", "# Step size = 0.8"]
    lines += ["-10.5,0.9,0.8,2,3,0,11," + ",".join(f"{v:.17g}" for v in row) for row in rows]
    lines += ["# ", "#  Elapsed Time: 0.01 seconds (Warm-up)"]
    path.write_text("\n".join(lines) + "\n")


def _database(root: Path, name: str, damage) -> Path:
    """A copy of the embedded kidiq database, damaged by ``damage(copy)``."""
    copy = root / name
    shutil.copytree(EMBEDDED, copy)
    damage(copy)
    return copy


def _edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _zip_json(path: Path, content) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(path.name.removesuffix(".zip"), json.dumps(content))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The user's models, draws in every format, data sets, and broken variants of each."""
    d = tmp_path_factory.mktemp("user")
    for name, text in {"linear": LINEAR, "poisson": POISSON, "unobserved": NOT_OBSERVED, "kidiq": KIDIQ_MODEL,
                       "binomial": BINOMIAL, "groups": GROUPS,
                       "broken": "def model(x:\n"}.items():  # fmt: skip
        (d / f"{name}.py").write_text(text)

    rng = np.random.default_rng(0)
    x = rng.normal(size=N_ROWS)
    y = 1.0 + 2.0 * x + rng.normal(size=N_ROWS)
    design = np.stack([np.ones(N_ROWS), x], 1)
    ols = np.linalg.lstsq(design, y, rcond=None)[0]
    s = np.sqrt(np.sum((y - design @ ols) ** 2) / (N_ROWS - 2))
    sigma = s * np.sqrt((N_ROWS - 2) / rng.chisquare(N_ROWS - 2, N_DRAWS))
    chol = np.linalg.cholesky(np.linalg.inv(design.T @ design))
    beta = ols + (rng.normal(size=(N_DRAWS, 2)) @ chol.T) * sigma[:, None]

    np.savez(d / "fit.npz", beta=beta, sigma=sigma)
    (d / "data.csv").write_text("x,y\n" + "".join(f"{a:.17g},{b:.17g}\n" for a, b in zip(x, y, strict=True)))
    (d / "data.json").write_text(json.dumps({"N": N_ROWS, "x": x.tolist(), "y": y.tolist(), "prior_sd": 10}))
    np.savez(d / "data.npz", x=x, y=y)
    groups = np.arange(N_ROWS) % 4
    (d / "groups.json").write_text(json.dumps({"g": groups.tolist(), "x": x.tolist(), "y": y.tolist()}))
    np.savez(d / "groups.npz", alpha=rng.normal(size=(N_DRAWS, 4)))
    half = N_DRAWS // 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz

        posterior = {"beta": beta.reshape(2, half, 2), "sigma": sigma.reshape(2, half)}
        arviz.from_dict(posterior=posterior).to_netcdf(d / "fit.nc")
        arviz.from_dict(posterior=posterior).to_datatree().to_zarr(d / "fit.zarr", mode="w")
    table = np.column_stack([beta, sigma])
    for chain in range(2):
        _cmdstan_csv(
            d / f"fit-{chain + 1}.csv",
            ["beta.1", "beta.2", "sigma"],
            table[chain * half : (chain + 1) * half],
        )
    _cmdstan_csv(d / "brackets.csv", ["beta[1]", "beta[2]", "sigma"], table)
    parts = [slice(c * half, (c + 1) * half) for c in range(2)]
    chains = [
        {"beta[1]": list(beta[p, 0]), "beta[2]": list(beta[p, 1]), "sigma": list(sigma[p])} for p in parts
    ]
    (d / "fit.json").write_text(json.dumps(chains))

    # broken inputs
    (d / "junk.npz").write_text("not a zip archive")
    (d / "fit.txt").write_text("1 2 3")
    np.savez(d / "empty.npz", beta=np.zeros((0, 2)), sigma=np.zeros(0))
    np.savez(d / "no_sigma.npz", beta=beta)
    np.savez(d / "wide.npz", beta=np.column_stack([beta, beta[:, :1]]), sigma=sigma)
    np.savez(d / "inf_sigma.npz", beta=beta, sigma=np.where(np.arange(N_DRAWS) == 7, np.inf, sigma))
    nan_table = table.copy()
    nan_table[3, 0] = np.nan
    _cmdstan_csv(d / "nan.csv", ["beta.1", "beta.2", "sigma"], nan_table)
    chains[0]["beta[1]"][5] = None
    (d / "null.json").write_text(json.dumps(chains))
    _cmdstan_csv(d / "header_only.csv", ["beta.1", "beta.2", "sigma"], table[:0])
    (d / "counts.csv").write_text("x,y\n0.1,2\n0.3,2.5\n-0.2,1\n")
    (d / "labels.csv").write_text("x,y\n0.1,low\n0.3,high\n")
    (d / "trials_nan.csv").write_text("x,n,y\n0.1,3,1\n0.2,nan,0\n-0.3,2,2\n")
    trials = rng.integers(1, 9, N_ROWS)
    (d / "trials.csv").write_text(
        "x,n,y\n" + "".join(f"{a:.17g},{t},{rng.binomial(t, 0.5)}\n" for a, t in zip(x, trials, strict=True))
    )
    (d / "a_file").write_text("")
    (d / "folder").mkdir()
    (d / "prefix.npz").mkdir()

    posterior_file = Path("posteriors") / f"{KIDIQ}.json"
    draws_zip = Path("reference_posteriors/draws/draws") / f"{KIDIQ}.json.zip"
    _database(d, "db-corrupt", lambda c: (c / posterior_file).write_text('{"name": "kidiq-'))
    _database(d, "db-draws-zip", lambda c: (c / draws_zip).write_text("not a zip"))
    _database(d, "db-data-zip", lambda c: (c / "data/data/kidiq.json.zip").write_text("not a zip"))
    _database(
        d, "db-empty", lambda c: _zip_json(c / draws_zip, [{"beta[1]": [], "beta[2]": [], "sigma": []}])
    )
    _database(d, "db-data-name", lambda c: _edit_json(c / posterior_file, data_name="../../etc/passwd"))
    _database(d, "db-model-name", lambda c: _edit_json(c / posterior_file, model_name="/etc/passwd"))
    _database(
        d,
        "db-data-file",
        lambda c: _edit_json(c / "data/info/kidiq.info.json", data_file="../../../etc/passwd"),
    )
    return d


LINEAR_ARGS = "--model {d}/linear.py:model --free x,y"

# argv (with {d}: the files' folder), then the words the one-line message must hold
BAD_INPUT = [
    # registered posteriors and their database
    ("reconstruct --posterior kidiq-kidscore_momiqq", ["no registered model", KIDIQ]),
    ("reconstruct --posterior kidscore", ["Did you mean", KIDIQ]),
    ("reconstruct --posteriordb {d}/folder", ["not a posteriordb database", "posterior_database"]),
    ("list --posteriordb {d}/folder", ["not a posteriordb database"]),
    ("reconstruct --posteriordb {d}/no_such_folder", ["not a posteriordb database"]),
    (
        "reconstruct --posterior earnings-earn_height",
        ["no posterior 'earnings-earn_height'", "--posteriordb"],
    ),
    ("reconstruct --posteriordb {d}/db-corrupt", ["is not valid JSON", f"{KIDIQ}.json"]),
    ("reconstruct --posteriordb {d}/db-draws-zip", [f"{KIDIQ}.json.zip is not a zip archive", "re-download"]),
    ("audit --posteriordb {d}/db-data-zip", ["kidiq.json.zip is not a zip archive"]),
    ("check --posteriordb {d}/db-empty", ["holds no draws"]),
    ("reconstruct --posteriordb {d}/db-data-name", ["'data_name' = '../../etc/passwd' is not a plain name"]),
    ("reconstruct --posteriordb {d}/db-model-name", ["'model_name' = '/etc/passwd' is not a plain name"]),
    ("reconstruct --posteriordb {d}/db-data-file", ["'data_file' = '../../../etc/passwd' points outside"]),
    # numbers
    ("reconstruct --points 0", ["at least 1", "got 0"]),
    ("reconstruct --quiet --points 0", ["at least 1", "got 0"]),  # --quiet after the subcommand is read
    ("reconstruct --restarts 0", ["restarts must be at least 1", "--restarts"]),
    (f"reconstruct --seed {2**63}", ["seed must be a whole number from 0 to 2**62", str(2**63)]),
    ("audit --seed -1", ["seed must be a whole number"]),
    ("reconstruct --points 1000000000", ["--points 1000000000", "GiB", "fewer points"]),
    (f"audit --points 1000000000 {LINEAR_ARGS} --draws {{d}}/fit.npz --data {{d}}/data.csv", ["GiB"]),
    ("audit --draws 100,1000", ["--draw-counts"]),
    # output paths
    ("reconstruct --json {d}/folder", ["--json", "is a folder"]),
    ("reconstruct --json {d}/no_such_folder/out.json", ["no_such_folder does not exist", "mkdir -p"]),
    ("reconstruct --save {d}/prefix", ["prefix.npz is a folder"]),
    ("audit --report {d}/a_file/report.html", ["a_file is a file, not a folder"]),
    ("check --json {d}/folder", ["is a folder"]),
    # the user's model
    ("reconstruct --model {d}/nowhere.py:model --draws {d}/fit.npz --free x,y", ["no file", "nowhere.py"]),
    (
        "reconstruct --model {d}/linear.py:modle --draws {d}/fit.npz --free x,y",
        ["defines no 'modle'", "'model'"],
    ),
    ("check --model {d}/linear.py --draws {d}/fit.npz --free x,y", ["expected FILE.py:NAME"]),
    ("check --model {d}/broken.py:model --draws {d}/fit.npz --free x,y", ["broken.py line 1: syntax error"]),
    ("check --model {d}/unobserved.py:model --draws {d}/fit.npz --free x,y", ["no observed site"]),
    (f"reconstruct {LINEAR_ARGS},z --draws {{d}}/fit.npz", ["takes no argument(s) ['z']"]),
    ("reconstruct --model {d}/linear.py:model --draws {d}/fit.npz --free 'x y'", ["--free: cannot read"]),
    ("reconstruct --model {d}/linear.py:model --draws {d}/fit.npz --free x:0,y", ["cannot read 'x:0'"]),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --support y=postive",
        ["unknown constraint 'postive'", "positive"],
    ),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --support z=positive", ["not --free columns"]),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --support x=positive,y=real",
        ["one column per --support", "--support x=positive --support y=unit_interval"],
    ),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --support y=interval(0)",
        ["interval takes 2 number(s)"],
    ),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --fixed prior_sd",
        ["known columns are read from --data"],
    ),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --data {{d}}/data.csv --fixed prior_sd",
        ["--fixed ['prior_sd']: no such column"],
    ),
    (
        "reconstruct --model {d}/linear.py:model --draws {d}/fit.npz --free x:3,y --data {d}/data.csv",
        ["shape ()"],
    ),
    (
        "reconstruct --model {d}/linear.py:model --draws {d}/fit.npz --free x,y,z --data {d}/data.csv",
        ["takes no argument"],
    ),
    (
        "check --model {d}/kidiq.py:model --draws {d}/fit.npz --free mom_iq,kid_score --data {d}/data.csv",
        ["no column 'mom_iq'"],
    ),
    (
        "audit --model {d}/poisson.py:model --draws {d}/no_sigma.npz --free x,y --data {d}/counts.csv",
        ["observed site 'y'", "nonnegative_integer", "2.5"],
    ),
    (  # a column of words (pandas 3 reads it as its own string dtype, which NumPy cannot interpret)
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --data {{d}}/labels.csv",
        ["column(s) ['y']", "are not numbers"],
    ),
    (  # a known column with a hole in it: named before the model meets it
        "reconstruct --model {d}/binomial.py:model --draws {d}/no_sigma.npz --free x,y --fixed n "
        "--data {d}/trials_nan.csv",
        ["column 'n' has NaN or inf (first in row 1)"],
    ),
    # combining the options
    ("reconstruct --draws {d}/fit.npz", ["--draws describe your own model: add --model"]),
    ("audit --model {d}/linear.py:model --free x,y", ["--model needs --draws"]),
    ("reconstruct --model {d}/linear.py:model --draws {d}/fit.npz", ["--model needs --free"]),
    (
        f"reconstruct --posterior {KIDIQ} {LINEAR_ARGS} --draws {{d}}/fit.npz",
        ["--posterior picks a registered model"],
    ),
    (f"audit {LINEAR_ARGS} --draws {{d}}/fit.npz", ["has no data", "--data"]),
    # the user's draws
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/junk.npz", ["junk.npz is not a NumPy .npz archive"]),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --data {{d}}/junk.npz",
        ["--data", "is not a NumPy .npz"],
    ),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/empty.npz", ["draws are empty (0 draws)"]),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/header_only.csv", ["hold no draws"]),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/no_sigma.npz", ["lack the model's latent site(s) ['sigma']"]),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/wide.npz",
        ["'beta' has draws of shape (3,) per draw", "(2,)"],
    ),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/inf_sigma.npz", ["NaN or inf", "sigma = inf", "draw 7"]),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/nan.csv",
        ["NaN or inf", "beta[1] (indices from 1) = nan", "draw 3"],
    ),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/null.json", ["NaN or inf", "beta[1] (indices from 1) = nan"]),
    (
        f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz {{d}}/fit.nc",
        ["several files are read as CmdStan CSV"],
    ),
    (  # a group index read as the whole numbers the file holds, so that it indexes; refused with the fix
        "reconstruct --model {d}/groups.py:model --draws {d}/groups.npz --data {d}/groups.json --free x,y "
        "--fixed g",
        ["fixed 'g' holds one value per data row", "--free ...,g --support g=integer_interval(0,3)"],
    ),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.txt", ["cannot tell the format of"]),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/missing.nc", ["--draws: no file"]),
    (f"reconstruct {LINEAR_ARGS} --draws no-such-posterior", ["no posterior 'no-such-posterior'"]),
    (f"reconstruct {LINEAR_ARGS} --draws {{d}}/fit.npz --data {{d}}/missing.csv", ["--data: no file"]),
]


@pytest.mark.parametrize(
    ("argv", "messages"), BAD_INPUT, ids=[f"{i}:{row[1][0][:40]}" for i, row in enumerate(BAD_INPUT)]
)
def test_bad_input_exits_2_with_one_line(files, capsys, monkeypatch, fake_reconstruct, argv, messages):
    monkeypatch.delenv("POSTERIOR_DB_PATH", raising=False)
    words = [w.strip("'").replace("{d}", str(files)) for w in _split(argv)]
    assert main(["--quiet", *words]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bayes-recon: error: ") and "Traceback" not in err
    assert err.count("\n") == 1, err  # one line
    for message in messages:
        assert message in err, err
    assert "miss" not in err or "NaN" not in messages  # NaN is said as NaN, not as missing indices
    assert not fake_reconstruct  # refused before any attack ran


def _split(argv: str) -> list[str]:
    """Words, a quoted one ('x y') kept whole."""
    parts = argv.split("'")
    return [w for i, part in enumerate(parts) for w in ([part] if i % 2 else part.split())]


def test_out_of_scope_posterior_exits_2_with_the_reason(capsys, shared_db, fake_reconstruct):
    argv = [
        "reconstruct",
        "--posterior",
        "eight_schools-eight_schools_noncentered",
        "--posteriordb",
        str(shared_db),
    ]
    assert main(["--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert "out of scope" in err and "latent" in err and "Traceback" not in err
    assert not fake_reconstruct


def test_usage_errors_return_2(capsys):
    assert main(["reconstruct", "--points", "many"]) == 2
    assert "invalid int value" in capsys.readouterr().err


DRAWS_FILES = {
    "npz": ["fit.npz"],
    "netcdf": ["fit.nc"],
    "zarr": ["fit.zarr"],
    "cmdstan": ["fit-1.csv", "fit-2.csv"],
    "stan_brackets": ["brackets.csv"],
    "posteriordb_json": ["fit.json"],
}


@pytest.mark.parametrize("kind", DRAWS_FILES)
def test_every_draws_format_reads_the_same_draws(files, kind):
    draws = read_draws([str(files / name) for name in DRAWS_FILES[kind]])
    reference = np.load(files / "fit.npz")
    assert set(draws) == {"beta", "sigma"}
    np.testing.assert_allclose(draws["beta"], reference["beta"], rtol=1e-15)
    np.testing.assert_allclose(draws["sigma"], reference["sigma"], rtol=1e-15)


@pytest.mark.parametrize(
    ("kind", "data"), list(zip(DRAWS_FILES, ["data.csv", "data.json", "data.npz"] * 2, strict=True))
)
def test_reconstruct_reads_the_users_model_draws_and_data(files, capsys, fake_reconstruct, kind, data):
    draws = [str(files / name) for name in DRAWS_FILES[kind]]
    argv = ["--quiet", "reconstruct", "--model", f"{files}/linear.py:model", "--draws", *draws,
            "--data", str(files / data), "--free", "x,y", "--support", "y=real", "--points", "5"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    (call,) = fake_reconstruct
    assert call.free == {"x": (), "y": ()} and call.n_points == 5 and call.fixed == {}
    assert call.model.__name__ == "model" and call.draws["beta"].shape == (N_DRAWS, 2)
    out = capsys.readouterr().out
    assert "linear.py:model: 5 weighted points" in out and "true N = 40" in out


def test_draws_from_posteriordb_with_the_users_model(files, capsys, fake_reconstruct, monkeypatch):
    """--draws NAME: a posteriordb posterior's reference draws, and its data unless --data is given."""
    monkeypatch.delenv("POSTERIOR_DB_PATH", raising=False)
    argv = ["--quiet", "reconstruct", "--model", f"{files}/kidiq.py:model", "--draws", KIDIQ,
            "--free", "mom_iq,kid_score", "--points", "5"]  # fmt: skip
    assert main(argv) == 0
    assert "true N = 434" in capsys.readouterr().out
    assert fake_reconstruct[0].draws["beta"].shape[1] == 2


def test_check_on_the_users_model_names_the_statistics(files, capsys):
    argv = ["check", "--model", f"{files}/linear.py:model", "--draws", str(files / "fit.nc"), "--free", "x,y"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{files / 'fit.nc'}: the posterior draws alone; nothing else in the file")
    assert "\nlinear.py:model: the draws pin down 6 statistics" in out
    assert "Σ x·y" in out and "Σ y²" in out


def test_trials_that_differ_by_row_are_counted_as_trials(files, capsys, monkeypatch, fake_reconstruct):
    """The attack weighs a binomial's trials (one pseudo-row each): the output says so, and the truth it
    is scored against is the data's trials, N = Σ n."""
    from bayes_recon import pipeline

    stand_in = pipeline.reconstruct

    def expanded(*args, **kwargs):
        recon = stand_in(*args, **kwargs)
        recon.measure.meta["units"] = {"column": "n", "response": "y", "kind": "trials"}
        return recon

    monkeypatch.setattr(pipeline, "reconstruct", expanded)
    out_json = files / "trials_out.json"
    argv = ["reconstruct", "--model", f"{files}/binomial.py:model", "--draws", f"{files}/no_sigma.npz",
            "--data", f"{files}/trials.csv", "--free", "x,y", "--fixed", "n",
            "--json", str(out_json)]  # fmt: skip
    assert main(argv) in (0, 3)
    assert "counted: the weights count n's trials, not rows" in capsys.readouterr().out
    table = np.loadtxt(files / "trials.csv", delimiter=",", skiprows=1)
    assert json.loads(out_json.read_text())["true_n"] == table[:, 1].sum()
    assert fake_reconstruct[-1].fixed["n"].shape == (N_ROWS,)  # the attack gets the trials as they are


def test_quiet_is_taken_after_the_subcommand_too(capsys, fake_reconstruct):
    assert main(["reconstruct", "--points", "3", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["--quiet", "list"]) == main(["list", "--quiet"]) == 0


def test_compiling_is_shown_with_the_time_until_the_first_step(capsys, monkeypatch, fake_reconstruct):
    attack = pipeline.reconstruct

    def slow_to_compile(*args, **kwargs):
        time.sleep(1.5)
        return attack(*args, **kwargs)

    monkeypatch.setattr(pipeline, "reconstruct", slow_to_compile)
    assert main(["reconstruct", "--points", "3"]) == 0
    err = capsys.readouterr().err
    assert f"{KIDIQ}: compiling 00:01" in err and "3/3" in err


def test_compile_cache_is_in_the_users_cache_folder_unless_turned_off(tmp_path, monkeypatch, capsys):
    updates = []
    monkeypatch.setattr(jax.config, "update", lambda name, value: updates.append((name, value)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("RECON_AUDIT_NO_CACHE")
    assert main(["list"]) == 0
    assert ("jax_compilation_cache_dir", str(tmp_path / "recon-audit" / "jax")) in updates
    assert (tmp_path / "recon-audit" / "jax").is_dir()
    updates.clear()
    assert main(["list", "--no-compile-cache"]) == 0
    monkeypatch.setenv("RECON_AUDIT_NO_CACHE", "1")
    assert main(["list"]) == 0
    assert updates == []


TINY = ["--points", "5", "--restarts", "1", "--steps", "5"]


@pytest.mark.slow
def test_real_attack_on_the_users_cmdstan_csv(files, capsys, tmp_path):
    argv = ["--quiet", "reconstruct", "--model", f"{files}/linear.py:model", "--draws",
            str(files / "fit-1.csv"), str(files / "fit-2.csv"), "--data", str(files / "data.csv"),
            "--free", "x,y", *TINY, "--json", str(tmp_path / "out.json")]  # fmt: skip
    assert main(argv) in (0, 3)
    summary = json.loads((tmp_path / "out.json").read_text())
    assert summary["posterior"] == "linear.py:model" and summary["true_n"] == N_ROWS
    assert summary["rows"][0]["relative_error"] < 0.3  # N, after a handful of steps


@pytest.mark.slow
def test_real_audit_of_the_users_model(files, capsys, tmp_path):
    argv = ["--quiet", "audit", "--model", f"{files}/linear.py:model", "--draws", str(files / "fit.nc"),
            "--data", str(files / "data.json"), "--free", "x,y", *TINY, "--draw-counts", "1000",
            "--report", str(tmp_path / "a.html"), "--json", str(tmp_path / "a.json")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Σ x·y" in out and "Leakage against the number of draws" in out
    assert json.loads((tmp_path / "a.json").read_text())["release"]["data_points"] == N_ROWS
