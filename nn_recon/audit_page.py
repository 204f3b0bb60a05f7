"""``nn-recon audit``: one self-contained HTML page, and JSON, of what the network attacks saved.

Nothing is rerun; each attack is read from the folder its command wrote, under the file names
:mod:`nn_recon.pipeline` gives them:

- ``stationarity --out DIR``, then ``match --recon DIR``: ``reconstruction.json`` (the attack's
  settings), ``match.json`` (training images reconstructed per SSIM threshold, their mean PSNR, and
  with ``match --public`` how many beat the public baseline) and ``match.png``;
- ``reconn --out DIR``: each ``<representation>_<shadows>/`` run in it, ``reconstructions.json``
  (settings and metrics) and ``grid.png``;
- ``invert --out DIR``: ``summary.json`` (settings, the metrics' mean and sd over seeds) and ``grid.png``;
- ``glm --out DIR``: ``reconstruction.json`` (the model's settings, the optimality check and, when the
  true target was given with ``--truth``, the reconstruction's error). No image: its features are flat
  vectors.

The page is put together with :mod:`recon_core.htmlpage`: the verdict first (:func:`headline`, may the
network be published?), then per attack its tables and its grid as a data URI.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nn_recon.pipeline import (
    GRID,
    MATCH_GRID,
    MATCH_SCORES,
    RECONSTRUCTION,
    RECONSTRUCTIONS,
    SUMMARY,
)
from recon_core.errors import ReconError
from recon_core.headline import Headline, Severity, count, percent, words
from recon_core.htmlpage import escape, page, png_image, table


@dataclass(frozen=True)
class SavedAttack:
    """One attack's saved output: what was attacked, its metric table and its image grid, if it has one."""

    attack: str
    source: Path
    settings: dict[str, Any]
    header: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    grid: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "source": str(self.source),
            "settings": self.settings,
            "table": {"header": list(self.header), "rows": [list(row) for row in self.rows]},
            "grid": None if self.grid is None else str(self.grid),
        }


def _require(folder: Path, names: Sequence[str], hint: str) -> None:
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise ReconError(f"{folder} has no {', '.join(missing)}; {hint}")


def _flat(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as one level: ``{"farm": {"lr": 0.1}}`` becomes ``{"farm.lr": 0.1}``."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _stationarity(folder: Path) -> list[SavedAttack]:
    _require(
        folder,
        (f"{RECONSTRUCTION}.json", MATCH_SCORES, MATCH_GRID),
        "pass the --out folder of nn-recon stationarity after running nn-recon match --recon on it",
    )
    meta = json.loads((folder / f"{RECONSTRUCTION}.json").read_text())["meta"]
    matched = json.loads((folder / MATCH_SCORES).read_text())
    settings = {
        "model": matched["model"],
        **_flat(meta["config"]),
        "runs finished": len(meta["runs"]),
        "reconstructions kept": len(meta["run_of_point"]),
    }
    if "public_baseline" in matched:
        baseline = matched["public_baseline"]
        settings["beats the public baseline"] = baseline["beats"]
        settings["public baseline mean margin (SSIM)"] = baseline["mean_margin"]
    n = len(matched["ssim"])
    rows = [
        (float(t), count, n, matched["distinct"][t], matched["mean_psnr"][t])
        for t, count in matched["successes"].items()
    ]
    header = (
        "SSIM ≥",
        "training images reconstructed",
        "of",
        "distinct reconstructions",
        "their mean PSNR (dB)",
    )
    return [SavedAttack("stationarity", folder, settings, header, rows, folder / MATCH_GRID)]


def _informed(folder: Path) -> list[SavedAttack]:
    runs = sorted(folder.glob(f"*/{RECONSTRUCTIONS}.json"))
    if not runs:
        raise ReconError(
            f"{folder} has no <representation>_<shadows>/{RECONSTRUCTIONS}.json; "
            "pass the --out folder of nn-recon reconn"
        )
    entries = []
    for run in runs:
        _require(run.parent, (GRID,), "rerun nn-recon reconn to draw it")
        meta = json.loads(run.read_text())["meta"]
        rows = list(meta["summary"].items())
        config = _flat(meta["config"])
        entries.append(
            SavedAttack("informed", run.parent, config, ("metric", "value"), rows, run.parent / GRID)
        )
    return entries


def _inversion(folder: Path) -> list[SavedAttack]:
    _require(folder, (SUMMARY, GRID), "pass the --out folder of nn-recon invert")
    saved = json.loads((folder / SUMMARY).read_text())
    settings = {**saved["config"], "seeds": len(saved["metrics"]), "seconds": saved["seconds"]}
    if "evaluation" in saved:  # written since the user's own classifier can be attacked
        settings["evaluation model"] = saved["evaluation"]["note"]
    summary = saved["summary"]
    rows = [(name, summary[name], summary[f"{name}_sd"]) for name in saved["metrics"][0]]
    return [
        SavedAttack("inversion", folder, settings, ("metric", "mean over seeds", "sd"), rows, folder / GRID)
    ]


def _glm(folder: Path) -> list[SavedAttack]:
    _require(folder, (f"{RECONSTRUCTION}.json",), "pass the --out folder of nn-recon glm")
    saved = json.loads((folder / f"{RECONSTRUCTION}.json").read_text())
    meta = saved["meta"]
    settings = {"model": meta["model"], "known": meta["known"], **meta["settings"]}
    rows = [
        ("relative gradient norm", meta["relative_gradient_norm"]),
        ("candidate targets", saved["shapes"]["x"][0]),
    ]
    if "truth" in meta:
        rows.append(("max relative error", meta["truth"]["max_relative_error"]))
    return [SavedAttack("glm", folder, settings, ("metric", "value"), rows)]


LOADERS: dict[str, Callable[[Path], list[SavedAttack]]] = {
    "stationarity": _stationarity,
    "informed": _informed,
    "inversion": _inversion,
    "glm": _glm,
}

TITLES = {
    "stationarity": "Stationarity attack: training images from the trained weights",
    "informed": "Informed adversary: RecoNN on the released models",
    "inversion": "GAN-based model inversion of every class",
    "glm": "Informed adversary: the missing training point of a GLM, in closed form",
}

NOTES = {
    "stationarity": "Training images whose best-matching reconstruction reaches each SSIM, how many "
    "different reconstructions those matches use, and those pairs' mean PSNR (scikit-image, data range 1; "
    "– where there are none). Grid: the best reconstructions (SSIM above) over their training images.",
    "informed": "Scores over the released models' targets; success rate: the share reconstructed closer "
    "(MSE) than their nearest neighbour in the adversary's data; PSNR in dB (scikit-image, data range 1). "
    "Grid: target, reconstruction, nearest neighbour.",
    "inversion": "Top-1/top-5: the evaluation classifier's accuracy on the inverted images; knn: their "
    "feature distance to the nearest private image of their class; top1/top5_all_digits: the same accuracy "
    "under a classifier of all ten digits, which can call an image a public digit. Grid: the first seed, "
    "one row a class. The evaluation model is the protocol's, the user's or one trained on the private data "
    "(see its settings); without one only top1_target and top1_augmented, the attacked models' own "
    "accuracy, are reported.",
    "glm": "Relative gradient norm: the training objective's gradient at the released parameters on the "
    "known points plus the reconstruction, relative to the size of its terms (0: exactly optimal). "
    "Candidate targets: 2 when a model without intercept fits two. Max relative error (when the true "
    "target was given): the closest candidate's largest feature error over the largest true feature.",
}


def collect(folders: Mapping[str, Sequence[str | Path]]) -> list[SavedAttack]:
    """The entries of every folder, by attack (a key of :data:`LOADERS`)."""
    if not any(folders.values()):
        raise ReconError(f"nothing to report: give at least one of {', '.join(f'--{a}' for a in LOADERS)}")
    entries = []
    for attack, paths in folders.items():
        for folder in map(Path, paths):
            if not folder.is_dir():
                raise ReconError(f"--{attack} {folder}: no such folder")
            try:
                entries += LOADERS[attack](folder)
            except (KeyError, IndexError, TypeError, json.JSONDecodeError) as error:
                raise ReconError(
                    f"--{attack} {folder}: unreadable output ({type(error).__name__}: {error}); "
                    "rerun the command that wrote it"
                ) from error
    return entries


def to_json(entries: Sequence[SavedAttack]) -> dict[str, Any]:
    return {"attacks": [entry.to_json() for entry in entries]}


def _cell(value: Any) -> Any:
    if value is None:
        return "–"
    return f"{value:.4g}" if isinstance(value, float) else value


@dataclass(frozen=True)
class Finding:
    """One attack's result in words: ``short`` for the answer, ``reveals``, ``sure`` (how certain the
    numbers are) and ``advice`` (what the code supports against it), and how bad it is."""

    severity: Severity
    short: str
    reveals: str
    sure: str
    advice: tuple[str, ...] = ()


# RecoNN: "recovered" when its reconstructions beat, on average, the nearest neighbour in the adversary's
# own data (the bar of Balle et al.); "partly" when more than this share of targets does (with DP-GD at
# ε ≤ 100 the README's sweep measured under 1 %, i.e. chance).
INFORMED_PARTLY_ABOVE = 0.05
CLOSE_ENOUGH = 0.05  # GLM: a largest relative error below this is the missing point itself


def _stationarity_finding(entry: SavedAttack) -> Finding:
    n = entry.rows[0][2]
    counts = {row[0]: row[1] for row in entry.rows}
    top = max(counts)
    low = min(counts)
    short = f"{counts[top]} of {n} training images reconstructed at SSIM ≥ {top:g}"
    distinct = {row[0]: row[3] for row in entry.rows}
    reveals = (
        f"Stationarity attack: {short}, by {count(distinct[top], 'distinct reconstruction')} "
        f"({counts[low]} at SSIM ≥ {low:g})."
    )
    if "beats the public baseline" in entry.settings:
        reveals += (
            f" {entry.settings['beats the public baseline']} of {n} reconstructed closer (SSIM) than the "
            "best an adversary gets from public images alone (class mean, nearest public images)."
        )
    sure = (
        f"Stationarity: counted against the true training images, so certain for this attack; a lower "
        f"bound for the network ({count(entry.settings['runs finished'], 'run')} of "
        f"{count(entry.settings['steps'], 'step')}: a longer attack may reconstruct more)."
    )
    if distinct[top] < counts[top]:
        sure += (
            f" The {counts[top]} matches share {count(distinct[top], 'reconstruction')}: one reconstruction "
            "resembling several training images counts for each."
        )
    advice = (
        "Against the stationarity attack, retrain with weight decay (nn-recon train --weight-decay) or stop "
        "before convergence (--max-steps, --target-loss), then audit again (neither is measured here).",
    )
    severity: Severity = "recovered" if counts[top] else "partly" if any(counts.values()) else "not"
    return Finding(severity, short, reveals, sure, advice)


def _informed_finding(entry: SavedAttack) -> Finding:
    summary, settings = dict(entry.rows), entry.settings
    success, targets = summary["success_rate"], settings["targets"]
    short = f"{percent(success)} of the missing training images (RecoNN)"
    reveals = (
        f"Informed adversary (RecoNN, {settings['shadows']} shadow models): {percent(success)} of the "
        f"{targets} released models' missing training images reconstructed closer than their nearest "
        f"neighbour in the adversary's data; mean MSE {summary['mean_mse']:.3g}, the nearest neighbour's "
        f"{summary['mean_oracle_mse']:.3g}."
    )
    margin = 1.96 * math.sqrt(success * (1 - success) / targets)
    sure = f"RecoNN: success rate {percent(success)} ± {percent(margin)} (95 %, over {targets} targets)."
    epsilon = settings["farm.dp.epsilon"]
    now = f"ε = {epsilon:g}" if isinstance(epsilon, float) and math.isfinite(epsilon) else "no DP"
    advice = (
        f"Against the informed adversary, train with DP-GD (nn-recon shadows --epsilon; now {now}) or for "
        f"fewer epochs (--epochs; now {settings['farm.epochs']}), then audit again.",
    )
    if summary["mean_mse"] < summary["mean_oracle_mse"]:
        severity: Severity = "recovered"
    else:
        severity = "partly" if success > INFORMED_PARTLY_ABOVE else "not"
    return Finding(severity, short, reveals, sure, advice)


def _inversion_finding(entry: SavedAttack) -> Finding:
    mean = {name: value for name, value, _ in entry.rows}
    sd = {name: value for name, _, value in entry.rows}
    seeds = entry.settings["seeds"]
    if "top1" not in mean:
        accepted = percent(mean["top1_target"])
        short = "images of every class, unscored (model inversion without an evaluation model)"
        reveals = (
            f"Model inversion: images of each class, which the target itself accepts {accepted} of the "
            "time; no evaluation model scored whether they show their class (give --eval-model or "
            "--train-data)."
        )
        advice = ("Score the inversion: give nn-recon invert --eval-model, or --train-data to train one.",)
        return Finding("unsure", short, reveals, f"Inversion: mean over {seeds} seeds, unscored.", advice)
    short = f"images of every class, recognised {percent(mean['top1'])} of the time (model inversion)"
    distance = (
        "" if "knn" not in mean else f" (feature distance to the nearest private image {mean['knn']:.3g})"
    )
    reveals = (
        f"Model inversion: images of each class that the evaluation classifier recognises "
        f"{percent(mean['top1'])} of the time (top-1); they show what a class looks like, not a particular "
        f"training image{distance}."
    )
    sure = f"Inversion: mean over {seeds} seeds, top-1 sd {percent(sd['top1'])}."
    return Finding("partly" if mean["top1"] >= 0.5 else "not", short, reveals, sure)


def _glm_finding(entry: SavedAttack) -> Finding:
    rows = dict(entry.rows)
    gradient, candidates = rows["relative gradient norm"], rows["candidate targets"]
    if "max relative error" in rows:
        error = rows["max relative error"]
        exact = error < CLOSE_ENOUGH
        short = "the missing training point of the GLM" + (", exactly" if exact else "")
        reveals = f"GLM, informed adversary: the missing training point, largest relative error {error:.3g}."
    else:
        exact = gradient < 1e-6
        short = f"{candidates} candidate(s) for the GLM's missing training point"
        reveals = (
            f"GLM, informed adversary: {candidates} candidate(s) for the missing training point that make "
            "the released model optimal (no true point given to score them)."
        )
    sure = (
        f"GLM: in closed form; the candidate leaves a relative gradient norm of {gradient:.2g} "
        "(0: the released model is exactly optimal with it)."
    )
    advice = (
        "Against the GLM attack: an adversary who knows every other training point reads the last one off "
        "the released coefficients; this tool measures no mitigation for it.",
    )
    return Finding("recovered" if exact else "not", short, reveals, sure, advice)


FINDINGS: dict[str, Callable[[SavedAttack], Finding]] = {
    "stationarity": _stationarity_finding,
    "informed": _informed_finding,
    "inversion": _inversion_finding,
    "glm": _glm_finding,
}


def headline(entries: Sequence[SavedAttack]) -> Headline:
    """The verdict over every attack: the worst result decides the answer."""
    found = [FINDINGS[entry.attack](entry) for entry in entries]
    by = {s: [f.short for f in found if f.severity == s] for s in ("recovered", "partly", "unsure", "not")}
    if by["recovered"]:
        severity: Severity = "recovered"
        answer = f"Not as it is. The attacks reconstruct training data from it: {words(by['recovered'])}."
    elif by["partly"]:
        severity, answer = "partly", f"With care: {words(by['partly'])}."
    elif by["unsure"]:
        severity, answer = "unsure", f"This audit cannot tell: {words(by['unsure'])}."
    else:
        severity, answer = "not", f"As far as these attacks can tell, yes: {words(by['not'])}."
    advice = tuple(dict.fromkeys(a for f in found if f.severity != "not" for a in f.advice))
    points = (
        ("What the attacks reveal", tuple(f.reveals for f in found)),
        ("How sure the audit is", tuple(f.sure for f in found)),
        ("What to do", advice or ("Nothing by this audit's measure.",)),
    )
    return Headline(answer, severity, points)


def render(entries: Sequence[SavedAttack]) -> str:
    sections = []
    for entry in entries:
        sections += [
            f"<h2>{escape(TITLES[entry.attack])}</h2>",
            f"<p class='note'>From {escape(entry.source)}</p>",
            "<h3>What was attacked</h3>",
            table(("", ""), [(name, _cell(value)) for name, value in entry.settings.items()]),
            "<h3>What the attack recovered</h3>",
            f"<p class='note'>{escape(NOTES[entry.attack])}</p>",
            table(entry.header, [tuple(map(_cell, row)) for row in entry.rows]),
        ]
        if entry.grid is not None:
            sections.append(png_image(entry.grid.read_bytes(), f"{entry.attack} image grid"))
    return page("Leakage audit: network attacks", headline(entries), sections)
