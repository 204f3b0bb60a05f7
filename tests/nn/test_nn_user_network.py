"""The stationarity attack on networks the user brings: FILE.py:NAME with a state_dict, a torch.export
program, an nn.Module through the API; an --out folder of another model or settings is refused; the
device is resolved once and the attack's tensors live on it."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from nn_recon.attacks.stationarity import StationarityConfig, StationarityLoss, as_target, stationary_points
from nn_recon.cli import main
from nn_recon.models import Architecture, SurrogateReLU, build_network
from nn_recon.pipeline import attack_stationarity
from nn_recon.train import TrainedModel, resolve_device
from recon_core.errors import ReconError

SOURCE = """
import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2, padding=1)
        self.act = nn.ReLU(inplace=True)
        self.head = nn.Linear(4 * 4 * 4, 2)

    def forward(self, x):
        return self.head(self.act(self.conv(x)).flatten(1))


def three_class_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 3))
"""
ATTACK = "--quiet stationarity --points 4 --runs 2 --steps 5 --device cpu"


def tiny_cnn(folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """The model file and a state_dict of its TinyCNN drawn from ``seed``."""
    source = folder / "nets.py"
    source.write_text(SOURCE)
    namespace: dict = {}
    exec(SOURCE, namespace)
    torch.manual_seed(seed)
    weights = folder / f"weights{seed}.pt"
    torch.save(namespace["TinyCNN"]().state_dict(), weights)
    return source, weights


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    tiny_cnn(folder)
    tiny_cnn(folder, seed=1)
    rng = np.random.default_rng(0)
    for name, n in (("train.npz", 6), ("public.npz", 20)):
        images = rng.random((n, 1, 8, 8)).astype(np.float32)
        np.savez(folder / name, images=images, labels=np.arange(n) % 2)
    np.savez(folder / "big.npz", images=np.zeros((2, 1, 9, 9), np.float32), labels=np.zeros(2, int))
    return folder


def attack(folder: Path, out: str, extra: str = "") -> int:
    model = f"--model {folder / 'nets.py'}:TinyCNN --weights {folder / 'weights0.pt'} --input-shape 1,8,8"
    return main([*ATTACK.split(), *model.split(), *extra.split(), "--out", str(folder / out)])


def test_user_cnn_through_the_cli_feeds_match_and_audit(user_files, capsys):
    assert attack(user_files, "recon") == 0
    recon = user_files / "recon"
    assert (recon / "reconstruction.npz").exists() and (recon / "fingerprint.json").exists()
    match = f"--quiet match --recon {recon} --train-data {user_files / 'train.npz'}"
    assert main([*match.split(), "--public", str(user_files / "public.npz")]) == 0
    out = capsys.readouterr().out
    assert "SSIM >=" in out and "beats the public baseline: " in out and " / 6 (mean margin" in out
    scores = json.loads((recon / "match.json").read_text())
    assert scores["public_baseline"]["of"] == 6 and len(scores["public_baseline"]["baseline_ssim"]) == 6
    report, summary = user_files / "audit.html", user_files / "audit.json"
    audit = [
        "--quiet",
        "audit",
        "--stationarity",
        str(recon),
        "--report",
        str(report),
        "--json",
        str(summary),
    ]
    assert main(audit) == 0
    [entry] = json.loads(summary.read_text())["attacks"]
    assert entry["settings"]["beats the public baseline"] == scores["public_baseline"]["beats"]
    assert "than the best an adversary gets from public images alone" in report.read_text()


def test_export_program_gives_the_same_reconstruction_as_its_module(user_files, tmp_path):
    namespace: dict = {}
    exec(SOURCE, namespace)
    network = namespace["TinyCNN"]()
    network.load_state_dict(torch.load(user_files / "weights0.pt", weights_only=True))
    batch = torch.export.Dim("batch")
    program = torch.export.export(network, (torch.zeros(2, 1, 8, 8),), dynamic_shapes=({0: batch},))
    torch.export.save(program, tmp_path / "net.pt2")
    assert main([*ATTACK.split(), "--model", str(tmp_path / "net.pt2"), "--out", str(tmp_path / "r")]) == 0
    assert attack(user_files, "same") == 0
    exported = np.load(tmp_path / "r" / "reconstruction.npz")
    own = np.load(user_files / "same" / "reconstruction.npz")
    np.testing.assert_allclose(exported["points/image"], own["points/image"], atol=1e-6)


def test_a_module_goes_into_the_api_directly(tmp_path):
    torch.manual_seed(0)
    one_logit = nn.Sequential(nn.Flatten(), nn.Linear(16, 6), nn.ReLU(), nn.Linear(6, 1))
    config = StationarityConfig(
        points=4, runs=1, steps=5, device="cpu", objective="posterior", weight_decay=0.1
    )
    result = attack_stationarity(one_logit, config, tmp_path)
    assert result.measure.points["image"].shape[1:] == (1, 4, 4)  # read from the first Linear
    assert set(result.measure.points["label"]) == {0, 1}
    target = as_target(nn.Sequential(nn.Flatten(), nn.Linear(16, 3)))
    assert (target.input_shape, target.num_classes) == ((1, 4, 4), 3)


def test_a_centre_starts_the_candidates_around_it_and_the_network_sees_the_images_themselves(user_files):
    namespace: dict = {}
    exec(SOURCE, namespace)
    network = namespace["TinyCNN"]()
    centre = np.full((1, 8, 8), 0.25, np.float32)
    target = as_target(network, (1, 8, 8), source="nets.py", centre=centre)
    x = torch.rand(3, 1, 8, 8) - 0.25  # centred images
    torch.testing.assert_close(target.network(x), network(x + 0.25))
    assert target.identity != as_target(network, (1, 8, 8), source="nets.py").identity
    other_class = type("Other", (type(network),), {})()  # another class with the same weights
    other_class.load_state_dict(network.state_dict())
    assert target.identity != as_target(other_class, (1, 8, 8), source="nets.py", centre=centre).identity
    config = StationarityConfig(points=4, runs=1, steps=1, init_scale=(1e-6, 1e-6), device="cpu")
    images = stationary_points(target, config).measure.points["image"]
    np.testing.assert_allclose(images, 0.25, atol=0.02)  # one Adam step (lr ≤ 0.01) from the centre
    architecture = Architecture("mlp", (4,), (1, 8, 8), 1)
    own = TrainedModel(build_network(architecture, seed=0), centre, ("odd", "even"), 0.0, 0)
    with pytest.raises(ReconError, match="its own training mean"):  # nn-recon's model carries its mean
        as_target(own, centre=centre)


def test_surrogate_relu_reaches_every_relu_and_keeps_its_values():
    namespace: dict = {}
    exec(SOURCE, namespace)
    network = namespace["TinyCNN"]()
    x = torch.rand(3, 1, 8, 8, requires_grad=True)
    slopes = []
    for beta in (None, 5.0):
        if beta is None:
            outputs = network(x)
        else:
            with SurrogateReLU(beta):
                outputs = network(x)
        slopes.append(torch.autograd.grad(outputs.sum(), x)[0])
        torch.testing.assert_close(outputs, network(x).detach())
    assert (slopes[0] - slopes[1]).abs().max() > 1e-4  # nn.ReLU(inplace=True) was replaced


CNN = "--model nets.py:TinyCNN --weights weights0.pt --input-shape 1,8,8"
BAD_USER_INPUT = [
    ("--model nets.py:TinyCNN --out r", "needs --weights"),
    ("--model nets.py:Missing --weights weights0.pt --out r", "defines no class or function named 'Missing'"),
    ("--model nets.py:three_class_mlp --weights weights0.pt --out r", "does not fit nets.py:three_class_mlp"),
    ("--model nets.py:TinyCNN --weights weights0.pt --out r", "pass --input-shape C,H,W"),
    ("--model nets.py:TinyCNN --weights weights0.pt --input-shape 1,5,5 --out r", "pass its --input-shape"),
    ("--model nets.py:TinyCNN --weights weights0.pt --input-shape 1,8,8 --classes 3 --out r", "--classes 3"),
    ("--model nets.py:TinyCNN --weights weights0.pt --input-shape 1,8,8 --out recon --steps 6", "(steps)"),
    ("--model nets.py:TinyCNN --weights weights1.pt --input-shape 1,8,8 --out recon", "of another model"),
    ("--model nets.py:TinyCNN --weights train.npz --input-shape 1,8,8 --out r", "is not a state_dict"),
    ("--model missing.pt2 --out r", "exported program missing.pt2 does not exist"),
    (f"{CNN} --centre big.npz --out r", "(1, 8, 8)"),
    (f"{CNN} --centre no.npz --out r", "no.npz does not exist"),
    (f"{CNN} --centre public.npz --out recon", "of another model"),  # the centre is part of the target
    ("--model nets.py:TinyCNN --weights weights0.pt --device cuda --out r", "no CUDA device is available"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_USER_INPUT)
def test_bad_user_input_exits_2_before_any_work(user_files, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(user_files)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if not (user_files / "recon").exists():
        assert attack(user_files, "recon") == 0
    before = {p: p.stat().st_mtime_ns for p in user_files.rglob("*")}
    assert main([*ATTACK.split(), "--points", "4", *argv.split()]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nn-recon: error: ") and message in err, err
    if "recon" in argv:
        assert "--fresh" in err
    assert {p: p.stat().st_mtime_ns for p in user_files.rglob("*")} == before


def test_fresh_replaces_the_runs_of_another_model(user_files):
    assert attack(user_files, "fresh") == 0
    (user_files / "fresh" / "match.json").write_text("{}")  # left by an earlier match
    other = (
        f"--model {user_files / 'nets.py'}:TinyCNN --weights {user_files / 'weights1.pt'} --input-shape 1,8,8"
    )
    argv = [*ATTACK.split(), *other.split(), "--fresh", "--out", str(user_files / "fresh")]
    assert main(argv) == 0
    assert not (user_files / "fresh" / "match.json").exists()
    assert main(argv[:-3] + argv[-2:]) == 0  # the same model and settings again: resumed, not refused


def test_device_is_resolved_once_and_the_attack_runs_there(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this machine has no GPU anyway
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ReconError, match="--device must be one of auto, cpu, cuda"):
        resolve_device("gpu")
    network = nn.Sequential(nn.Flatten(), nn.Linear(16, 2)).double()
    result = stationary_points(network, StationarityConfig(points=2, runs=1, steps=2, device="auto"))
    assert result.measure.points["image"].dtype == np.float32  # the config's dtype, moved onto the device
    assert all(p.device == torch.device("cpu") and p.dtype == torch.float32 for p in network.parameters())
    loss = StationarityLoss(network, torch.tensor([0, 1]), "kkt", None)
    assert all(p.device.type == "cpu" for p in loss.params.values())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--train-data public.npz --public nets.py", "--public nets.py is not an .npz of plain arrays"),
        ("--train-data weights0.pt --public public.npz", "weights0.pt is not a model file"),
        ("--train-data train.npz --public test", "--public test needs a model file of nn-recon train"),
        ("--train-data train.npz --public missing.npz", "--public missing.npz does not exist"),
        ("--train-data no_labels.npz", "needs arrays named images and labels (it has images)"),
    ],
)
def test_match_refuses_bad_image_files(user_files, capsys, monkeypatch, flags, message):
    monkeypatch.chdir(user_files)
    np.savez(user_files / "no_labels.npz", images=np.zeros((2, 1, 8, 8), np.float32))
    if not (user_files / "recon").exists():
        assert attack(user_files, "recon") == 0
    assert main(["--quiet", "match", "--recon", "recon", *flags.split()]) == 2
    assert message in capsys.readouterr().err


def test_the_attack_sees_the_module_in_eval_mode():
    network = nn.Sequential(nn.Flatten(), nn.Linear(16, 4), nn.Dropout(0.5), nn.ReLU(), nn.Linear(4, 2))
    as_target(network)
    assert not network.training  # dropout off: the attacked function is the deterministic one


@pytest.mark.parametrize(
    "argv",
    [
        "train --dataset digits --out m.pt",
        "stationarity --model m.pt --out r",
        "gan --workdir w",
        "invert --workdir w --out r",
        "invert --model n.py:N --weights n.pt --public p --out r",
        "shadows --out f",
        "reconn --out f",
    ],
)
def test_an_unavailable_cuda_is_refused_by_every_command_with_a_device(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--quiet", *argv.split(), "--device", "cuda"]) == 2
    assert "no CUDA device is available; use --device cpu or auto" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("outputs", [1, 2, 3])
def test_the_batched_gradient_holds_for_a_user_cnn(outputs):
    """value_and_grad (the scale held fixed) equals autograd through the whole loss, for a network
    with biases everywhere, a convolution and nn.ReLU modules: nothing of nn-recon's Network assumed."""
    torch.manual_seed(0)
    network = nn.Sequential(
        nn.Conv2d(1, 3, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(12, 5),
        nn.ReLU(),
        nn.Linear(5, outputs),
    ).double()
    labels = torch.arange(4) % max(outputs, 2)
    loss = StationarityLoss(as_target(network, (1, 4, 4)), labels, "kkt", None)
    generator = torch.Generator().manual_seed(1)
    x = torch.rand(1, 4, 1, 4, 4, generator=generator, dtype=torch.float64)
    lam = torch.rand(1, 4, generator=generator, dtype=torch.float64) + 0.1
    beta = torch.tensor([20.0], dtype=torch.float64)
    (grad_x, grad_lam), values = loss.value_and_grad(x, lam, beta)
    expected_x, expected_lam = torch.func.grad(loss, argnums=(0, 1))(x[0], lam[0], beta[0])
    torch.testing.assert_close(values[0], loss(x[0], lam[0], beta[0]))
    torch.testing.assert_close(grad_x[0], expected_x, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(grad_lam[0], expected_lam, rtol=1e-8, atol=1e-10)
    assert expected_x.abs().max() > 1e-6
