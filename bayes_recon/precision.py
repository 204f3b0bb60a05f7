"""The settings the posterior attack's numerics run under, switched on by the functions that run them.

**Float64.** The statistics an attack recovers span many orders of magnitude (N ~ 10², XᵀX ~ 10⁶);
float32 cannot resolve the divergence's minimum. JAX's precision is one process-wide setting
(``jax_enable_x64``), so importing :mod:`bayes_recon` leaves it alone: the public entry points that
run JAX numerics (:func:`~bayes_recon.reconstruct.reconstruct`, the self-check, identifiability,
the oracle, the model kernel, mitigation, the pipeline and the audit) carry :func:`attack_numerics`,
which turns it on as they are called; it then stays on. Code that calls the building blocks directly
(weighting, divergence, pseudo, optimise) or makes JAX arrays it will pass in calls
:func:`enable_float64` first. Switching clears JAX's caches: JAX keeps a NumPy array a jitted
function closed over on the device at the precision of its first call, so after the switch the
caller's own jitted code (NUTS run again on the same data) would hand a float32 buffer to a float64
program and fail.

**Batched linear algebra lowered by XLA, on the CPU** (:func:`xla_linear_algebra`, while an entry
point runs). On the CPU, jaxlib lowers a triangular solve and a Cholesky factor to LAPACK calls that
split their batch over XLA's thread pool and wait for their parts
(``ParallelBatchMap``). When two such calls run at once on that pool's own threads, each waits for
parts queued behind the other: a multivariate normal response's attack hung at 0 % CPU in its first
round on two cores (gdb: both pool threads in ``lapack_dtrsm_ffi``, waiting). A per-row likelihood's
matrices are small and batched over points and draws, which XLA's own expansions (HLO
TriangularSolve and Cholesky) serve without the pool; every triangular solve and Cholesky factor
lowered meanwhile takes them, batched or not. JAX's CPU rules are put back when the entry point
returns. JAX keeps compiled programs by their jaxpr, not by these rules: a function of the caller's
first compiled inside an entry point keeps XLA's expansions, and one compiled before keeps LAPACK.
An LU decomposition is left to LAPACK: JAX's own LU algorithm added 3 s to compiling kidiq's attack
(25 → 28 s), whose Newton steps solve with it, one system at a time.

**The log-beta function differentiated analytically** (:func:`analytic_log_beta`, while an entry point
runs). JAX's ``betaln`` is scipy's: a series for large arguments beside the log-gamma form for small
ones, both evaluated and one selected. Differentiated by the program, each derivative multiplies that
series' operations (2.5× per order), and the attack differentiates a likelihood three to four times: a
beta-binomial regression's attack program came to 144,000 lines of StableHLO (a binomial's: 36,000),
took over 6 minutes and 13 GB to compile and ran out of memory at XLA's default optimisation. Its
derivative is ψ(a) − ψ(a + b) in a (ψ the digamma function, whose own derivatives are polygamma
primitives): with that rule, values unchanged, the program is 44,000 lines, compiled in 61 s and 2.4 GB,
and its derivatives are SciPy's to rounding (JAX's own first derivative is 1.6e-7 off at (5.3, 9)).
NumPyro's distributions import ``betaln`` by name, so the swap replaces it in their modules (and in
``jax.scipy.special``, for a model that calls it from there); a model that imported it by name itself
keeps JAX's.

**The polygamma functions by a series** (:func:`series_derivatives`, while an entry point runs). The
log-gamma functions of a gamma, beta, negative binomial or Student-t likelihood are differentiated three
to four times, and each derivative past the first is JAX's ``polygamma``, a Hurwitz zeta function of
real order lowered through powers of logarithms: 2,000,000 of them took 0.10 s on this project's 2-core
machine. Their orders here are whole numbers, and ψ⁽ⁿ⁾ is eight steps of its recurrence and an
asymptotic series of Bernoulli numbers (:func:`series_polygamma`): 0.005 s, SciPy's values to 1e-14
from 1e-8 to 1e7 (JAX's to 2e-15). It is defined above −4 and NaN below, rather than wrong (a likelihood
takes the gamma function of positive numbers; JAX's own is 0.4 % off for ψ″ at −7.5): a zero tangent
there is NaN too, where JAX's rule gave 0. The digamma function keeps its value and takes that
derivative. As for the rules above, a function's derivative keeps the rule of its first tracing: a
jitted helper of the user's first differentiated outside the swap keeps JAX's inside it, and one first
differentiated inside keeps the series after it. In ``benchmarks/bayes_general.py`` (N = 1,000, three
covariates, M = 50) the beta row went from 121 s to 87–92 s and the negative binomial's from 148 s to
112 s, their masses within a tenth of their standard errors.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import jax
import jax.numpy as jnp
import jax.scipy.special
import numpyro.distributions.conjugate
import numpyro.distributions.continuous
from jax._src.interpreters import mlir
from jax._src.lax import linalg
from jax.interpreters import ad
from jax.lax import digamma_p
from jax.scipy.special import betaln as jax_betaln
from jax.scipy.special import digamma

P = ParamSpec("P")
R = TypeVar("R")

_XLA_RULES = {
    linalg.triangular_solve_p: linalg._triangular_solve_lowering,
    linalg.cholesky_p: linalg._cholesky_lowering,
}


def enable_float64() -> None:
    """Switch JAX to float64 (``jax_enable_x64``) for the rest of the process."""
    if not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)
        jax.clear_caches()


class _ProcessSwap:
    """A process-wide change whose uses nest and overlap across threads: the first to open applies it
    (``apply()`` returns how to undo it), the last to close undoes it, also when an error ends it."""

    def __init__(self, apply: Callable[[], Callable[[], None]]) -> None:
        self._apply, self._undo, self._depth, self._lock = apply, None, 0, threading.Lock()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._undo = self._apply()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._undo()


def _use_xla_rules() -> Callable[[], None]:
    cpu = mlir._platform_specific_lowerings["cpu"]
    saved = {primitive: cpu.get(primitive) for primitive in _XLA_RULES}
    for primitive, rule in _XLA_RULES.items():
        mlir.register_lowering(primitive, rule, platform="cpu")

    def undo() -> None:
        for primitive, entry in saved.items():
            if entry is None:
                cpu.pop(primitive, None)
            else:
                cpu[primitive] = entry

    return undo


xla_linear_algebra = _ProcessSwap(_use_xla_rules)
xla_linear_algebra.__doc__ = """Programs lowered inside lower triangular solves and Cholesky factors
with XLA's own HLO ops on the CPU (see the module's docstring)."""


def log_beta(a: jax.typing.ArrayLike, b: jax.typing.ArrayLike) -> jax.Array:
    """JAX's ``betaln``, differentiated by its analytic rule (see the module's docstring); whole numbers
    are taken as floating point, as ``betaln`` takes them."""
    dtype = jnp.result_type(a, b, 1.0)
    return _log_beta(jnp.asarray(a, dtype), jnp.asarray(b, dtype))


@jax.custom_jvp
def _log_beta(a: jax.Array, b: jax.Array) -> jax.Array:
    return jax_betaln(a, b)


@_log_beta.defjvp
def _log_beta_jvp(primals: tuple, tangents: tuple) -> tuple:
    (a, b), (da, db) = primals, tangents
    both = digamma(a + b)
    return _log_beta(a, b), (digamma(a) - both) * da + (digamma(b) - both) * db


def _use_analytic_log_beta() -> Callable[[], None]:
    saved = [(module, module.betaln) for module in _BETALN_USERS]
    for module, _ in saved:
        module.betaln = log_beta

    def undo() -> None:
        for module, original in saved:
            module.betaln = original

    return undo


_BETALN_USERS = (jax.scipy.special, numpyro.distributions.conjugate, numpyro.distributions.continuous)
analytic_log_beta = _ProcessSwap(_use_analytic_log_beta)
analytic_log_beta.__doc__ = """NumPyro's distributions (and ``jax.scipy.special.betaln``) take
:func:`log_beta` (see the module's docstring)."""


# B_2, B_4, …, B_14: the coefficients of the polygamma functions' asymptotic series
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)
_SHIFT = 8  # the series is taken at x + 8 and brought back by the recurrence


def _factorial(k: int) -> float:
    """k! as a float: JAX takes no int beyond int64."""
    return float(math.factorial(k))


def _polygamma_by_series(n: int, x: jax.Array) -> jax.Array:
    """ψ⁽ⁿ⁾(x), n ≥ 1: ψ⁽ⁿ⁾(x) = ψ⁽ⁿ⁾(x + 1) + (−1)ⁿ⁺¹ n!/xⁿ⁺¹ taken eight times, then the asymptotic
    series at x + 8 to its B_14 term (8e-11 relative at x + 8 = 8, 3e-6 at 4, for n ≤ 5)."""
    near = sum(1.0 / (x + k) ** (n + 1) for k in range(_SHIFT))
    inverse = 1.0 / (x + _SHIFT)
    far = _factorial(n - 1) * inverse**n + _factorial(n) / 2 * inverse ** (n + 1)
    power = inverse ** (n + 2)
    for j, bernoulli in enumerate(_BERNOULLI, start=1):
        far = far + bernoulli * _factorial(2 * j + n - 1) / _factorial(2 * j) * power
        power = power * inverse * inverse
    return (-1.0) ** (n + 1) * (_factorial(n) * near + far)


# From 0 up the series is SciPy's to 1e-14; down to −4 within 5e-12 of its recurrence's terms (where
# they cancel, near a zero of an even order's ψ⁽ⁿ⁾ at −3.5, up to 1e-7 relative); below, the series
# leaves its range, and the value is NaN instead of a wrong one. A likelihood takes the gamma function
# of positive numbers.
LOWEST_ARGUMENT = -4.0


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def series_polygamma(n: int, x: jax.Array) -> jax.Array:
    """ψ⁽ⁿ⁾(x), n ≥ 1, by elementary operations (:func:`_polygamma_by_series`; NaN at
    :data:`LOWEST_ARGUMENT` and below), differentiated as ψ⁽ⁿ⁺¹⁾ the same way."""
    return jnp.where(x > LOWEST_ARGUMENT, _polygamma_by_series(n, x), jnp.nan)


@series_polygamma.defjvp
def _series_polygamma_jvp(n: int, primals: tuple, tangents: tuple) -> tuple:
    (x,), (dx,) = primals, tangents
    return series_polygamma(n, x), series_polygamma(n + 1, x) * dx


def _use_series_polygamma() -> Callable[[], None]:
    saved = ad.primitive_jvps[digamma_p]
    ad.defjvp(digamma_p, lambda g, x: g * series_polygamma(1, x))

    def undo() -> None:
        ad.primitive_jvps[digamma_p] = saved

    return undo


series_derivatives = _ProcessSwap(_use_series_polygamma)
series_derivatives.__doc__ = """The digamma function differentiated by :func:`series_polygamma` (see the
module's docstring)."""


def attack_numerics(function: Callable[P, R]) -> Callable[P, R]:
    """``function``, run in float64 (:func:`enable_float64`), with :func:`xla_linear_algebra`,
    :func:`analytic_log_beta` and :func:`series_derivatives`."""

    @functools.wraps(function)
    def with_attack_numerics(*args: P.args, **kwargs: P.kwargs) -> R:
        enable_float64()
        with xla_linear_algebra(), analytic_log_beta(), series_derivatives():
            return function(*args, **kwargs)

    return with_attack_numerics
