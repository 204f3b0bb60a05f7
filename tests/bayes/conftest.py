"""Shared fixtures for the bayes_recon tests.

``bayes_recon`` is imported first: it switches JAX to float64, which the identities below need.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import bayes_recon  # noqa: F401  (enables jax x64 before anything else touches JAX)

REPO = Path(__file__).resolve().parents[2]
SHARED_DB = REPO.parent / "shared" / "posteriordb" / "posterior_database"


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
