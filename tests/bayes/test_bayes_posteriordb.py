"""posteriordb access: the embedded default, a user's database by path or $POSTERIOR_DB_PATH, errors."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_recon.posteriordb import EMBEDDED, ENV_VAR, database_path, load_posterior
from recon_core.errors import ReconError


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_embedded_default_loads_kidiq(no_env):
    assert database_path() == EMBEDDED
    post = load_posterior("kidiq-kidscore_momiq")
    assert post.name == "kidiq-kidscore_momiq" and post.database == EMBEDDED
    assert int(post.data["N"]) == 434
    assert post.data["kid_score"].shape == (434,) and post.data["mom_iq"].shape == (434,)
    assert set(post.draws) == {"beta[1]", "beta[2]", "sigma"}
    n_draws = len(post.draws["sigma"])
    assert n_draws >= 1000 and all(len(v) == n_draws for v in post.draws.values())
    # the draws are a real posterior of this data: the slope is near its least-squares value
    x, y = post.data["mom_iq"], post.data["kid_score"]
    slope = np.polyfit(x, y, 1)[0]
    assert abs(post.draws["beta[2]"].mean() - slope) < 0.01


def test_unknown_name_lists_close_names(no_env):
    with pytest.raises(ReconError) as info:
        load_posterior("kidiq-kidscore_momiqq")
    message = str(info.value)
    assert "no posterior 'kidiq-kidscore_momiqq'" in message
    assert "Close names: kidiq-kidscore_momiq" in message
    assert "the embedded default database" in message


def test_non_database_path_is_rejected(tmp_path, no_env):
    with pytest.raises(ReconError, match="is not a posteriordb database"):
        load_posterior("kidiq-kidscore_momiq", tmp_path)
    with pytest.raises(ReconError, match="is not a posteriordb database"):
        database_path(tmp_path / "nowhere")


def test_env_var_is_honoured(monkeypatch, shared_db):
    clone_root = shared_db.parent  # the clone's root holds posterior_database/
    monkeypatch.setenv(ENV_VAR, str(clone_root))
    assert database_path() == shared_db
    post = load_posterior("sblrc-blr")  # not in the embedded subset
    assert post.database == shared_db
    assert post.data["X"].shape == (100, 5)
    assert {f"beta[{i}]" for i in range(1, 6)} | {"sigma"} == set(post.draws)


def test_env_var_pointing_nowhere_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(ReconError, match="not a posteriordb database"):
        load_posterior("kidiq-kidscore_momiq")


def test_explicit_path_beats_env_var(monkeypatch, tmp_path, shared_db):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert database_path(shared_db) == shared_db


def test_shared_database_unknown_name_names_that_database(shared_db):
    with pytest.raises(ReconError) as info:
        load_posterior("earnings-earn_heigth", shared_db)
    assert str(shared_db) in str(info.value) and "earnings-earn_height" in str(info.value)
