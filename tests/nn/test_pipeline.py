"""The network pipeline: the stationarity attack resumes in its --out folder, and the informed
adversary end to end on digits (farms and RecoNN reused from disk, results saved)."""

import numpy as np
import pytest

from nn_recon.attacks.reconn_attack import InformedAttackConfig
from nn_recon.attacks.stationarity import StationarityConfig, stationary_points
from nn_recon.metrics import mse
from nn_recon.pipeline import attack_informed, attack_stationarity, save_informed
from nn_recon.reconn import ReconnConfig
from nn_recon.shadows import FarmConfig

SMALL = InformedAttackConfig(
    dataset="digits",
    fixed_set_size=100,
    shadows=600,
    targets=50,
    farm=FarmConfig(widths=(64, 10, 10), epochs=50, lr=0.1, chunk_size=300),
    reconn=ReconnConfig(hidden=(256,), epochs=60, batch_size=64),
)


def test_attack_resumes_to_the_same_result(tmp_path, tiny_attack):
    model, config = tiny_attack
    straight = stationary_points(model, config)

    class Interrupt(Exception):
        pass

    def stop_at_25(step, values):
        if step == 25:
            raise Interrupt

    with pytest.raises(Interrupt):
        attack_stationarity(model, config, tmp_path, on_step=stop_at_25)
    assert (tmp_path / "runs" / "batch_0000.ckpt").exists()
    resumed = attack_stationarity(model, config, tmp_path)
    for a, b in zip(straight.runs, resumed.runs, strict=True):
        np.testing.assert_array_equal(a.points["image"], b.points["image"])
        np.testing.assert_array_equal(a.weights, b.weights)
    # Finished runs are read back, not recomputed.
    again = attack_stationarity(model, config, tmp_path, on_step=stop_at_25)
    np.testing.assert_array_equal(again.measure.weights, resumed.measure.weights)


def test_a_batch_checkpoint_of_other_runs_is_not_resumed(tmp_path, tiny_attack):
    """With fewer --runs, the batch starting at run 0 holds other runs than the checkpoint: it restarts."""
    model, config = tiny_attack

    def stop_at_25(step, values):
        if step == 25:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        attack_stationarity(model, config, tmp_path, on_step=stop_at_25)  # runs 0 and 1 checkpointed
    one_run = StationarityConfig(**{**config.__dict__, "runs": 1})
    resumed = attack_stationarity(model, one_run, tmp_path)
    np.testing.assert_array_equal(
        resumed.runs[0].points["image"], stationary_points(model, one_run).runs[0].points["image"]
    )


@pytest.mark.usefixtures("one_thread")
def test_attack_on_digits_beats_the_mean_image_and_most_oracles(tmp_path):
    result = attack_informed(SMALL, tmp_path)
    targets = result.targets.numpy()
    mean_image_mse = mse(targets, np.broadcast_to(targets.mean(0, keepdims=True), targets.shape))
    summary = result.summary()
    assert summary["mean_mse"] < 0.5 * mean_image_mse.mean()
    assert summary["success_rate"] > 0.5
    np.testing.assert_allclose(result.scores.psnr, 10 * np.log10(1 / result.scores.mse), rtol=1e-10)
    assert summary["mean_psnr"] == pytest.approx(result.scores.psnr.mean())
    assert result.measure.total_mass() == SMALL.targets
    assert result.measure.points["image"].shape == (SMALL.targets, 1, 8, 8)
    saved = save_informed(result, tmp_path / "report", SMALL)
    assert saved["grid"].exists() and saved["measure"].exists()
    again = attack_informed(SMALL, tmp_path)  # farms and RecoNN reused from disk
    np.testing.assert_allclose(again.scores.mse, result.scores.mse, rtol=1e-5)
