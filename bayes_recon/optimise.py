"""Minimise an objective over a pytree, as one jitted ``lax.scan``: Optax (L-BFGS, Adam) or damped Newton.

An optimiser is a pair of pure functions in the optax/BlackJAX style: ``init`` builds a
:class:`RunState` and ``step`` advances it by one update; :func:`minimise` scans ``step`` for a
fixed number of updates and returns the final state with a per-step trace. The objective takes
``(params, key)``: deterministic objectives ignore the key, minibatched ones draw their batch
from it. L-BFGS and Newton need a deterministic objective; Adam takes either.

Newton is for small parameter vectors (a few dozen): it is invariant to affine changes of the
parameters, so it needs no knowledge of their scale, which is exactly what the attack lacks
before it starts. It is saddle-free (the Hessian's eigenvalues are taken in absolute value) and
damped Levenberg–Marquardt style: a step that does not lower the objective is refused and the
damping raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

Array = jax.Array
Objective = Callable[[Any, Array], Array]
Method = Literal["lbfgs", "adam", "newton"]


@dataclass(frozen=True)
class OptimiserConfig:
    """``learning_rate``: Adam's peak rate (cosine-decayed to 1 % over the run); L-BFGS line-searches."""

    method: Method = "lbfgs"
    learning_rate: float = 0.02
    memory: int = 20


class RunState(NamedTuple):
    params: Any
    opt_state: Any  # the Optax state, or Newton's damping
    value: Array  # objective at ``params`` (for Adam: at the previous minibatch)
    grad: Any
    key: Array


def _finite(tree: Any) -> Array:
    return jnp.all(jnp.array([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree)]))


def _keep_if(ok: Array, new: Any, old: Any) -> Any:
    return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, old)


class Optimiser(NamedTuple):
    init: Callable[[Any, Array], RunState]
    step: Callable[[RunState], RunState]


def optax_optimiser(objective: Objective, config: OptimiserConfig, steps: int) -> Optimiser:
    """L-BFGS reuses the value and gradient its line search already computed; Adam evaluates each step."""
    if config.method == "lbfgs":
        linesearch = optax.scale_by_zoom_linesearch(max_linesearch_steps=10, initial_guess_strategy="one")
        transform = optax.lbfgs(memory_size=config.memory, linesearch=linesearch)
    else:
        schedule = optax.cosine_decay_schedule(config.learning_rate, max(steps, 1), alpha=0.01)
        transform = optax.with_extra_args_support(optax.adam(schedule))
    reuse = config.method == "lbfgs"

    def init(params: Any, key: Array) -> RunState:
        value, grad = jax.value_and_grad(objective)(params, key)
        return RunState(params, transform.init(params), value, grad, key)

    def step(state: RunState) -> RunState:
        key, batch_key = jax.random.split(state.key)

        def value_fn(p: Any) -> Array:
            return objective(p, batch_key)

        value, grad = (state.value, state.grad) if reuse else jax.value_and_grad(value_fn)(state.params)
        updates, opt_state = transform.update(
            grad, state.opt_state, state.params, value=value, grad=grad, value_fn=value_fn
        )
        params = optax.apply_updates(state.params, updates)
        if reuse:
            value = optax.tree_utils.tree_get(opt_state, "value")
            grad = optax.tree_utils.tree_get(opt_state, "grad")
        new = RunState(params, opt_state, value, grad, key)
        return _keep_if(jnp.isfinite(value) & _finite(params) & _finite(grad), new, state._replace(key=key))

    return Optimiser(init, step)


def newton_optimiser(objective: Objective, damping: float = 1e-3) -> Optimiser:
    """Saddle-free damped Newton on a small pytree; ``opt_state`` is the relative damping."""

    def init(params: Any, key: Array) -> RunState:
        value, grad = jax.value_and_grad(objective)(params, key)
        return RunState(params, jnp.asarray(damping), value, grad, key)

    def step(state: RunState) -> RunState:
        flat, unravel = ravel_pytree(state.params)

        def flat_objective(x: Array) -> Array:
            return objective(unravel(x), state.key)

        grad = ravel_pytree(state.grad)[0]
        eigenvalues, vectors = jnp.linalg.eigh(jax.hessian(flat_objective)(flat))
        curvature = jnp.abs(eigenvalues)
        curvature = curvature + state.opt_state * jnp.max(curvature)
        trial = flat - vectors @ ((vectors.T @ grad) / curvature)
        value, trial_grad = jax.value_and_grad(flat_objective)(trial)
        better = jnp.isfinite(value) & (value < state.value) & _finite(trial_grad)
        damping = jnp.clip(jnp.where(better, state.opt_state / 3, state.opt_state * 4), 1e-12, 1e6)
        accepted = RunState(unravel(trial), damping, value, unravel(trial_grad), state.key)
        return _keep_if(better, accepted, state._replace(opt_state=damping))

    return Optimiser(init, step)


def build(objective: Objective, config: OptimiserConfig, steps: int) -> Optimiser:
    if config.method == "newton":
        return newton_optimiser(objective)
    if config.method in ("lbfgs", "adam"):
        return optax_optimiser(objective, config, steps)
    raise ValueError(f"unknown optimiser {config.method!r}; choose 'lbfgs', 'adam' or 'newton'")


def minimise(
    objective: Objective,
    params: Any,
    key: Array,
    steps: int,
    config: OptimiserConfig,
    record: Callable[[Any], Any] = lambda params: (),
    on_step: Callable[[Array], None] | None = None,
    tol: float = 1e-12,
    patience: int | None = None,
) -> tuple[RunState, Array, Any, Array]:
    """Up to ``steps`` updates: final state, objective and ``record(params)`` per step, and steps taken.

    The loop stops early once ``patience`` steps in a row change the objective by less than
    ``tol`` (relative; never for Adam, whose objective may be a minibatch). Newton's default
    patience is longer, as a refused step changes nothing but raises the damping; the traces then repeat
    the final values, so they always have ``steps`` rows.
    Under ``vmap`` (restarts) it runs until every restart has stopped. Pure and traceable.
    ``on_step(i)`` is called from inside the compiled loop (a host callback) after step ``i``.
    """
    if steps == 0:
        empty = jax.tree_util.tree_map(lambda leaf: jnp.zeros((0, *jnp.shape(leaf))), record(params))
        return RunState(params, None, jnp.asarray(jnp.nan), None, key), jnp.zeros((0,)), empty, jnp.asarray(0)
    optimiser = build(objective, config, steps)
    patience = patience or (10 if config.method == "newton" else 3)
    state = optimiser.init(params, key)
    first = record(state.params)
    values = jnp.full((steps,), state.value)
    records = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (steps, *jnp.shape(leaf))), first)
    stochastic = config.method == "adam"

    class Loop(NamedTuple):
        index: Array
        state: RunState
        values: Array
        records: Any
        calm: Array  # consecutive steps without change

    def body(loop: Loop) -> Loop:
        new = optimiser.step(loop.state)
        if on_step is not None:
            jax.debug.callback(on_step, loop.index)
        still = jnp.abs(new.value - loop.state.value) <= tol * jnp.maximum(1.0, jnp.abs(new.value))
        calm = jnp.where(still & (not stochastic), loop.calm + 1, 0)
        rest = jnp.arange(steps) >= loop.index
        values = jnp.where(rest, new.value, loop.values)
        now = record(new.params)
        records = jax.tree_util.tree_map(
            lambda trace, leaf: jnp.where(rest.reshape((-1,) + (1,) * jnp.ndim(leaf)), leaf, trace),
            loop.records,
            now,
        )
        return Loop(loop.index + 1, new, values, records, calm)

    def cond(loop: Loop) -> Array:
        return (loop.index < steps) & (loop.calm < patience)

    final = jax.lax.while_loop(cond, body, Loop(jnp.asarray(0), state, values, records, jnp.asarray(0)))
    return final.state, final.values, final.records, final.index
