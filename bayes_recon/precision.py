"""Float64 for the posterior attack, switched on by the functions that run its numerics, never by an import.

The statistics an attack recovers span many orders of magnitude (N ~ 10², XᵀX ~ 10⁶); float32
cannot resolve the divergence's minimum. JAX's precision is one process-wide setting
(``jax_enable_x64``), so importing :mod:`bayes_recon` leaves it alone: the public entry points that
run JAX numerics (:func:`~bayes_recon.reconstruct.reconstruct`, the self-check, identifiability,
the oracle, the model kernel, mitigation, the pipeline and the audit) carry :func:`float64`, which
turns it on as they are called; it then stays on. Code that calls the building blocks directly
(weighting, divergence, pseudo, optimise) or makes JAX arrays it will pass in calls
:func:`enable_float64` first.

Switching clears JAX's caches: JAX keeps a NumPy array a jitted function closed over on the device
at the precision of its first call, so after the switch the caller's own jitted code (NUTS run again
on the same data) would hand a float32 buffer to a float64 program and fail.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax

P = ParamSpec("P")
R = TypeVar("R")


def enable_float64() -> None:
    """Switch JAX to float64 (``jax_enable_x64``) for the rest of the process."""
    if not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)
        jax.clear_caches()


def float64(function: Callable[P, R]) -> Callable[P, R]:
    """``function``, with :func:`enable_float64` called before it runs."""

    @functools.wraps(function)
    def with_float64(*args: P.args, **kwargs: P.kwargs) -> R:
        enable_float64()
        return function(*args, **kwargs)

    return with_float64
