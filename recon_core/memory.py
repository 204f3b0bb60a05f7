"""Memory: how much is available now, and a guard that ends a command before the system kills it.

A process that outgrows memory is killed by the kernel's out-of-memory killer without a word to the user
(the shell prints "Killed", status 137), or first swaps the machine to a halt. Compiling is where that
comes without warning: XLA counts a compiled program's memory (which the posterior attack checks before
it runs a round) only once it is compiled, and compiling can itself take gigabytes. A beta-binomial
regression's attack went past 18 GB compiling (stop 68); the gradient of 400 layers of 8 × 8 matrix
products exhausted this project's 24 GB machine and was killed, where 60 layers took 0.5 GB.
:func:`guard` looks at memory from a thread every :data:`EVERY` seconds (XLA's compiler lets go of
Python's lock, so the thread runs while a program compiles) and, when memory is nearly gone and this
process holds a good share of it, ends the process with a message and :data:`EXIT_OUT_OF_MEMORY`. The
command-line tools run their subcommands under it when started as commands
(:func:`recon_core.command.run` with no ``argv``); called from Python, ``main([...])`` and the libraries
leave the caller's process alone. It reads a container's limit from cgroup v2 only (not v1, not a parent
slice's), and counts no swap.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

EXIT_OUT_OF_MEMORY = 4
NEARLY_GONE = 0.03  # of the memory there is, left available: the kernel is about to kill or swap
HELD = 0.25  # of the memory there is, held by this process: the one the kernel would kill
EVERY = 0.25  # seconds between looks; a compilation takes gigabytes over seconds
CGROUP = "/sys/fs/cgroup"


class MemoryState(NamedTuple):
    """Bytes: available to new allocations, there in all (the machine's, within a container's limit), and
    held by this process (its anonymous and shared resident memory)."""

    available: int
    total: int
    held: int


def available_memory() -> int:
    """Bytes of memory available to new allocations now: Linux's MemAvailable, within a container's
    limit (cgroup v2: the limit less what the container holds, its inactive file cache counted as free);
    elsewhere half the machine's memory, or 0 where not even that is known."""
    try:
        free = _meminfo("MemAvailable:")
    except (OSError, StopIteration, ValueError):
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        except (AttributeError, OSError, ValueError):
            return 0
    try:
        limit = _container_limit()
        if limit is not None:
            cache = next(
                int(line.split()[1])
                for line in Path(f"{CGROUP}/memory.stat").read_text().splitlines()
                if line.startswith("inactive_file ")
            )
            free = min(free, limit - int(Path(f"{CGROUP}/memory.current").read_text()) + cache)
    except (OSError, ValueError, StopIteration):
        pass
    return max(free, 0)


def memory_state() -> MemoryState | None:
    """Memory now, or None where Linux's /proc does not say. ``held`` counts this process's anonymous
    and shared memory (RssAnon + RssShmem), not the mapped files of its libraries, which the kernel can
    drop. Swap is not counted as available: a command that needs it has already run out."""
    try:
        total = _meminfo("MemTotal:")
        status = Path("/proc/self/status").read_text().splitlines()
        held = 1024 * sum(
            int(line.split()[1]) for line in status if line.startswith(("RssAnon:", "RssShmem:"))
        )
        limit = _container_limit()
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return MemoryState(available_memory(), total if limit is None else min(total, limit), held)


def exhausted(state: MemoryState) -> bool:
    """Memory nearly gone, and this process holds a good share of it."""
    return state.available < NEARLY_GONE * state.total and state.held > HELD * state.total


@contextmanager
def guard(
    prog: str, remedy: str, read: Callable[[], MemoryState | None] | None = None, every: float | None = None
) -> Iterator[None]:
    """While the block runs, end the process with ``prog: error: …`` (naming ``remedy``) and
    :data:`EXIT_OUT_OF_MEMORY` as soon as memory is :func:`exhausted`, looked at by ``read`` (default
    :func:`memory_state`; a reading that fails is skipped) every ``every`` seconds (default
    :data:`EVERY`). No unwinding: the kernel would not have allowed any; what a command keeps as it
    goes (a checkpoint's finished rounds, written whole) stays."""
    read = read or memory_state
    every = EVERY if every is None else every
    if not every > 0:
        raise ValueError(f"every must be a positive number of seconds, got {every!r}")
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every):
            try:
                state = read()
            except Exception:  # a failed reading is no reason to stop the command, nor to stop looking
                continue
            if state is None or not exhausted(state) or stop.is_set():
                continue
            gib = [x / 2**30 for x in state]
            try:  # a new line first: a progress bar may hold the line
                sys.stderr.write(
                    f"\n{prog}: error: memory is nearly exhausted ({gib[0]:.1f} GiB left of {gib[1]:.1f} "
                    f"GiB; this command holds {gib[2]:.1f} GiB) and the system would kill the command "
                    f"without a word, so it stops here (exit status {EXIT_OUT_OF_MEMORY}). {remedy}\n"
                )
                sys.stderr.flush()
            finally:
                os._exit(EXIT_OUT_OF_MEMORY)

    watcher = threading.Thread(target=watch, name="memory guard", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()


def _meminfo(field: str) -> int:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith(field))


def _container_limit() -> int | None:
    """A container's memory limit in bytes (cgroup v2 at the root of the container's view), or None
    without one, or where it is not read: cgroup v1, a limit on a parent slice."""
    try:
        limit = Path(f"{CGROUP}/memory.max").read_text().strip()
    except OSError:
        return None
    return None if limit == "max" else int(limit)
