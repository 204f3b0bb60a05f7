"""GMI/KEDMI with LOM and MA against the user's own classifier: FILE.py:NAME with a state_dict or a .pt2,
public images from an .npz, a folder of pictures or an IDX file, what it trains kept in --out under
its fingerprint, the evaluation model given, trained on --train-data or absent (and said which); bad
input exits 2."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nn_recon.cli import main
from nn_recon.data import load_digits, load_image_set
from nn_recon.gan import GanConfig, save_gan, train_gan
from nn_recon.models import outputs_and_features
from recon_core.errors import ReconError

SOURCE = """
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.body(x)
"""
FAST = (
    "--quiet invert --restarts 2 --steps 3 --seeds 1 --epochs 1 --public-size 64 --device cpu "
    "--gan-steps 4 --gan-width 4 --gan-latent-dim 4 --gan-batch-size 16"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """net.py:Net trained a little on the 8x8 digits 0-2 (net.pt, and exported as net.pt2), those
    digits as train.npz, and the other digits as public.npz (uint8, (n, H, W)) and as PNG files."""
    folder = tmp_path_factory.mktemp("own")
    (folder / "net.py").write_text(SOURCE)
    namespace: dict = {}
    exec(SOURCE, namespace)
    images, digits = load_digits()
    private = digits < 3
    x, y = torch.from_numpy(images[private]), torch.from_numpy(digits[private])
    torch.manual_seed(0)
    network = namespace["Net"]()
    optimiser = torch.optim.Adam(network.parameters(), 1e-2)
    for _ in range(30):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(network(x), y).backward()
        optimiser.step()
    torch.save(network.state_dict(), folder / "net.pt")
    batch = torch.export.Dim("batch")
    torch.export.save(
        torch.export.export(network, (x[:2],), dynamic_shapes=({0: batch},)), folder / "net.pt2"
    )
    np.savez(folder / "train.npz", images=images[private], labels=digits[private])
    public = (images[~private][:64, 0] * 255).astype(np.uint8)
    np.savez(folder / "public.npz", images=public)
    (folder / "pictures" / "sub").mkdir(parents=True)
    for i, picture in enumerate(public[:40]):  # colour pictures twice the size, some in a subfolder
        where = folder / "pictures" / ("sub" if i % 2 else "")
        Image.fromarray(np.kron(picture, np.ones((2, 2), np.uint8))).convert("RGB").save(where / f"{i}.png")
    return folder


@pytest.fixture
def here(files, monkeypatch) -> Path:
    """The test files' folder, the working directory: the commands name the files by themselves."""
    monkeypatch.chdir(files)
    return files


def invert(extra: str, model: str = "--model net.py:Net --weights net.pt") -> int:
    public = "" if "--public" in extra else "--public public.npz"
    return main([*FAST.split(), *model.split(), *public.split(), *extra.split()])


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_kedmi_lomma_on_a_user_mlp_trains_in_out_and_reuses_it(here, capsys):
    kedmi = "--method kedmi --out kedmi"
    assert invert(f"{kedmi} --loss lomma --train-data train.npz") == 0
    out = here / "kedmi"
    assert "trained on --train-data" in capsys.readouterr().out
    assert {"summary.json", "grid.png", "gan-kedmi.pt", "augmented-0.pt", "augmented-1.pt"} <= {
        p.name for p in out.iterdir()
    }
    assert np.load(out / "seed-0" / "class-2.npz")["points/image"].shape == (2, 1, 8, 8)
    summary = _summary(out)
    assert summary["evaluation"]["origin"] == "trained"
    assert Path(summary["evaluation"]["model"]).parent.name == "kedmi"
    assert {"top1", "knn"} <= set(summary["summary"])
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("*.pt")}

    given = "--eval-model net.py:Net --eval-weights net.pt"
    assert invert(f"{kedmi} --loss ma {given}") == 0  # another loss and evaluation model: all reused
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.pt")} == kept
    summary = _summary(out)
    assert summary["evaluation"]["origin"] == "given" and "knn" not in summary["summary"]
    assert summary["summary"]["top1"] == summary["summary"]["top1_target"]  # the target judging itself

    assert invert(f"{kedmi} --gan-steps 5") == 2
    assert "holds models made with other settings (gan_steps); pass --fresh" in capsys.readouterr().err
    assert invert(f"{kedmi} --gan-steps 5 --fresh") == 0
    assert not list(out.glob("evaluation-*")) and _summary(out)["evaluation"]["origin"] == "none"


def test_gmi_lomma_on_an_exported_program_from_pictures_without_an_evaluation_model(
    here, capsys, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # --device auto: on the CPU
    argv = "--method gmi --loss lomma --public pictures --out pt2 --device auto"
    assert invert(argv, model="--model net.pt2") == 0
    assert "evaluation model: none (no --eval-model or --train-data)" in capsys.readouterr().out
    summary = _summary(here / "pt2")
    assert summary["evaluation"] == {"origin": "none", "model": None, "note": summary["evaluation"]["note"]}
    assert set(summary["metrics"][0]) == {"top1_target", "top1_augmented"}


def test_public_images_are_made_to_the_target_shape(files, tmp_path):
    grey = load_image_set(files / "public.npz", (1, 8, 8))
    assert grey.shape == (64, 1, 8, 8) and grey.dtype == np.float32
    assert np.allclose(grey[:, 0], np.load(files / "public.npz")["images"] / 255)
    pictures = load_image_set(files / "pictures", (1, 8, 8))
    assert pictures.shape == (40, 1, 8, 8) and pictures.min() >= 0 and pictures.max() <= 1
    colour = np.zeros((3, 12, 12, 3), np.uint8)
    colour[..., 0] = 255  # pure red: luma 0.299
    np.savez(tmp_path / "red.npz", image=colour)
    assert np.allclose(load_image_set(tmp_path / "red.npz", (1, 4, 4)), 0.299, atol=1e-6)
    assert np.allclose(load_image_set(files / "public.npz", (3, 8, 8)), grey.repeat(3, 1))
    idx = np.frombuffer(
        np.array([0, 0, 8, 3], np.uint8).tobytes() + np.array([5, 8, 8], ">i4").tobytes(), np.uint8
    )
    (tmp_path / "images-idx3-ubyte.gz").write_bytes(
        gzip.compress(idx.tobytes() + (np.arange(5 * 64) % 256).astype(np.uint8).tobytes())
    )
    assert np.allclose(
        load_image_set(tmp_path / "images-idx3-ubyte.gz", (1, 8, 8)).ravel(), np.arange(320) % 256 / 255
    )
    with pytest.raises(ReconError, match="the target takes 2-channel images"):
        load_image_set(files / "public.npz", (2, 8, 8))


def test_the_penultimate_features_of_a_module_and_its_exported_program_agree(files):
    namespace: dict = {}
    exec(SOURCE, namespace)
    network = namespace["Net"]()
    network.load_state_dict(torch.load(files / "net.pt", weights_only=True))
    exported = torch.export.load(files / "net.pt2").module()
    x = torch.rand(5, 1, 8, 8)
    (out, features), (out_exported, features_exported) = (
        outputs_and_features(n, x) for n in (network, exported)
    )
    hidden = torch.relu(network.body[1](x.flatten(1)))
    assert torch.allclose(features, hidden) and torch.allclose(features_exported, hidden)
    assert torch.allclose(out, out_exported)


def _kedmi_gan_of_five_classes(path: Path) -> None:
    config = GanConfig(kind="kedmi", latent_dim=4, width=4, steps=1, batch_size=2)
    images = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    save_gan(train_gan(config, images, np.full((4, 5), 0.2, np.float32)), path)


@pytest.mark.parametrize(
    ("extra", "model", "message"),
    [
        ("", "--model net.py:Net --weights missing.pt", "weights file"),
        ("", "--model net.py:Net --weights junk.pt", "junk.pt is not a state_dict: torch cannot read it"),
        ("", "--model net.py:Net", "needs --weights, the state_dict"),
        ("--public flat.npz", None, "holds an array of shape (5, 64), not images"),
        ("--public empty", None, "holds no .png/.jpg/.jpeg images"),
        ("--public net.pt", None, "is not an IDX file"),
        (
            "--method kedmi --gan five.pt",
            None,
            "the KEDMI GAN was trained for 5 classes but the target has 3",
        ),
        ("--train-data big.npz", None, "--train-data images are (1, 16, 16) but the target takes (1, 8, 8)"),
        ("--eval-weights net.pt", None, "--eval-weights goes with --eval-model"),
        ("--eval-model wide.py:Wide --eval-weights net.pt", None, "net.pt does not fit wide.py:Wide"),
        ("--target net.pt", None, "--target goes with the MNIST protocol (no --model)"),
        (
            "--public flat.npz --train-data big.npz",
            "",
            "--public, --train-data, --fresh go with --model, your own classifier",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(here, capsys, extra, model, message):
    (here / "junk.pt").write_bytes(b"not a torch file")
    np.savez(here / "flat.npz", images=np.zeros((5, 64), np.float32))
    (here / "empty").mkdir(exist_ok=True)
    np.savez(here / "big.npz", images=np.zeros((4, 1, 16, 16), np.float32), labels=np.arange(4) % 3)
    _kedmi_gan_of_five_classes(here / "five.pt")
    (here / "wide.py").write_text("from torch import nn\n\n\ndef Wide():\n    return nn.Linear(64, 3)\n")
    argv = f"{extra} --out bad --fresh"
    if model == "":  # no --model: the MNIST protocol
        assert main(["invert", *argv.split()]) == 2
    else:
        assert (invert(argv) if model is None else invert(argv, model)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
