"""The three commands end to end on the embedded digits, bad input exiting 2 with a one-line message
before any work, and every option's help showing its default."""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nn_recon.cli import build_parser, main
from recon_core.measure import WeightedMeasure


def test_train_attack_match_end_to_end(tmp_path, capsys):
    model = tmp_path / "model.pt"
    train = (
        "train --dataset digits --per-class 8 --arch mlp:32 --lr 0.1 --max-steps 300 --first-layer-scale 0.1"
    )
    assert main(["--quiet", *train.split(), "--out", str(model)]) == 0
    assert "training loss" in capsys.readouterr().out and not (tmp_path / "model.pt.ckpt").exists()
    recon = tmp_path / "recon"
    attack = "--quiet stationarity --points 8 --runs 2 --steps 20"
    assert main([*attack.split(), "--model", str(model), "--out", str(recon)]) == 0
    assert (recon / "reconstruction.npz").exists() and (recon / "runs" / "run_0001.npz").exists()
    summary = tmp_path / "match.json"
    assert (
        main(["--quiet", "match", "--recon", str(recon), "--train-data", str(model), "--json", str(summary)])
        == 0
    )
    out = capsys.readouterr().out
    assert "SSIM >=" in out and "mean PSNR (dB)" in out and (recon / "match.png").exists()
    scores = json.loads(summary.read_text())
    assert len(scores["ssim"]) == len(scores["psnr"]) == 16


class WritesAFile:
    """Unpickling this object writes the file ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def _save_reconstruction(folder: Path, points: dict) -> None:
    WeightedMeasure(points, np.ones(len(next(iter(points.values()))))).save(folder / "reconstruction")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A folder of the files the bad-input cases name: models good, foreign, broken and malicious,
    reconstructions of the wrong size, without images or with object arrays."""
    folder = tmp_path_factory.mktemp("inputs")
    torch.save({"something": torch.zeros(2)}, folder / "MODEL_NOT_OURS")
    (folder / "NOT_TORCH").write_text("junk")
    multiclass = "train --dataset digits --task multiclass --per-class 2 --arch mlp:8 --max-steps 1"
    assert main(["--quiet", *multiclass.split(), "--out", str(folder / "MULTICLASS_MODEL")]) == 0
    state = torch.load(folder / "MULTICLASS_MODEL", weights_only=True)
    next(iter(state["state_dict"].values()))[0, 0] = float("nan")
    torch.save(state, folder / "NAN_MODEL")
    torch.save({"state_dict": WritesAFile(folder / "PAYLOAD_RAN")}, folder / "MALICIOUS.pt")
    (folder / "CORRUPT.pt.ckpt").write_bytes(b"PK\x03\x04 truncated")
    rng = np.random.default_rng(0)
    _save_reconstruction(folder / "GOOD_RECON", {"image": rng.random((4, 1, 8, 8)), "label": np.arange(4)})
    _save_reconstruction(folder / "WRONG_SIZE_RECON", {"image": rng.random((4, 1, 4, 4))})
    _save_reconstruction(folder / "NO_IMAGE_RECON", {"x": rng.random((4, 3))})
    (folder / "OBJECT_RECON").mkdir()
    objects = np.array([{"a": 1}, {"b": 2}], dtype=object)
    np.savez(folder / "OBJECT_RECON" / "reconstruction.npz", weights=np.ones(2), **{"points/image": objects})
    return folder


MATCH = "match --train-data MULTICLASS_MODEL --recon"
BAD_INPUT = [
    ("train --dataset cifar10 --task vehicles-animals --data-root /nonexistent --out m.pt", "does not exist"),
    ("stationarity --model MODEL_NOT_OURS --out r", "not a model file"),
    ("stationarity --model NOT_TORCH --out r", "NOT_TORCH is not a model file written by nn-recon train"),
    ("stationarity --model MULTICLASS_MODEL --points 4 --out r", "smaller than the 10"),
    ("train --dataset digits --arch rnn:3 --out m.pt", "unknown architecture"),
    ("--threads 0 train --dataset digits --out m.pt", "--threads must be at least 1, got 0"),
    ("stationarity --model MULTICLASS_MODEL --steps -5 --out r", "--steps must be at least 1, got -5"),
    ("stationarity --model MULTICLASS_MODEL --runs -1 --out r", "--runs must be at least 1, got -1"),
    ("stationarity --model MULTICLASS_MODEL --lr 0,1e-3 --out r", "--lr must be above 0, got 0.0"),
    ("train --dataset digits --max-steps -1 --out m.pt", "--max-steps must be at least 1, got -1"),
    ("train --dataset digits --lr nan --out m.pt", "--lr must be a finite number, got nan"),
    (f"{MATCH} GOOD_RECON --downsample 0", "--downsample must be at least 1, got 0"),
    (f"{MATCH} GOOD_RECON --downsample -2", "--downsample must be at least 1, got -2"),
    (f"{MATCH} WRONG_SIZE_RECON", "reconstructions (1, 4, 4) and training images (1, 8, 8) differ in shape"),
    (f"{MATCH} NO_IMAGE_RECON", "has no 'image' array (it has x); pass the --out folder"),
    (f"{MATCH} OBJECT_RECON", "is not a reconstruction saved by nn-recon (ValueError: Object arrays"),
    ("stationarity --model NAN_MODEL --out r", "NAN_MODEL holds NaN or infinite weights (hidden.0.weight)"),
    ("stationarity --model MALICIOUS.pt --out r", "MALICIOUS.pt is not a model file written by nn-recon"),
    ("train --dataset digits --out CORRUPT.pt", "CORRUPT.pt.ckpt is not a training checkpoint"),
    ("gan --steps 0 --workdir w", "--steps must be at least 1, got 0"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT)
def test_bad_input_exits_2_with_a_message_before_any_work(inputs, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(inputs)
    before = sorted(inputs.rglob("*"))
    assert main(["--quiet", *argv.split()]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nn-recon: error: ") and err.count("\n") == 1, err  # one line, no traceback
    assert message in err and "weights_only" not in err
    assert sorted(inputs.rglob("*")) == before  # refused before it wrote (or trained) anything
    assert not (inputs / "PAYLOAD_RAN").exists()


def test_every_option_has_help_that_shows_its_default(capsys):
    parser = build_parser()
    [subcommands] = [action.choices for action in parser._actions if isinstance(action.choices, dict)]
    for name, command in {"nn-recon": parser, **subcommands}.items():
        assert issubclass(command.formatter_class, argparse.ArgumentDefaultsHelpFormatter), name
        for action in command._actions:
            if action.dest in ("help", "command"):
                continue
            assert action.help, f"{name} {action.option_strings} has no help"
            if action.default is None and not action.required:  # nothing to append: the help says it
                assert "default" in action.help, f"{name} {action.option_strings} hides its default"
    assert main(["train", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "stop after this many steps (default: 100000)" in out
