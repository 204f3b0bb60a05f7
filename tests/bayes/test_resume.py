"""Checkpointed attacks: a run stopped after its first round resumes to the bitwise same result, and a
checkpoint of another attack is refused (exit 2 from the command line) unless started fresh."""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

import bayes_recon as br
from bayes_recon.checkpoint import FINGERPRINT
from bayes_recon.cli import main
from bayes_recon.stages import FINE_GAIN
from bayes_recon.standard_errors import CLOSING_STEPS

DRAWS = {"mu": np.random.default_rng(0).normal(1.0, 0.1, 200)}
# Compiles in seconds; two rounds run side by side, whatever the cores.
CONFIG = br.ReconConfig(
    coarse_steps=0, steps=3, restarts=3, restarts_at_once=1, rounds_at_once=2, bootstrap=1
)


def model(y=None):
    mu = numpyro.sample("mu", dist.Normal(0, 10))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1), obs=y)


class Stopped(Exception):
    """Stands in for the run being killed after its first round."""


def attack(**options):
    return br.reconstruct(model, DRAWS, free=["y"], n_points=3, config=CONFIG, **options)


def same(a: br.Reconstruction, b: br.Reconstruction) -> bool:
    arrays = [
        (a.measure.weights, b.measure.weights),
        (a.restart_objectives, b.restart_objectives),
        *((a.measure.points[k], b.measure.points[k]) for k in a.measure.points),
        *((a.history[k], b.history[k]) for k in a.history),
        *((a.bootstrap[k], b.bootstrap[k]) for k in a.bootstrap),
    ]
    return a.best_restart == b.best_restart and all(np.array_equal(x, y, equal_nan=True) for x, y in arrays)


def test_a_run_stopped_after_its_first_round_resumes_to_the_same_result(tmp_path):
    reference = attack()
    folder = tmp_path / "ckpt"

    def stop_after_first_round(done: int, total: int) -> None:
        if done == 1:
            raise Stopped

    with pytest.raises(Stopped):
        attack(progress=stop_after_first_round, checkpoint=folder)
    # The round running beside the first when it stopped was kept too; the third never started.
    assert len(list(folder.glob("round-*.npz"))) == 2 and (folder / FINGERPRINT).is_file()

    reported: list[int] = []
    resumed = attack(progress=lambda done, total: reported.append(done), checkpoint=folder)
    assert reported == [2, 3, 4, 5]  # rounds read back; the third, the bootstrap's and the refinement ran
    assert same(resumed, reference)
    assert resumed.history["objective"].shape[0] == 3 and resumed.history["steps_taken"].shape == (3, 4)

    again = attack(checkpoint=folder)  # every round finished: nothing runs, nothing compiles
    assert again.compile_seconds == 0 and same(again, reference)

    with pytest.raises(br.ReconError, match=r"another attack \(it differs in: config\).*--fresh"):
        br.reconstruct(
            model, DRAWS, free=["y"], n_points=3, config=CONFIG.__class__(steps=4), checkpoint=folder
        )
    with pytest.raises(br.ReconError, match=r"differs in: seed"):
        attack(seed=1, checkpoint=folder)


def test_an_attack_stopped_during_the_rescue_resumes_to_the_same_result(tmp_path, monkeypatch):
    """The first restarts fail the self-check (made to), so the rescue's two run, a round each: stopped
    after the first of them, the attack resumes to the result of a run never stopped, and once finished
    reads everything back."""
    reconstruct_module = importlib.import_module("bayes_recon.reconstruct")
    checked = reconstruct_module.round_trip
    monkeypatch.setattr(
        reconstruct_module, "round_trip", lambda *a, **k: replace(checked(*a, **k), reproduces=False)
    )
    config = replace(CONFIG, bootstrap=0, rounds_at_once=1, refine_rounds=0)
    reference = br.reconstruct(model, DRAWS, free=["y"], n_points=3, config=config)
    assert reference.rescued() == 2

    def stop_after_the_rescues_first_round(done: int, total: int) -> None:
        if done == 4:
            assert total == 6  # three restarts, two rescued, and the check
            raise Stopped

    with pytest.raises(Stopped):
        br.reconstruct(model, DRAWS, free=["y"], n_points=3, config=config, checkpoint=tmp_path,
                       progress=stop_after_the_rescues_first_round)  # fmt: skip
    assert len(list(tmp_path.glob("round-*.npz"))) == 4
    resumed = br.reconstruct(model, DRAWS, free=["y"], n_points=3, config=config, checkpoint=tmp_path)
    assert same(resumed, reference)
    again = br.reconstruct(model, DRAWS, free=["y"], n_points=3, config=config, checkpoint=tmp_path)
    assert again.compile_seconds == 0 and same(again, reference) and again.rescued() == 2


def stale_checkpoint(folder):
    folder.mkdir()
    (folder / FINGERPRINT).write_text(json.dumps({"seed": 99}))
    (folder / "round-00000.npz").write_bytes(b"")
    return ["--quiet", "reconstruct", "--points", "3", "--checkpoint", str(folder)]


def test_the_command_line_refuses_another_attacks_checkpoint(tmp_path, capsys):
    """The real attack: it refuses before anything is compiled, and deletes nothing."""
    folder = tmp_path / "ckpt"
    assert main(stale_checkpoint(folder)) == 2
    err = capsys.readouterr().err
    assert "holds rounds of another attack" in err and "--fresh" in err and "Traceback" not in err
    assert sorted(p.name for p in folder.iterdir()) == [FINGERPRINT, "round-00000.npz"]


def test_fresh_deletes_the_checkpoint_first(tmp_path, fake_reconstruct):
    folder = tmp_path / "ckpt"
    assert main([*stale_checkpoint(folder), "--fresh"]) == 0
    (call,) = fake_reconstruct
    assert call.checkpoint == folder and not folder.exists()  # emptied before, removed after the outputs


def test_the_checkpoint_defaults_to_beside_the_outputs(tmp_path, fake_reconstruct):
    prefix, out_json = tmp_path / "measure", tmp_path / "out.json"
    assert (
        main(["--quiet", "reconstruct", "--points", "3", "--json", str(out_json), "--save", str(prefix)]) == 0
    )
    assert main(["--quiet", "reconstruct", "--points", "3", "--json", str(out_json)]) == 0
    assert main(["--quiet", "reconstruct", "--points", "3"]) == 0
    assert [c.checkpoint for c in fake_reconstruct] == [
        tmp_path / "measure.ckpt",
        tmp_path / "out.ckpt",
        None,
    ]
    (tmp_path / "file").write_text("")
    assert main(["--quiet", "reconstruct", "--checkpoint", str(tmp_path / "file")]) == 2


def test_a_last_stage_stopped_at_its_cap_is_reported_as_not_converged():
    """This model's start is its optimum: the last stage stops at once, converged. The same run with its
    last stage at the cap (the rule that stops it is tested in test_optimise.py) says it is not, and the
    CLI says so with the remedy."""
    from bayes_recon.cli import describe_convergence

    settled = br.reconstruct(
        model, DRAWS, free=["y"], n_points=3, config=replace(CONFIG, rescue_restarts=0, refine_rounds=0)
    )
    assert (settled.history["steps_taken"][:, 3] <= 3).all()  # three unchanged steps: the calm rule
    assert settled.converged() is True and "stopped when" in describe_convergence(settled)
    # Moved off its optimum (every weight times 1.5), the same stopped stage is short of it: the objective
    # falls along the sandwich's step, checked on the objective, and the CLI says so with the remedy.
    heavier = replace(settled.measure, weights=1.5 * settled.measure.weights)
    moved = replace(settled, measure=heavier)
    assert settled.remaining_gain < FINE_GAIN < moved.remaining_gain
    assert moved.converged() is True and moved.short_of_optimum() is True
    short = describe_convergence(moved)
    assert "NOT reached: the last stage stopped on its own, but along the step of its quadratic" in short
    assert short.endswith("rerun with --steps 12.")
    # The closing steps carry it back: lower, no longer short, stopped on their own, and said.
    closed = moved.with_closing_steps()

    def objective(result: br.Reconstruction) -> float:
        return float(result.objective_terms(result.measure.points, result.measure.weights).mean())

    assert len(closed.history["closing_gains"]) >= 1 and closed.objective == pytest.approx(objective(closed))
    assert objective(settled) - 1e-6 < closed.objective < objective(moved)
    assert closed.converged() is True and closed.short_of_optimum() is False
    assert (
        abs(closed.measure.total_mass() - settled.measure.total_mass())
        < abs(moved.measure.total_mass() - settled.measure.total_mass()) / 10
    )
    assert describe_convergence(closed).startswith(
        "after the last stage stopped, Newton steps checked on the"
    )
    # All the closing steps taken is no convergence; none taken leaves the last stage's word.
    ran_out = replace(closed, history={**closed.history, "closing_gains": np.ones(CLOSING_STEPS)})
    assert ran_out.converged() is False and ran_out.short_of_optimum() is True
    assert "NOT reached: all 20 Newton steps" in describe_convergence(ran_out)
    taken = settled.history["steps_taken"].copy()
    taken[:, 3] = settled.history["stage_steps"][3]
    capped = replace(settled, history={**settled.history, "steps_taken": taken, "closing_gains": np.zeros(0)})
    assert capped.converged() is False
    said = describe_convergence(capped)
    assert "NOT reached" in said and "all its 12 steps" in said and "--steps 12 (a cap of 48)" in said
    adam = replace(capped, config=replace(capped.config, method="adam"))  # Adam's steps are its cap
    assert "all its 3 steps while the objective was still changing" in describe_convergence(adam)
    kept = attack()  # the stages' result reproduces the release: no Frank–Wolfe rounds, the check kept
    assert kept.checked is not None and kept.checked[1].reproduces and "refine_objectives" not in kept.history


def two_normals(y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 3.0).expand([2]).to_event(1))
    with numpyro.plate("data", y.shape[0]):
        mixing = dist.Categorical(jnp.array([0.4, 0.6]))
        numpyro.sample("y", dist.MixtureSameFamily(mixing, dist.Normal(mu, 1.0)), obs=y)


def test_a_last_stage_still_moving_after_its_first_steps_is_carried_on_by_closing_steps():
    """Given five steps, a two-component mixture's last stage runs on to its cap (20): Newton steps that
    the objective confirms follow, and lower it from where the stage ended by what they gained."""
    from bayes_recon.cli import describe_convergence

    rng = np.random.default_rng(0)
    y = np.where(rng.random(100) < 0.4, -2.0, 2.0) + rng.normal(size=100)
    mcmc = MCMC(NUTS(two_normals), num_warmup=300, num_samples=500, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y=y)
    draws = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
    five = br.ReconConfig(steps=5, restarts=1, rescue_restarts=0, refine_rounds=0)
    result = br.reconstruct(two_normals, draws, free=["y"], n_points=5, config=five)
    assert result.history["steps_taken"][0, 3] > 5
    gains = result.history["closing_gains"]
    assert len(gains) >= 1 and np.all(gains > 0)
    ended = result.restart_objectives[result.best_restart]  # where the last stage left it
    terms = result.objective_terms(result.measure.points, result.measure.weights)
    error = np.std(terms, ddof=1) / np.sqrt(len(terms))
    assert result.objective == pytest.approx(terms.mean()) and result.objective < ended
    assert (ended - result.objective) / error == pytest.approx(gains.sum(), rel=0.1)
    assert result.converged() is True and result.short_of_optimum() is False
    said = describe_convergence(result)
    assert said.startswith(
        f"the last stage went on past its first 5 steps to {result.history['steps_taken'][0, 3]}"
    )
    assert f"followed: {len(gains)}, gaining" in said


def test_rounds_run_side_by_side_give_the_result_of_one_round_at_a_time(tmp_path):
    one_at_a_time = br.reconstruct(
        model, DRAWS, free=["y"], n_points=3, config=replace(CONFIG, rounds_at_once=1), checkpoint=tmp_path
    )
    assert same(attack(), one_at_a_time)
    assert same(attack(checkpoint=tmp_path), one_at_a_time)  # the same attack: its checkpoint is taken


def test_rounds_side_by_side_leave_a_core_free_on_a_cpu(monkeypatch):
    """A batched factorisation in a round waits on XLA's CPU pool (one thread per core) for its parts: with
    a round on every thread nothing runs them (diamonds hung with two rounds on two cores)."""
    from bayes_recon.reconstruct import _rounds_side_by_side

    class Compiled:
        def memory_analysis(self):
            return type(
                "Stats", (), {"temp_size_in_bytes": 1, "argument_size_in_bytes": 1, "output_size_in_bytes": 1}
            )

    for cores, side_by_side in ((4, 3), (2, 1), (1, 1)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)), raising=False)
        assert _rounds_side_by_side(Compiled(), pending=10, cpu=True, asked=None) == side_by_side
    assert _rounds_side_by_side(Compiled(), pending=10, cpu=True, asked=2) == 2  # as asked
