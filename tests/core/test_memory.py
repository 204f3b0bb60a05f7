"""The memory guard: a command ends with a message and its own status before the system kills it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from recon_core.memory import EXIT_OUT_OF_MEMORY, MemoryState, available_memory, exhausted, memory_state

GIB = 2**30


def test_memory_is_exhausted_only_when_nearly_gone_and_held_here():
    assert exhausted(MemoryState(available=GIB // 4, total=16 * GIB, held=8 * GIB))
    assert not exhausted(MemoryState(available=4 * GIB, total=16 * GIB, held=8 * GIB))  # plenty left
    assert not exhausted(MemoryState(available=GIB // 4, total=16 * GIB, held=GIB))  # another's doing


def test_this_machine_reports_its_memory():
    state = memory_state()
    assert state is not None  # Linux, as CI
    assert 0 < state.held < state.total and 0 <= state.available <= state.total
    assert abs(available_memory() - state.available) < GIB  # read twice, a moment apart


def run_guarded(state: str) -> subprocess.CompletedProcess:
    """A command that sleeps a second under the guard, told that memory is ``state``."""
    script = textwrap.dedent(
        f"""
        import time
        from recon_core.memory import MemoryState, guard
        with guard("tool", "Use fewer points.", read=lambda: {state}, every=0.01):
            time.sleep(1.0)
        print("finished")
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


def test_a_reading_that_fails_or_says_nothing_is_skipped():
    for reading in ("None", "1 / 0"):
        ran = run_guarded(reading)
        assert ran.returncode == 0 and ran.stdout.strip() == "finished" and not ran.stderr


def test_the_guard_ends_a_command_as_memory_runs_out_and_leaves_it_be_otherwise():
    ended = run_guarded(f"MemoryState({GIB // 8}, {16 * GIB}, {12 * GIB})")
    assert ended.returncode == EXIT_OUT_OF_MEMORY and "finished" not in ended.stdout
    assert (
        "tool: error: memory is nearly exhausted (0.1 GiB left of 16.0 GiB; this command holds 12.0"
        in ended.stderr
    )
    assert "Use fewer points." in ended.stderr and "Traceback" not in ended.stderr
    ran = run_guarded(f"MemoryState({8 * GIB}, {16 * GIB}, {12 * GIB})")
    assert ran.returncode == 0 and ran.stdout.strip() == "finished" and not ran.stderr


def test_both_command_line_tools_stop_with_the_status_and_their_remedy(tmp_path):
    """The tools' commands run under the guard (recon_core.command.run): told that memory is gone, an
    attack and a training started as commands stop at once with status 4 and name what to change."""
    for tool, argv, remedy in (
        (
            "bayes_recon",
            ["reconstruct", "--posterior", "kidiq-kidscore_momiq", "--points", "5"],
            "--max-draws",
        ),
        ("nn_recon", ["train", "--dataset", "digits", "--out", str(tmp_path / "target.pt")], "--per-class"),
    ):
        script = textwrap.dedent(
            f"""
            import sys
            import recon_core.memory as memory
            memory.memory_state = lambda: memory.MemoryState({GIB // 8}, {16 * GIB}, {12 * GIB})
            memory.EVERY = 0.01
            from {tool}.cli import main
            sys.argv = ["tool", *{argv!r}]
            sys.exit(main())
            """
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == EXIT_OUT_OF_MEMORY, done.stderr[-2000:]
        assert "memory is nearly exhausted" in done.stderr and remedy in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "target.pt").exists()


def test_a_command_run_from_python_with_its_arguments_is_not_guarded():
    """recon_core.command.run guards a command started with the process's own arguments (``argv`` None);
    given them from Python (``main([...])``, a notebook, the tests), it leaves the caller's process alone."""
    for argv, status in (("None", EXIT_OUT_OF_MEMORY), ("[]", 0)):
        script = textwrap.dedent(
            f"""
            import argparse, sys, time
            import recon_core.memory as memory
            from recon_core import command
            memory.memory_state = lambda: memory.MemoryState({GIB // 8}, {16 * GIB}, {12 * GIB})
            memory.EVERY = 0.01
            parser = argparse.ArgumentParser(prog="tool")
            parser.set_defaults(run=lambda args: time.sleep(0.5) or 0)
            sys.argv = ["tool"]
            sys.exit(command.run(parser, {argv}, ()))
            """
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == status, done.stderr[-2000:]
