"""Kept programs: with the compilation cache on, a second identical attack loads the traced program
instead of tracing it, and ends bitwise where a run without the cache ends; another model (even one
differing only in a constant, with the same source) is another program."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density

import bayes_recon as br
from bayes_recon import programs

DRAWS = {"mu": np.random.default_rng(0).normal(1.0, 0.1, 200)}
CONFIG = br.ReconConfig(  # seconds
    coarse_steps=0, steps=3, restarts=2, restarts_at_once=1, rescue_restarts=0, refine_rounds=0
)


def normal_model(scale: float):
    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 10))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, scale), obs=y)

    return model


def attack(model) -> br.Reconstruction:
    return br.reconstruct(model, DRAWS, free=["y"], n_points=3, config=CONFIG)


@pytest.fixture
def compilation_cache(tmp_path, monkeypatch):
    """The programs' folder as the compilation cache's would be (JAX's own cache left off)."""
    monkeypatch.setattr(programs, "folder", lambda: tmp_path / programs.FOLDER)
    return tmp_path / programs.FOLDER


def test_a_second_run_loads_the_program_and_ends_where_an_uncached_run_ends(compilation_cache, monkeypatch):
    model = normal_model(1.0)
    first = attack(model)
    kept = list(compilation_cache.glob("*.jaxexport"))
    assert len(kept) == 1

    def no_tracing(*args, **kwargs):
        raise AssertionError("the kept program should have been loaded, not exported again")

    with monkeypatch.context() as patch:
        patch.setattr(jax.export, "export", no_tracing)
        second = attack(model)
    with monkeypatch.context() as patch:
        patch.setattr(programs, "folder", lambda: None)
        uncached = attack(model)
    for other in (second, uncached):
        assert np.array_equal(other.measure.weights, first.measure.weights)
        assert np.array_equal(other.measure.points["y"], first.measure.points["y"])
        assert np.array_equal(other.restart_objectives, first.restart_objectives)

    kept[0].write_bytes(b"not a program")  # damaged: traced anew
    assert np.array_equal(attack(model).measure.weights, first.measure.weights)


def test_a_model_differing_only_in_a_constant_is_another_program():
    def key(model) -> str:
        def log_joint(mu, y):
            return log_density(model, (), {"y": y}, {"mu": mu})[0]

        return programs.program_key({"same": "identity"}, [(log_joint, (0.0, np.ones(2)))])

    assert key(normal_model(1.0)) == key(normal_model(1.0))
    assert key(normal_model(1.0)) != key(normal_model(2.0))


MIXTURE_DIGEST = """
import jax, jax.numpy as jnp, numpyro.distributions as dist
from bayes_recon import enable_float64, programs
from bayes_recon.quantile import quantile
enable_float64()
def quantiles(eta):
    loc = jnp.stack([eta, eta + 4.0], axis=-1)
    mixture = dist.MixtureSameFamily(dist.Categorical(probs=jnp.array([0.4, 0.6])), dist.Normal(loc, 1.0))
    return quantile(mixture, jnp.full(eta.shape, 0.3))
print(programs.traced_digest([(quantiles, (jnp.zeros(3),))]))
"""


def test_the_traced_digest_is_the_same_in_every_process():
    """NumPyro flattens a distribution's fields in a per-process order (string hashing): a key built on
    it would never match the next run's."""

    def digest(hash_seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", MIXTURE_DIGEST], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert digest("1") == digest("2") == digest("3")


def test_a_model_differing_only_in_a_derivative_rule_is_another_program():
    def model_with_rule(slope: float):
        @jax.custom_jvp
        def shifted(v):
            return v

        shifted.defjvp(lambda primals, tangents: (primals[0], slope * tangents[0]))
        return normal_model(1.0), shifted

    def key(slope: float) -> str:
        _, shifted = model_with_rule(slope)

        def log_joint(mu):
            return log_density(normal_model(1.0), (), {"y": jnp.ones(2)}, {"mu": shifted(mu)})[0]

        return programs.program_key({"same": "identity"}, [(jax.hessian(log_joint), (0.5,))])

    assert key(1.0) != key(2.0)
