"""Shared fixtures for the bayes_recon tests.

JAX is switched to float64 before any test makes an array: the identities below need it, and many
tests call the attack's building blocks (which do not switch it themselves) directly. Importing
``bayes_recon`` does not switch it (tests/test_architecture.py checks that).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from bayes_recon import enable_float64

enable_float64()

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
