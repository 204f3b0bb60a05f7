"""Pictures and tables of a reconstruction; the CLI prints what these return, nothing here prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from nn_recon.metrics import THRESHOLDS, MatchResult


def success_table(result: MatchResult, thresholds: tuple[float, ...] = THRESHOLDS) -> str:
    """How many of the training images were reconstructed at each SSIM threshold, by how many
    different reconstructions, and those pairs' mean PSNR, as text."""
    n = len(result.ssim)
    distinct, psnr = result.distinct(thresholds), result.mean_psnr(thresholds)
    header = ("SSIM >=", "reconstructed", "of", "distinct reconstructions", "their mean PSNR (dB)")
    rows = [f"{header[0]:>8} | {header[1]:>13} | {header[2]:>4} | {header[3]:>24} | {header[4]:>20}"]
    rows.append("-" * len(rows[0]))
    rows += [
        f"{t:>8.2f} | {count:>13d} | {n:>4d} | {distinct[t]:>24d} | "
        + ("-" if psnr[t] is None else f"{psnr[t]:.2f}").rjust(20)
        for t, count in result.successes(thresholds).items()
    ]
    return "\n".join(rows)


def _tile(image: np.ndarray) -> np.ndarray:
    """(C, H, W) in [0, 1] to something ``imshow`` draws: (H, W) grey or (H, W, 3) colour."""
    return image[0] if image.shape[0] == 1 else np.transpose(image, (1, 2, 0))


def _save_grid(
    path: str | Path,
    cells: Sequence[Sequence[np.ndarray | None]],
    figsize: tuple[float, float],
    row_labels: Sequence[str] | None = None,
    titles: Mapping[tuple[int, int], str] | None = None,
    suptitle: str | None = None,
) -> Path:
    """PNG of ``cells[row][column]``, (C, H, W) images in [0, 1] drawn grey; a ``None`` cell stays blank.

    With ``row_labels`` every cell keeps its frame and each row is named on its left; without, the
    cells are bare. ``titles`` go above the cells at their (row, column).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(len(cells), len(cells[0]), figsize=figsize, squeeze=False)
    for r, row in enumerate(cells):
        for c, image in enumerate(row):
            if image is not None:
                axes[r, c].imshow(_tile(np.asarray(image)), cmap="gray", vmin=0, vmax=1)
            if row_labels is None:
                axes[r, c].axis("off")
            else:
                axes[r, c].set_xticks([])
                axes[r, c].set_yticks([])
        if row_labels is not None:
            axes[r, 0].set_ylabel(row_labels[r], fontsize=8)
    for (r, c), title in (titles or {}).items():
        axes[r, c].set_title(title, fontsize=8)
    if suptitle is not None:
        figure.suptitle(suptitle, fontsize=9)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def save_match_grid(
    result: MatchResult,
    reconstructions: np.ndarray,
    train_images: np.ndarray,
    path: str | Path,
    columns: int = 10,
    rows: int = 2,
) -> Path:
    """PNG of the best ``columns * rows`` pairs: each reconstruction above its training image, with SSIM."""
    best = result.ranked()[: columns * rows]
    rows = max(1, -(-len(best) // columns))
    cells: list[list[np.ndarray | None]] = [[None] * columns for _ in range(2 * rows)]
    titles: dict[tuple[int, int], str] = {}
    for k, position in enumerate(best):
        row, column = 2 * (k // columns), k % columns
        cells[row][column] = reconstructions[result.recon_index[position]]
        cells[row + 1][column] = train_images[result.train_index[position]]
        titles[row, column] = f"{result.ssim[position]:.2f}"
    suptitle = "best reconstructions (SSIM above) over their nearest training images"
    return _save_grid(path, cells, (columns * 1.1, rows * 2.4), titles=titles, suptitle=suptitle)


def save_informed_grid(
    path: str | Path,
    targets: np.ndarray,
    reconstructions: np.ndarray,
    oracles: np.ndarray,
    columns: int = 10,
) -> Path:
    """PNG of the first ``columns`` targets: target, reconstruction and nearest-neighbour oracle rows."""
    columns = min(columns, len(targets))
    rows = {"target": targets, "reconstruction": reconstructions, "NN oracle": oracles}
    cells = [list(images[:columns]) for images in rows.values()]
    return _save_grid(path, cells, (columns * 1.1, 3.6), row_labels=list(rows))


def metric_table(summary: dict[str, float], reference: dict[str, float] | None = None) -> str:
    """Name / value rows, with a reference column (e.g. a paper's figures) when given."""
    reference = reference or {}
    lines = [f"{'metric':24} {'value':>10} {'reference' if reference else '':>10}"]
    for name, value in summary.items():
        ref = reference.get(name)
        lines.append(f"{name:24} {value:10.4f} {'' if ref is None else f'{ref:10.4f}'}")
    return "\n".join(lines)


def save_class_grid(
    path: str | Path, images: np.ndarray, row_names: list[str], columns: int = 10, title: str | None = None
) -> Path:
    """PNG with one row per class: ``images`` (classes, n, C, H, W), the first ``columns`` of each row;
    ``title`` above them."""
    columns = min(columns, images.shape[1])
    cells = [list(row[:columns]) for row in images]
    figsize = (max(columns, 6) * 1.0, len(images) * 1.05 + (title is not None) * 0.4)
    return _save_grid(path, cells, figsize, row_labels=row_names, suptitle=title)
