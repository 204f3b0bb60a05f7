"""The last stage's stopping rule (:func:`bayes_recon.optimise.minimise` with ``settle``): past its steps
the loop goes on while every GAIN_WINDOW steps lower the lowest objective by the needed gain, taken where
the rule begins, and no further than its cap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayes_recon.optimise import GAIN_WINDOW, OptimiserConfig, minimise

AFTER, CAP = 60, 300
SCALES = jnp.logspace(-3, 0, 6)


def objective(x: jax.Array, key: jax.Array) -> jax.Array:
    return 0.5 * jnp.sum(SCALES * (x - 3.0) ** 2)


def run(needed_gain) -> tuple[np.ndarray, np.ndarray, int]:
    """Adam at a rate too small to reach the minimum (x = 3) in CAP steps: every step lowers the
    objective, by less and less as the rate decays. The parameters after every step are recorded."""
    _, values, params, taken = minimise(
        objective,
        jnp.zeros(6),
        jax.random.PRNGKey(0),
        CAP,
        OptimiserConfig("adam", learning_rate=5e-3),
        record=lambda x: x,
        settle=(AFTER, needed_gain),
    )
    return np.asarray(values), np.asarray(params), int(taken)


def gained(values: np.ndarray, steps: int) -> float:
    """Over the GAIN_WINDOW steps up to ``steps`` taken (the objective only falls here)."""
    return float(values[steps - 1 - GAIN_WINDOW] - values[steps - 1])


def test_no_needed_gain_runs_to_the_cap_and_an_unreachable_one_stops_where_the_rule_begins():
    assert run(lambda x: jnp.asarray(0.0))[2] == CAP
    assert run(lambda x: jnp.asarray(1e6))[2] == AFTER
    assert run(lambda x: jnp.asarray(jnp.nan))[2] == CAP  # not finite: none needed


@pytest.mark.parametrize("share", [0.05, 0.2])
def test_it_stops_at_the_first_window_short_of_the_gain_taken_where_the_rule_begins(share):
    """The needed gain depends on the parameters: it is the one at step AFTER, not at the start or the end."""
    values, params, _ = run(lambda x: jnp.asarray(0.0))
    first_window = gained(values, AFTER)

    def needed_gain(x):
        return share * first_window * jnp.sum(x) / jnp.sum(params[AFTER - 1])

    values, _, taken = run(needed_gain)
    needed = share * first_window
    assert AFTER < taken < CAP
    assert gained(values, taken) < needed
    assert all(gained(values, n) >= needed for n in range(AFTER, taken))
