"""Shared fixtures for the bayes_recon tests.

JAX is switched to float64 before any test makes an array: the identities below need it, and many
tests call the attack's building blocks (which do not switch it themselves) directly. Importing
``bayes_recon`` does not switch it (tests/test_architecture.py checks that).
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bayes_recon import enable_float64

enable_float64()

REPO = Path(__file__).resolve().parents[2]
SHARED_DB = REPO.parent / "shared" / "posteriordb" / "posterior_database"
TRUE_N = 434  # kidiq has 434 children: the stand-in attack's total mass


@pytest.fixture(autouse=True)
def no_compile_cache(monkeypatch):
    """The CLI's persistent compilation cache stays out of the user's cache folder during tests."""
    monkeypatch.setenv("RECON_AUDIT_NO_CACHE", "1")


@pytest.fixture(scope="session")
def shared_db() -> Path:
    """The small real posteriordb beside the repository (skips when it is absent)."""
    if not (SHARED_DB / "posteriors").is_dir():
        pytest.skip(f"the shared posteriordb is not at {SHARED_DB}; these checks need its reference draws")
    return SHARED_DB


@pytest.fixture(scope="session")
def load_shared(shared_db):
    """Cached ``load_posterior(name, shared_db)``: every posterior is read from disk once per session."""
    from bayes_recon.posteriordb import load_posterior

    @functools.cache
    def load(name: str):
        return load_posterior(name, shared_db)

    return load


def _stand_in_self_check(reproduces: bool) -> SimpleNamespace:
    verdict = "reproduces the release" if reproduces else "does NOT reproduce the release: sigma's sd x1.4"
    return SimpleNamespace(
        reproduces=reproduces, summary=lambda: verdict, to_json=lambda: {"reproduces": reproduces}
    )


@pytest.fixture
def stand_in_self_check():
    """``stand_in_self_check(reproduces)``: a self-check result saying so, in words and JSON."""
    return _stand_in_self_check


@pytest.fixture
def fake_reconstruct(monkeypatch):
    """Replace the attack by a stand-in that returns a fixed 5-point measure and reports 3 steps;
    the list of its calls is returned."""
    from bayes_recon import identifiability, pipeline
    from recon_core.measure import WeightedMeasure

    calls = []

    def reconstruct(
        model,
        draws,
        free,
        fixed=None,
        support=None,
        n_points=50,
        seed=0,
        config=None,
        progress=None,
        checkpoint=None,
    ):
        calls.append(SimpleNamespace(model=model, draws=draws, free=free, fixed=fixed, support=support,
                                     n_points=n_points, seed=seed, config=config,
                                     checkpoint=checkpoint))  # fmt: skip
        for done in range(4):
            if progress:
                progress(done, 3)
        rng = np.random.default_rng(seed)
        points = {name: rng.normal(90.0, 15.0, size=(n_points, *shape)) for name, shape in free.items()}
        measure = WeightedMeasure(points, np.full(n_points, TRUE_N / n_points))
        return SimpleNamespace(
            measure=measure, objective=-1.5, seconds=0.25, compile_seconds=0.1, config=config, history={},
            self_check=_stand_in_self_check(calls[-1].seed != 13), restart_spread=lambda: {"total_mass": 0.0},
            restart_objectives=np.array([-1.5]), at_best=lambda: np.array([True]), converged=lambda: True,
            passed_over=lambda: 0, rescued=lambda: 0,
            bootstrap={"objective": np.array([-1.4, -1.6])}, bootstrap_spread=lambda: {"total_mass": 0.02},
            standard_errors={"total_mass": 0.02}, shortfall={"total_mass": 0.0}, unseen_mass=0.0,
            remaining_gain=0.0, short_of_optimum=lambda: False, stopping_gain=lambda: 0.25,
            setup=SimpleNamespace(weighted_model=SimpleNamespace(model=model, fixed=fixed or {}),
                                  layout=SimpleNamespace(shapes=free, supports=support or {})),
        )  # fmt: skip

    monkeypatch.setattr(pipeline, "reconstruct", reconstruct)
    monkeypatch.setattr(pipeline.PosteriorAttack, "relative_mmd", lambda self, max_draws=1000: 0.01)
    # the stand-in's setup has no draws to find what the likelihood sees
    monkeypatch.setattr(identifiability, "undetermined_moments", lambda setup, names, config: [])
    return calls
