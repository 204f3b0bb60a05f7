import numpy as np
import pytest

from nn_recon.data import load_digits
from nn_recon.metrics import MatchConfig, match, mse, psnr, ssim
from nn_recon.ncc import pairwise_ncc
from nn_recon.report import save_match_grid, success_table
from recon_core.errors import ReconError


def test_ssim_of_an_image_with_itself_is_one_and_drops_with_noise():
    images, _ = load_digits()
    a = images[:5]
    np.testing.assert_allclose(ssim(a, a), 1.0)
    noisy = np.clip(a + np.random.default_rng(0).normal(0, 0.3, a.shape), 0, 1)
    assert np.all(ssim(a, noisy) < 0.9)
    assert np.all(mse(a, a) == 0) and np.all(mse(a, noisy) > 0)


def test_psnr_matches_the_hand_computed_value():
    a = np.zeros((2, 1, 4, 4))
    b = np.zeros((2, 1, 4, 4))
    b[0] += 0.1  # MSE 0.01: 10·log10(1 / 0.01) = 20 dB
    b[1, 0, :2] = 0.5  # half the pixels off by 0.5, MSE 0.125: 10·log10(8) = 9.0309 dB
    np.testing.assert_allclose(psnr(a, b), [20.0, 9.030899869919434], rtol=1e-12)
    assert psnr(a[:1], a[:1])[0] == np.inf


def test_ncc_ignores_brightness_and_contrast():
    images, _ = load_digits()
    ncc = pairwise_ncc(images[:3], 0.5 * images[:3] + 0.2)
    np.testing.assert_allclose(np.diag(ncc), 1.0, atol=1e-12)
    assert pairwise_ncc(images[:3], images[:3], downsample=2).shape == (3, 3)


def test_match_finds_each_training_image_among_shuffled_reconstructions(tmp_path):
    images, labels = load_digits()
    train = images[:20]
    order = np.random.default_rng(1).permutation(20)
    recon = np.concatenate([train[order], images[100:110]])
    result = match(
        recon,
        train,
        recon_labels=np.concatenate([labels[:20][order], labels[100:110]]),
        train_labels=labels[:20],
    )
    np.testing.assert_array_equal(order[result.recon_index], np.arange(20))
    assert result.successes() == {0.4: 20, 0.5: 20, 0.6: 20}
    assert result.distinct() == {0.4: 20, 0.5: 20, 0.6: 20}
    assert np.all(result.psnr == np.inf)  # each matched to itself
    assert "0.40" in success_table(result) and "their mean PSNR (dB)" in success_table(result)
    path = save_match_grid(result, recon, train, tmp_path / "grid.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_match_rejects_mismatched_shapes_and_downsampling_below_1():
    with pytest.raises(ReconError, match="differ in shape"):
        match(np.zeros((2, 1, 8, 8)), np.zeros((2, 1, 28, 28)))
    with pytest.raises(ReconError, match="--downsample must be at least 1, got 0"):
        match(np.zeros((2, 1, 8, 8)), np.zeros((2, 1, 8, 8)), config=MatchConfig(downsample=0))


def test_mean_psnr_is_over_the_successes_at_each_threshold():
    images, _ = load_digits()
    train = images[:2]
    recon = np.stack([train[0], 1 - train[1]])  # the second one inverted: SSIM far below 0.4
    labels = np.array([0, 1])
    result = match(recon, train, recon_labels=labels, train_labels=labels)
    assert result.ssim[0] == pytest.approx(1.0) and result.ssim[1] < 0.4
    expected_psnr = 10 * np.log10(1 / mse(train[1:], recon[1:])[0])
    assert result.psnr[1] == pytest.approx(expected_psnr)
    assert result.mean_psnr((0.0, 0.4, 1.1)) == {0.0: np.inf, 0.4: np.inf, 1.1: None}
    assert result.to_json((1.1,))["mean_psnr"] == {"1.1": None}


def test_one_reconstruction_matched_to_two_training_images_is_one_distinct_success():
    images, _ = load_digits()
    twice = np.concatenate([images[:1], images[:1], images[1:2]])
    result = match(images[:2], twice)
    np.testing.assert_array_equal(result.recon_index, [0, 0, 1])
    assert result.successes() == {0.4: 3, 0.5: 3, 0.6: 3}
    assert result.distinct() == {0.4: 2, 0.5: 2, 0.6: 2}


def test_public_baseline_is_beaten_by_the_training_image_itself_not_by_the_class_mean():
    from nn_recon.metrics import BaselineComparison, public_baseline

    images, labels = load_digits()
    train, train_labels = images[:6], labels[:6] % 2
    public, public_labels = images[100:160], labels[100:160] % 2
    baseline = public_baseline(train, train_labels, public, public_labels)
    assert baseline.shape == (6,) and np.all(baseline < 1)  # the target's images are not public
    exact = BaselineComparison(ssim(train, train), baseline)
    assert exact.beats == 6 and exact.mean_margin() == pytest.approx(float(np.mean(1 - baseline)))
    means = np.stack([public[public_labels == c].mean(0) for c in train_labels])
    blurry = BaselineComparison(ssim(train, means), baseline)
    assert blurry.beats == 0 and blurry.mean_margin() is None
    # A public image that is the training image itself: nothing beats that baseline.
    assert np.all(public_baseline(train, train_labels, images[:60], labels[:60] % 2) == pytest.approx(1.0))
    with pytest.raises(ReconError, match="no image of class"):
        public_baseline(train, train_labels, public[public_labels == 0], public_labels[public_labels == 0])
