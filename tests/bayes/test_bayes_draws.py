"""Posterior draws in: Stan names, dicts, ArviZ, NumPyro MCMC; validation with helpful errors."""

from __future__ import annotations

import json
import warnings
import zipfile

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from bayes_recon.draws import as_draws, check_draws, from_stan_names
from bayes_recon.posteriordb import EMBEDDED
from recon_core.errors import ReconError

RNG = np.random.default_rng(5)


def test_from_stan_names_vector():
    b1, b2, sigma = RNG.normal(size=(3, 40))
    out = from_stan_names({"beta[1]": b1, "beta[2]": b2, "sigma": sigma})
    assert set(out) == {"beta", "sigma"}
    assert out["beta"].shape == (40, 2) and out["sigma"].shape == (40,)
    np.testing.assert_array_equal(out["beta"][:, 0], b1)
    np.testing.assert_array_equal(out["beta"][:, 1], b2)
    np.testing.assert_array_equal(out["sigma"], sigma)


def test_from_stan_names_order_does_not_matter():
    b1, b2, b3 = RNG.normal(size=(3, 10))
    out = from_stan_names({"beta[3]": b3, "beta[1]": b1, "beta[2]": b2})
    np.testing.assert_array_equal(out["beta"], np.stack([b1, b2, b3], -1))


def test_from_stan_names_matrix():
    values = RNG.normal(size=(25, 2, 3))
    names = {f"Omega[{i + 1},{j + 1}]": values[:, i, j] for i in range(2) for j in range(3)}
    out = from_stan_names(names)
    assert out["Omega"].shape == (25, 2, 3)
    np.testing.assert_array_equal(out["Omega"], values)
    spaced = from_stan_names(
        {f"Omega[{i + 1}, {j + 1}]": values[:, i, j] for i in range(2) for j in range(3)}
    )
    np.testing.assert_array_equal(spaced["Omega"], values)


def test_from_stan_names_missing_index_is_an_error():
    with pytest.raises(ReconError, match=r"'beta' miss some indices of its shape \(3,\)"):
        from_stan_names({"beta[1]": np.zeros(5), "beta[3]": np.zeros(5)})


def test_from_stan_names_rejects_garbage():
    with pytest.raises(ReconError, match="cannot read the parameter name"):
        from_stan_names({"beta[a]": np.zeros(5)})


def test_as_draws_from_dict():
    plain = {"beta": RNG.normal(size=(30, 2)), "sigma": RNG.uniform(size=30)}
    out = as_draws(plain)
    assert set(out) == {"beta", "sigma"}
    np.testing.assert_array_equal(out["beta"], plain["beta"])
    stan = as_draws({"beta[1]": plain["beta"][:, 0], "beta[2]": plain["beta"][:, 1], "sigma": plain["sigma"]})
    np.testing.assert_array_equal(stan["beta"], plain["beta"])


def test_as_draws_from_arviz_concatenates_chains():
    arviz = pytest.importorskip("arviz")
    beta = RNG.normal(size=(3, 20, 2))  # (chain, draw, 2)
    sigma = RNG.uniform(size=(3, 20))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        idata = arviz.from_dict(posterior={"beta": beta, "sigma": sigma})
    out = as_draws(idata)
    assert out["beta"].shape == (60, 2) and out["sigma"].shape == (60,)
    np.testing.assert_array_equal(out["beta"][:20], beta[0])
    np.testing.assert_array_equal(out["beta"][40:], beta[2])
    np.testing.assert_array_equal(out["sigma"], sigma.reshape(-1))


def test_as_draws_from_numpyro_mcmc():
    from numpyro.infer import MCMC, NUTS

    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("data", 5):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    y = np.array([1.0, 2.0, 0.5, 1.5, 1.0])
    mcmc = MCMC(NUTS(model), num_warmup=40, num_samples=60, num_chains=1, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y=y)
    out = as_draws(mcmc)
    assert set(out) == {"mu"} and out["mu"].shape == (60,)
    assert isinstance(out["mu"], np.ndarray)
    np.testing.assert_array_equal(out["mu"], np.asarray(mcmc.get_samples()["mu"]))
    assert abs(out["mu"].mean() - y.mean()) < 1.5  # posterior N(1.2, 0.45²), loosely
    assert check_draws(out, {"mu": ()})["mu"].shape == (60,)


def test_as_draws_reads_posteriordb_reference_draws_as_its_package_returns_them():
    """posteriordb's ``Posterior.reference_draws()`` is the file's JSON: a list of chains by Stan name."""
    file = EMBEDDED / "reference_posteriors" / "draws" / "draws" / "kidiq-kidscore_momiq.json.zip"
    with zipfile.ZipFile(file) as archive:
        chains = json.loads(archive.read(archive.namelist()[0]))
    assert len(chains) > 1  # chain after chain, in order
    beta = np.stack([np.concatenate([c[f"beta[{j}]"] for c in chains]) for j in (1, 2)], axis=-1)
    sigma = np.concatenate([c["sigma"] for c in chains])
    for given in (chains, tuple(chains)):
        out = as_draws(given)
        assert set(out) == {"beta", "sigma"}
        np.testing.assert_array_equal(out["beta"], beta)
        np.testing.assert_array_equal(out["sigma"], sigma)

    class PosteriordbPosterior:  # what ``posteriordb.PosteriorDatabase(path).posterior(name)`` offers
        def reference_draws(self) -> list:
            return chains

    np.testing.assert_array_equal(as_draws(PosteriordbPosterior())["beta"], beta)


def test_as_draws_from_a_list_of_chains_keeps_each_draw_s_shape():
    beta, sigma = RNG.normal(size=(2, 15, 3)), RNG.uniform(size=(2, 15))
    out = as_draws([{"beta": beta[i], "sigma": sigma[i]} for i in range(2)])
    np.testing.assert_array_equal(out["beta"], beta.reshape(30, 3))
    np.testing.assert_array_equal(out["sigma"], sigma.reshape(30))


@pytest.mark.parametrize(
    ("chains", "message"),
    [
        ([{"sigma": [[1.0, 2.0], [3.0]]}], "not all numbers"),  # ragged
        ([{"beta": np.zeros((15, 3))}, {"beta": np.zeros((15, 2))}], r"'beta' differ in shape per draw"),
        ([{"sigma": [1.0]}, {"tau": [1.0]}], "name different parameters"),
        ([{"sigma": []}], "holds no draws"),
        ([], "holds no chains"),
        ([{"beta[1]": np.zeros((15, 1))}], r"'beta\[1\]' have shape \(15, 1\)"),
    ],
)
def test_as_draws_refuses_lists_of_chains_it_cannot_read(chains, message):
    with pytest.raises(ReconError, match=message):
        as_draws(chains)


def test_as_draws_from_a_dataframe_of_stan_columns():
    pandas = pytest.importorskip("pandas")
    beta, sigma = RNG.normal(size=(40, 2)), RNG.uniform(size=40)
    frame = pandas.DataFrame(  # CmdStanPy's draws_pd(): bookkeeping columns beside the parameters
        {
            "chain__": np.repeat([1, 2], 20),
            "lp__": RNG.normal(size=40),
            "beta[1]": beta[:, 0],
            "beta[2]": beta[:, 1],
            "sigma": sigma,
        }
    )
    out = as_draws(frame)
    np.testing.assert_array_equal(out["beta"], beta)
    np.testing.assert_array_equal(check_draws(out, EXPECTED)["sigma"], sigma)
    # posteriordb's chains put in a DataFrame: a chain's list in each cell
    lists = pandas.DataFrame([{"sigma": list(sigma[:20])}, {"sigma": list(sigma[20:])}])
    with pytest.raises(ReconError, match=r"column\(s\) \['sigma'\] hold objects"):
        as_draws(lists)


def test_as_draws_rejects_other_types():
    with pytest.raises(ReconError, match="cannot read posterior draws from a float"):
        as_draws(3.5)
    with pytest.raises(ReconError, match="expected a list of chains"):
        as_draws([1, 2, 3])


# ---- check_draws ---------------------------------------------------------------------------------


def _good(n=50):
    return {"beta": RNG.normal(size=(n, 2)), "sigma": RNG.uniform(1, 2, size=n), "extra": np.zeros(n)}


EXPECTED = {"beta": (2,), "sigma": ()}


def test_check_draws_keeps_only_the_model_sites():
    out = check_draws(_good(), EXPECTED)
    assert set(out) == {"beta", "sigma"}
    assert out["beta"].dtype == float


def test_check_draws_names_the_site_and_first_bad_draw():
    draws = _good()
    draws["beta"][17, 1] = np.nan
    draws["beta"][30, 0] = np.inf
    with pytest.raises(ReconError) as info:
        check_draws(draws, EXPECTED)
    message = str(info.value)
    assert "'beta'" in message and "2 draw(s)" in message and "first at draw 17" in message
    assert "NaN or inf" in message and "beta[2] (indices from 1) = nan" in message


def test_check_draws_missing_site():
    draws = _good()
    del draws["sigma"]
    with pytest.raises(ReconError, match=r"lack the model's latent site\(s\) \['sigma'\]") as info:
        check_draws(draws, EXPECTED)
    assert "'beta'" in str(info.value)  # lists what the draws do have


def test_check_draws_wrong_shape():
    draws = _good()
    draws["beta"] = RNG.normal(size=(50, 3))
    with pytest.raises(ReconError, match=r"site 'beta' has draws of shape \(3,\).*has shape \(2,\)"):
        check_draws(draws, EXPECTED)


def test_check_draws_concatenates_chains_kept_apart():
    """(chain, draw, ...) arrays, as MCMC.get_samples(group_by_chain=True) gives them: chains concatenated;
    a site that has the model's shape as it is is never taken for chains."""
    draws = _good(60)
    by_chain = {k: v.reshape((3, 20, *v.shape[1:])) for k, v in draws.items()}
    out = check_draws(by_chain, EXPECTED)
    for site in EXPECTED:
        np.testing.assert_array_equal(out[site], draws[site])
    matrix = {"sigma": RNG.normal(size=(30, 20)), "beta": RNG.normal(size=(30, 20))}
    assert check_draws(matrix, {"sigma": (20,), "beta": (20,)})["beta"].shape == (30, 20)
    swapped = {**by_chain, "beta": by_chain["beta"].transpose(1, 0, 2)}  # (draw, chain, 2): not chains
    with pytest.raises(ReconError, match="different numbers of draws"):
        check_draws(swapped, EXPECTED)


def test_check_draws_unequal_counts():
    draws = _good()
    draws["sigma"] = draws["sigma"][:40]
    with pytest.raises(ReconError, match="different numbers of draws"):
        check_draws(draws, EXPECTED)


def test_check_draws_too_few():
    with pytest.raises(ReconError, match="only 5 draws"):
        check_draws(_good(5), EXPECTED)


def test_check_draws_refuses_a_point_estimate_repeated():
    draws = _good()
    draws["beta"][:] = 0.7  # never moves: no spread to read the data from
    with pytest.raises(ReconError, match=r"'beta' has the same value in every draw"):
        check_draws(draws, EXPECTED)
    draws["beta"][:, 0] = RNG.normal(size=50)  # one entry fixed is refused in the unconstrained space (a
    assert check_draws(draws, EXPECTED)["beta"].shape == (50, 2)  # Cholesky factor's first row never moves)


def test_standardised_coordinates_refuse_collinear_draws():
    from bayes_recon.divergence import Coordinates

    for seed in range(20):  # rounding lets Cholesky through some exactly collinear pairs
        a = np.random.default_rng(seed).normal(size=(100, 1))
        with pytest.raises(ReconError, match=r"singular.*coordinates='unconstrained'"):
            Coordinates.standardised(np.hstack([a, 2 * a + 1]))
    near = np.hstack([a, 2 * a + 1e-3 * np.random.default_rng(0).normal(size=(100, 1))])
    Coordinates.standardised(near)  # correlated to 1 − 1e-7, but a posterior
