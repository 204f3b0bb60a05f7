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
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import jax
from jax._src.interpreters import mlir
from jax._src.lax import linalg

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


@dataclass
class _Swap:
    """How many uses of :func:`xla_linear_algebra` are open, in any thread, and JAX's rules they replaced."""

    depth: int = 0
    saved: dict = field(default_factory=dict)


_SWAP, _SWAP_LOCK = _Swap(), threading.Lock()


@contextlib.contextmanager
def xla_linear_algebra() -> Iterator[None]:
    """Programs lowered inside lower triangular solves and Cholesky factors with XLA's own HLO ops on the
    CPU (see the module's docstring). Uses nest and overlap across threads: the first to open swaps the
    rules in, the last to close puts JAX's back, also when an error ends it."""
    cpu = mlir._platform_specific_lowerings["cpu"]
    with _SWAP_LOCK:
        if _SWAP.depth == 0:
            _SWAP.saved = {primitive: cpu.get(primitive) for primitive in _XLA_RULES}
            for primitive, rule in _XLA_RULES.items():
                mlir.register_lowering(primitive, rule, platform="cpu")
        _SWAP.depth += 1
    try:
        yield
    finally:
        with _SWAP_LOCK:
            _SWAP.depth -= 1
            if _SWAP.depth == 0:
                for primitive, entry in _SWAP.saved.items():
                    if entry is None:
                        cpu.pop(primitive, None)
                    else:
                        cpu[primitive] = entry


def attack_numerics(function: Callable[P, R]) -> Callable[P, R]:
    """``function``, run in float64 (:func:`enable_float64`) and with :func:`xla_linear_algebra`."""

    @functools.wraps(function)
    def with_attack_numerics(*args: P.args, **kwargs: P.kwargs) -> R:
        enable_float64()
        with xla_linear_algebra():
            return function(*args, **kwargs)

    return with_attack_numerics
