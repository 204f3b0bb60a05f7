"""Kept programs: with the compilation cache on, a second identical attack loads the traced program
instead of tracing it, and ends bitwise where a run without the cache ends; another model (even one
differing only in a constant, with the same source) is another program."""

from __future__ import annotations

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density

import bayes_recon as br
from bayes_recon import programs

DRAWS = {"mu": np.random.default_rng(0).normal(1.0, 0.1, 200)}
CONFIG = br.ReconConfig(coarse_steps=0, steps=3, restarts=2, restarts_at_once=1)  # compiles in seconds


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
