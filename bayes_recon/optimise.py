"""Minimise an objective over a pytree, as one ``lax.while_loop``: Optax (L-BFGS, Adam) or damped Newton.

An optimiser is a pair of pure functions in the optax/BlackJAX style: ``init`` builds a
:class:`RunState` and ``step`` advances it by one update; :func:`minimise` loops ``step`` up to a
number of updates, stopping early by its rules, and returns the best state with a per-step trace.
The objective takes ``(params, key)``: deterministic objectives ignore the key, minibatched ones draw
their batch from it. L-BFGS and Newton need a deterministic objective; Adam takes either.

Newton is for small parameter vectors (a few dozen): it is invariant to affine changes of the
parameters, so it needs no knowledge of their scale, which is exactly what the attack lacks
before it starts. It is saddle-free (the Hessian's eigenvalues are taken in absolute value) and
backtracks from the full step; a step that no length of the set lets lower the objective is
refused, and the next step backtracks from a length 2⁻⁹ times smaller (strong nonlinearity along
the Newton direction, e.g. in a log-mass, can make every length in the first set overshoot).
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
    opt_state: Any  # the Optax state; Newton's: the scale of its step lengths
    value: Array  # objective at ``params`` (for Adam: at the previous minibatch)
    grad: Any
    key: Array


def _finite(tree: Any) -> Array:
    return jnp.all(jnp.array([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree)]))


def tree_where(condition: Array, if_true: Any, if_false: Any) -> Any:
    """``jnp.where`` leaf by leaf over two pytrees of one structure."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


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
        return tree_where(jnp.isfinite(value) & _finite(params) & _finite(grad), new, state._replace(key=key))

    return Optimiser(init, step)


# Past ``settle``'s steps (see :func:`minimise`): the steps over which the objective must gain enough.
GAIN_WINDOW = 50
STEP_SIZES = tuple(2.0**-k for k in range(9))  # 1, ½, … 1/256: backtracking's lengths, in order
HESSIAN_BATCH = 8  # Hessian columns formed at once: bounds memory when the objective is large


def newton_optimiser(objective: Objective, hessian: Objective | None = None) -> Optimiser:
    """Saddle-free Newton on a small pytree, with a backtracking step length from ``STEP_SIZES``.

    The direction −|H|⁻¹g (eigenvalues in absolute value, floored far below the largest) is
    scale-free; a Levenberg–Marquardt damping relative to the largest curvature would freeze every
    direction whose curvature is many orders smaller, which is the common case here. The lengths
    are tried in order, the first that lowers the objective is taken (near the optimum the full
    step, so one evaluation); when none does, the step is refused and the next one tries them all
    2⁻⁹ times smaller (back to full size after a success).
    ``hessian(params, key)``: the matrix H to use, flattened as ``ravel_pytree`` flattens the
    parameters (default: the objective's own, column by column). It may be a cheaper objective's (the
    same average over a subset of the draws) — subsampled Newton: the gradient and the step test use
    ``objective``, so it still converges to ``objective``'s minimum, in a few more steps.
    """
    hessian = hessian or columns_hessian(objective)
    shrink = STEP_SIZES[1]

    # Each derivative of the objective is written once (one compiled instance): the state keeps no
    # gradient and the backtracking tests values only.
    def init(params: Any, key: Array) -> RunState:
        return RunState(params, jnp.asarray(1.0), objective(params, key), (), key)

    def step(state: RunState) -> RunState:
        flat, unravel = ravel_pytree(state.params)

        def flat_objective(x: Array) -> Array:
            return objective(unravel(x), state.key)

        grad = jax.grad(flat_objective)(flat)
        matrix = hessian(state.params, state.key)
        eigenvalues, vectors = jnp.linalg.eigh((matrix + matrix.T) / 2)
        curvature = jnp.maximum(
            jnp.abs(eigenvalues), 1e-13 * jnp.max(jnp.abs(eigenvalues)) + 1e-30
        )  # ~ AD noise
        direction = -vectors @ ((vectors.T @ grad) / curvature)
        shortest = state.opt_state * STEP_SIZES[-1]

        def lower(value: Array) -> Array:
            return jnp.isfinite(value) & (value < state.value)

        def keep_trying(search: tuple[Array, Array]) -> Array:
            length, value = search
            return ~lower(value) & (length >= shortest)

        def backtrack(search: tuple[Array, Array]) -> tuple[Array, Array]:
            length, _ = search
            return length * shrink, flat_objective(flat + length * direction)

        length, value = jax.lax.while_loop(keep_trying, backtrack, (state.opt_state, jnp.asarray(jnp.inf)))
        trial = flat + length / shrink * direction
        accepted = RunState(unravel(trial), jnp.ones_like(state.opt_state), value, (), state.key)
        refused = state._replace(opt_state=shortest * shrink)
        return tree_where(lower(value) & _finite(trial), accepted, refused)

    return Optimiser(init, step)


def columns_hessian(objective: Objective) -> Objective:
    """The Hessian of ``objective`` in its flattened parameters, by exact columns (jvp of the gradient,
    ``HESSIAN_BATCH`` at a time). Central differences of the gradient compile faster, but their rounding
    error swamps the smallest curvatures, which are 1e-10 of the largest: sblrc-blr's full-draw stage
    then needed over 40 steps instead of 30."""

    def hessian(params: Any, key: Array) -> Array:
        flat, unravel = ravel_pytree(params)
        gradient = jax.grad(lambda x: objective(unravel(x), key))

        def column(direction: Array) -> Array:
            return jax.jvp(gradient, (flat,), (direction,))[1]

        return jax.lax.map(column, jnp.eye(flat.size), batch_size=HESSIAN_BATCH)

    return hessian


def build(objective: Objective, config: OptimiserConfig, steps: int, hessian: Objective | None) -> Optimiser:
    if config.method == "newton":
        return newton_optimiser(objective, hessian)
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
    tol: float = 1e-12,
    patience: int | None = None,
    hessian: Objective | None = None,
    limit: Array | None = None,
    settle: tuple[int, Callable[[Any], Array]] | None = None,
) -> tuple[RunState, Array, Any, Array]:
    """Up to ``steps`` updates: the best state (the last for Adam), objective and ``record(params)``
    per step, and steps taken.

    The loop stops early once ``patience`` steps in a row change the objective by less than
    ``tol`` (relative; never for Adam, whose objective may be a minibatch); the traces then repeat
    the final values, so they always have ``steps`` rows.
    Under ``vmap`` (restarts) it runs until every restart has stopped. Pure and traceable: no host
    callback, so the compiled program can go to JAX's persistent cache. ``limit``: a traced cap
    below ``steps`` (one compiled loop serving several stages).
    ``hessian``: Newton's Hessian, when not the objective's own by columns (see :func:`newton_optimiser`).
    ``settle = (after, needed_gain)``: past ``after`` steps the loop goes on, up to ``steps``, only while
    the last :data:`GAIN_WINDOW` steps lowered the lowest objective so far by at least
    ``needed_gain(params)``, taken once at step ``after`` (the stages: a share of the objective's Monte
    Carlo error, what the draws can tell); before GAIN_WINDOW steps, the steps so far by their share of
    it. A needed gain that is not finite is none: the loop goes on while it does not lose.
    Under ``vmap`` the needed gain is evaluated at every step (the loop's index differs between
    restarts, so its ``lax.cond`` becomes a select).
    """
    if steps == 0:
        empty = jax.tree_util.tree_map(lambda leaf: jnp.zeros((0, *jnp.shape(leaf))), record(params))
        return RunState(params, None, jnp.asarray(jnp.nan), None, key), jnp.zeros((0,)), empty, jnp.asarray(0)
    optimiser = build(objective, config, steps, hessian)
    patience = patience or 3
    state = optimiser.init(params, key)
    first = record(state.params)
    values = jnp.full((steps,), state.value)
    records = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (steps, *jnp.shape(leaf))), first)
    stochastic = config.method == "adam"

    class Loop(NamedTuple):
        index: Array
        state: RunState
        best: RunState  # the lowest objective so far (deterministic objectives)
        values: Array
        lowest: Array  # the lowest objective after each step, as ``values``
        records: Any
        calm: Array  # consecutive steps without change
        needed: Array  # past ``settle``'s steps: what the last GAIN_WINDOW steps must gain to go on

    def body(loop: Loop) -> Loop:
        new = optimiser.step(loop.state)
        needed = loop.needed
        if settle is not None:
            after, needed_gain = settle
            needed = jax.lax.cond(loop.index + 1 == after, needed_gain, lambda _: needed, new.params)
            needed = jnp.where(jnp.isfinite(needed), needed, 0.0)
        best = tree_where(new.value < loop.best.value, new, loop.best)
        still = jnp.abs(new.value - loop.state.value) <= tol * jnp.maximum(1.0, jnp.abs(new.value))
        calm = jnp.where(still & (not stochastic), loop.calm + 1, 0)
        rest = jnp.arange(steps) >= loop.index
        values = jnp.where(rest, new.value, loop.values)
        lowest = jnp.where(rest, best.value, loop.lowest)
        now = record(new.params)
        records = jax.tree_util.tree_map(
            lambda trace, leaf: jnp.where(rest.reshape((-1,) + (1,) * jnp.ndim(leaf)), leaf, trace),
            loop.records,
            now,
        )
        return Loop(loop.index + 1, new, best, values, lowest, records, calm, needed)

    def cond(loop: Loop) -> Array:
        cap = steps if limit is None else jnp.minimum(steps, limit)
        going = (loop.index < cap) & (loop.calm < patience)
        if settle is None:
            return going
        span = jnp.minimum(loop.index, GAIN_WINDOW)  # fewer steps so far: the same rate of gain
        lowest = loop.lowest
        earlier = jnp.where(loop.index > GAIN_WINDOW, lowest[loop.index - 1 - GAIN_WINDOW], state.value)
        gained = earlier - lowest[loop.index - 1]
        return going & ((loop.index < settle[0]) | (gained >= loop.needed * span / GAIN_WINDOW))

    unset = jnp.full((), jnp.inf, state.value.dtype)
    start = Loop(jnp.asarray(0), state, state, values, values, records, jnp.asarray(0), unset)
    final = jax.lax.while_loop(cond, body, start)
    if stochastic:  # a minibatch's value does not rank iterates
        return final.state, final.values, final.records, final.index
    # A zoom line search that runs out of steps returns its last trial, which may be worse: the run
    # goes on from it (L-BFGS often recovers), but ends at its best iterate, whose value and record
    # fill the rows from its last step on.
    tail = jnp.arange(steps) >= final.index - 1
    values = jnp.where(tail, final.best.value, final.values)
    records = jax.tree_util.tree_map(
        lambda trace, leaf: jnp.where(tail.reshape((-1,) + (1,) * jnp.ndim(leaf)), leaf, trace),
        final.records,
        record(final.best.params),
    )
    return final.best, values, records, final.index
