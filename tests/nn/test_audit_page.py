"""``nn-recon audit`` on real outputs: a tiny stationarity attack matched by ``match``, a RecoNN and an
inversion run written by the functions their commands save with, and a ``glm`` run; bad input exits 2."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from nn_recon.attacks.inversion import InversionConfig
from nn_recon.attacks.reconn_attack import InformedAttackConfig
from nn_recon.audit_page import SavedAttack, headline
from nn_recon.cli import main
from nn_recon.inversion_setting import NO_EVALUATION
from nn_recon.metrics import InformedScores
from nn_recon.pipeline import AttackReport, InformedAttackResult, save_informed, save_inversion
from recon_core.headline import percent
from recon_core.measure import WeightedMeasure

RNG = np.random.default_rng(0)


def _stationarity(folder):
    model = folder / "model.pt"
    train = "train --dataset digits --per-class 4 --arch mlp:16 --max-steps 30 --first-layer-scale 0.1"
    assert main(["--quiet", *train.split(), "--out", str(model)]) == 0
    recon = folder / "stationarity"
    attack = "stationarity --points 8 --runs 1 --steps 5"
    assert main(["--quiet", *attack.split(), "--model", str(model), "--out", str(recon)]) == 0
    assert main(["--quiet", "match", "--recon", str(recon), "--train-data", str(model)]) == 0
    return recon


def _informed(folder):
    images = torch.rand(3, 5, 1, 8, 8)
    scores = InformedScores(*RNG.random((2, 5)), np.arange(5), *RNG.random((3, 5)))
    summary = {**scores.summary(), "released_test_accuracy": 0.875}
    measure = WeightedMeasure.empirical(
        {"image": images[1].numpy()}, attack="informed-reconn", config=asdict(InformedAttackConfig()),
        summary=summary,
    )  # fmt: skip
    save_informed(InformedAttackResult(measure, scores, 0.875, {}, *images), folder, InformedAttackConfig())
    return folder, summary


def _inversion(folder):
    first = {
        c: WeightedMeasure.empirical({"image": RNG.random((3, 1, 8, 8))}, name=f"c{c}") for c in range(2)
    }
    metrics = [{"top1": 0.5, "top5": 1.0, "knn": 2.0}, {"top1": 1.0, "top5": 1.0, "knn": 3.0}]
    save_inversion(AttackReport(InversionConfig(), metrics, [first, first], 4.0, NO_EVALUATION), folder)
    return folder


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit")
    informed, summary = _informed(folder / "informed")
    inputs = {
        "stationarity": _stationarity(folder),
        "informed": informed,
        "inversion": _inversion(folder / "inv"),
    }
    html, data = folder / "audit.html", folder / "audit.json"
    arguments = [a for attack, path in inputs.items() for a in (f"--{attack}", str(path))]
    assert main(["--quiet", "audit", *arguments, "--report", str(html), "--json", str(data)]) == 0
    return html, json.loads(data.read_text()), inputs, summary


def test_json_holds_each_attacks_settings_and_scores(report):
    _, data, inputs, summary = report
    stationarity, informed, inversion = data["attacks"]
    assert [a["attack"] for a in data["attacks"]] == ["stationarity", "informed", "inversion"]
    matched = json.loads((inputs["stationarity"] / "match.json").read_text())
    ssim = np.array(matched["ssim"])
    assert stationarity["settings"]["steps"] == 5 and stationarity["settings"]["model"].endswith("model.pt")
    assert [row[:3] for row in stationarity["table"]["rows"]] == [
        [t, int(np.sum(ssim >= t)), len(ssim)] for t in (0.4, 0.5, 0.6)
    ]
    psnr = np.array(matched["psnr"])
    assert [row[4] for row in stationarity["table"]["rows"]] == [
        pytest.approx(psnr[ssim >= t].mean()) if np.any(ssim >= t) else None for t in (0.4, 0.5, 0.6)
    ]
    assert "mean_psnr" in dict(informed["table"]["rows"])
    assert dict(informed["table"]["rows"]) == summary and informed["settings"]["farm.epochs"] == 100
    assert inversion["table"]["rows"] == [["top1", 0.75, pytest.approx(0.5**1.5)], ["top5", 1.0, 0.0],
                                          ["knn", 2.5, pytest.approx(0.5**0.5)]]  # fmt: skip
    assert inversion["settings"]["seeds"] == 2 and inversion["settings"]["steps"] == 1500


def test_html_shows_the_same_numbers_and_embeds_every_grid(report):
    html, data, _, _ = report
    text = html.read_text()
    assert text.count("data:image/png;base64,") == 3 and "<script" not in text and "src='http" not in text
    for attack in data["attacks"]:
        for row in attack["table"]["rows"]:
            shown = ("–" if v is None else f"{v:.4g}" if isinstance(v, float) else v for v in row)
            cells = "".join(f"<td>{v}</td>" for v in shown)
            assert f"<tr>{cells}</tr>" in text


def test_grids_render_in_headless_chromium(report, chromium_images):
    sizes, dom = chromium_images(report[0])
    assert len(sizes) == 3
    assert all(complete and width > 100 and height > 100 for complete, width, height in sizes)
    assert "training images reconstructed" in dom and "success_rate" in dom


def test_report_opens_with_the_verdict(report, verdict_first):
    html, _, inputs, summary = report
    text = html.read_text()
    verdict_first(text)
    ssim = np.array(json.loads((inputs["stationarity"] / "match.json").read_text())["ssim"])
    verdict = text[: text.index("</section>")]
    assert f"{np.sum(ssim >= 0.6)} of {len(ssim)} training images reconstructed at SSIM ≥ 0.6" in verdict
    assert f"{percent(summary['success_rate'])} of the missing training images" in verdict
    assert "Model inversion" in verdict


def test_verdict_fits_the_first_screen(report, chromium_layout):
    bottom, screenshot = chromium_layout(report[0])
    assert 0 < bottom <= 800 and screenshot.stat().st_size > 10_000


def _entry(attack, rows, **settings):
    return SavedAttack(attack, Path("out"), settings, ("",), rows)


def test_verdict_words_follow_the_results():
    none = _entry(
        "stationarity", [(0.4, 0, 20, 0, None), (0.6, 0, 20, 0, None)], steps=10, **{"runs finished": 1}
    )
    weak = _entry(
        "stationarity", [(0.4, 3, 20, 2, 12.0), (0.6, 0, 20, 0, None)], steps=10, **{"runs finished": 2}
    )
    informed = _entry("informed", [("mean_mse", 0.08), ("mean_oracle_mse", 0.03), ("success_rate", 0.01)],
                      targets=300, shadows=2000, **{"farm.dp.epsilon": 10.0, "farm.epochs": 100})  # fmt: skip
    safe = headline([none, informed])
    assert safe.severity == "not" and safe.answer.startswith("As far as these attacks can tell, yes: 0 of 20")
    assert "1 run of 10 steps" in safe.text() and dict(safe.points)["What to do"] == (
        "Nothing by this audit's measure.",
    )
    partly = headline([weak, informed])
    assert partly.severity == "partly" and "(3 at SSIM ≥ 0.4)" in partly.text()
    [advice] = dict(partly.points)["What to do"]
    assert "--weight-decay" in advice and "--max-steps" in advice
    leaked = dataclasses.replace(
        informed, rows=[("mean_mse", 0.02), ("mean_oracle_mse", 0.03), ("success_rate", 0.8)]
    )
    found = headline([weak, leaked])
    assert found.severity == "recovered" and found.answer.startswith("Not as it is.")
    assert "80\u00a0% of the missing training images (RecoNN)" in found.answer
    assert "success rate 80\u00a0% ± 4.5\u00a0% (95 %, over 300 targets)" in found.text()
    assert any(
        "DP-GD (nn-recon shadows --epsilon; now ε = 10)" in a for a in dict(found.points)["What to do"]
    )


def test_glm_run_end_to_end(tmp_path, capsys):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=30)
    ridge = Ridge(alpha=0.5).fit(x, y)
    np.savez(tmp_path / "glm.npz", family="gaussian", coef=ridge.coef_, intercept=[ridge.intercept_], l2=0.5)
    np.savez(tmp_path / "known.npz", x=x[:-1], y=y[:-1])
    np.savez(tmp_path / "truth.npz", x=x[-1], y=y[-1:])
    files = {name: str(tmp_path / f"{name}.npz") for name in ("glm", "known", "truth")}
    out = tmp_path / "glm_out"
    assert main(["--quiet", "glm", "--model", files["glm"], "--known", files["known"],
                 "--truth", files["truth"], "--out", str(out)]) == 0  # fmt: skip
    html, data = tmp_path / "out.html", tmp_path / "out.json"
    capsys.readouterr()
    assert main(["--quiet", "audit", "--glm", str(out), "--report", str(html), "--json", str(data)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert printed.startswith(
        "VERDICT: Not as it is. The attacks reconstruct training data from it: the missing"
    )
    assert "not for publication" in printed
    [entry] = json.loads(data.read_text())["attacks"]
    assert entry["attack"] == "glm" and entry["grid"] is None
    assert entry["settings"] == {"model": files["glm"], "known": files["known"], "family": "gaussian",
                                 "l2": 0.5, "intercept": True, "d": 3, "n": 29, "label_given": False,
                                 "tol": 1e-6}  # fmt: skip
    rows = dict(entry["table"]["rows"])
    assert rows["candidate targets"] == 1 and rows["relative gradient norm"] < 1e-6
    assert rows["max relative error"] < 1e-8
    text = html.read_text()
    assert "in closed form" in text and "<td>max relative error</td>" in text and "data:image" not in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "nothing to report"),
        (["--informed", "MISSING"], "MISSING: no such folder"),
        (["--stationarity", "EMPTY"], "has no reconstruction.json, match.json, match.png"),
        (["--informed", "EMPTY"], "pass the --out folder of nn-recon reconn"),
        (["--inversion", "EMPTY"], "has no summary.json, grid.png"),
        (["--inversion", "BROKEN"], "unreadable output (KeyError"),
        (["--glm", "EMPTY"], "has no reconstruction.json; pass the --out folder of nn-recon glm"),
    ],
)
def test_bad_input_exits_2(tmp_path, capsys, argv, message):
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "BROKEN").mkdir()
    (tmp_path / "BROKEN" / "summary.json").write_text("{}")
    (tmp_path / "BROKEN" / "grid.png").write_bytes(b"")
    paths = [str(tmp_path / a) if a.isupper() else a for a in argv]
    assert main(["audit", *paths, "--report", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nn-recon: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()
