"""The attack's traced program, kept on disk beside JAX's compilation cache, so a second run traces nothing.

JAX's persistent cache keeps compiled programs, keyed by the program; but finding the program means
tracing the attack, several seconds of Python for kidiq (a third of a repeated run). So the traced
program is exported (``jax.export``, StableHLO) under a key of everything it is made from, and a run
with the same key loads it instead of tracing. The key holds the attack's identity (the draws, the
fixed data, the free columns and supports, the settings, this package's source and JAX's version:
:func:`bayes_recon.checkpoint.fingerprint`) and the model's own computation: the jaxprs (with their
constants) of the functions the program calls into the user's model, so that an edited model or a
helper it calls is another program, however its source file is laid out.

Programs are kept only while the compilation cache is on (``jax_compilation_cache_dir`` set, as the
command line does); the library's default traces every time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np

from recon_core.files import write_atomically

FOLDER = "recon-audit-programs"  # inside JAX's compilation cache folder
# JAX settings that change a traced program without changing the jaxprs of the model calls
CONFIG_IN_KEY = ("jax_enable_x64", "jax_default_prng_impl", "jax_threefry_partitionable")


def folder() -> Path | None:
    """Where programs are kept, or None when the compilation cache is off."""
    cache = jax.config.jax_compilation_cache_dir
    return Path(cache) / FOLDER if cache else None


def traced_digest(calls: Sequence[tuple[Callable, tuple]]) -> str:
    """A digest of what each ``function(*args)`` computes: its jaxpr and the bytes of its constants."""
    digest = hashlib.sha256()
    for function, args in calls:
        closed = jax.make_jaxpr(function)(*args)
        digest.update(str(closed.jaxpr).encode())
        for const in closed.consts:
            value = np.ascontiguousarray(np.asarray(const))
            digest.update(f"{value.dtype.str}{value.shape}".encode() + value.tobytes())
    return digest.hexdigest()


def program_key(identity: Mapping[str, Any], model_calls: Sequence[tuple[Callable, tuple]]) -> str:
    settings = {name: str(getattr(jax.config, name)) for name in CONFIG_IN_KEY}
    versions = {name: metadata.version(name) for name in ("jaxlib", "numpyro")}
    text = json.dumps(
        {**identity, **settings, **versions, "traced": traced_digest(model_calls)},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def lower(
    function: Callable,
    args: tuple,
    identity: Mapping[str, Any],
    model_calls: Callable[[], Sequence[tuple[Callable, tuple]]],
) -> jax.stages.Lowered:
    """``jax.jit(function).lower(*args)``, through a kept program when there is one (and keeping it
    when there is none). Without the cache, or where a program cannot be exported, it is traced as is.
    ``model_calls()`` gives the key's model calls; it runs only when the cache is on."""
    where = folder()
    if where is None:
        return jax.jit(function).lower(*args)
    path = where / f"{program_key(identity, model_calls())}.jaxexport"
    try:
        program = jax.export.deserialize(bytearray(path.read_bytes())) if path.is_file() else None
        if program is not None:
            return _lowered(function, program, args)
    except Exception:  # a damaged, foreign or unreadable file: traced again and written anew
        with contextlib.suppress(OSError):
            path.unlink()
    specs = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a), a.dtype), args)
    try:
        program = jax.export.export(jax.jit(function))(*specs)
    except Exception:  # e.g. a model calling a function jax.export cannot serialise
        return jax.jit(function).lower(*args)
    with contextlib.suppress(OSError):  # an unwritable cache costs the next run a trace, nothing more
        write_atomically(path, lambda temporary: temporary.write_bytes(program.serialize()))
    return _lowered(function, program, args)


def _lowered(function: Callable, program: jax.export.Exported, args: tuple) -> jax.stages.Lowered:
    # under the function's own name: the compilation cache's entry says what it is (jit_attack_round)
    return jax.jit(functools.wraps(function)(lambda *a: program.call(*a))).lower(*args)
