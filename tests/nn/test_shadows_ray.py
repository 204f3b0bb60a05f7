"""The Ray backend trains bitwise the models of the local farm, on a local one-CPU Ray cluster."""

from dataclasses import replace

import pytest
import torch

from nn_recon.cli import main
from nn_recon.dp import DPConfig
from nn_recon.shadows import FarmConfig, build_farm

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'recon-audit[ray]'")

# random initialisations and DP noise: every seed of the farm (model, chunk, block) takes part
CONFIG = FarmConfig(widths=(12, 5, 3), epochs=15, lr=0.2, chunk_size=2, same_init=False,
                    dp=DPConfig(epsilon=1.0))  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ray_farm_is_bitwise_the_local_farm_and_resumes_a_local_one(cluster, tmp_path, dtype):
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(35, 12, generator=g), torch.randint(0, 3, (35,), generator=g)
    data = x[:30], y[:30], x[30:], y[30:]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # a Ray worker's own default is float32: the farm's must travel
    try:
        local = build_farm(CONFIG, *data, tmp_path).params
        on_ray = build_farm(replace(CONFIG, backend="ray"), *data).params
        (tmp_path / "chunk_00001.pt").unlink()
        resumed = build_farm(replace(CONFIG, backend="ray"), *data, tmp_path).params
    finally:
        torch.set_default_dtype(previous)
    assert local.dtype == on_ray.dtype == dtype and local.shape == (5, 12 * 5 + 5 + 5 * 3 + 3)
    assert torch.equal(on_ray, local) and torch.equal(resumed, local)


def test_shadows_command_on_ray_writes_the_local_chunks(cluster, tmp_path):
    common = ["--quiet", "shadows", "--dataset", "digits", "--fixed-set", "50", "--shadows", "20",
              "--targets", "10", "--widths", "64,10,10", "--epochs", "5", "--chunk-size", "8"]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "local")]) == 0
    assert main([*common, "--backend", "ray", "--out", str(tmp_path / "ray")]) == 0
    chunks = sorted(path.relative_to(tmp_path / "local") for path in (tmp_path / "local").rglob("chunk_*.pt"))
    assert len(chunks) == 5  # 3 of shadows, 2 of released models
    for chunk in chunks:
        assert torch.equal(torch.load(tmp_path / "local" / chunk), torch.load(tmp_path / "ray" / chunk))
