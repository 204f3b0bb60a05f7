"""The three commands end to end on the embedded digits, and bad input exiting 2 with a message."""

import json

import pytest
import torch

from nn_recon.cli import main


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
    assert "SSIM >=" in out and (recon / "match.png").exists()
    assert len(json.loads(summary.read_text())["ssim"]) == 16


BAD_INPUT = [
    ("train --dataset cifar10 --task vehicles-animals --data-root /nonexistent --out m.pt", "does not exist"),
    ("stationarity --model MODEL_NOT_OURS --out r", "not a model file"),
    ("stationarity --model NOT_TORCH --out r", "NOT_TORCH is not a model file written by nn-recon train"),
    ("stationarity --model MULTICLASS_MODEL --points 4 --out r", "smaller than the 10"),
    ("train --dataset digits --arch rnn:3 --out m.pt", "unknown architecture"),
    ("--threads 0 train --dataset digits --out m.pt", "--threads must be at least 1, got 0"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    torch.save({"something": torch.zeros(2)}, tmp_path / "MODEL_NOT_OURS")
    (tmp_path / "NOT_TORCH").write_text("junk")
    multiclass = "train --dataset digits --task multiclass --per-class 2 --arch mlp:8 --max-steps 1"
    assert main(["--quiet", *multiclass.split(), "--out", "MULTICLASS_MODEL"]) == 0
    assert main(["--quiet", *argv.split()]) == 2
    assert message in capsys.readouterr().err
