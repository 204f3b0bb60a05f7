"""Pictures and tables of a reconstruction; the CLI prints what these return, nothing here prints."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nn_recon.metrics import THRESHOLDS, MatchResult


def success_table(result: MatchResult, thresholds: tuple[float, ...] = THRESHOLDS) -> str:
    """How many of the training images were reconstructed at each SSIM threshold, as text."""
    n = len(result.ssim)
    distinct = result.distinct(thresholds)
    rows = [f"{'SSIM >=':>8} | {'reconstructed':>13} | {'of':>4} | {'distinct reconstructions':>24}"]
    rows.append("-" * len(rows[0]))
    rows += [
        f"{t:>8.2f} | {count:>13d} | {n:>4d} | {distinct[t]:>24d}"
        for t, count in result.successes(thresholds).items()
    ]
    return "\n".join(rows)


def _tile(image: np.ndarray) -> np.ndarray:
    """(C, H, W) in [0, 1] to something ``imshow`` draws: (H, W) grey or (H, W, 3) colour."""
    return image[0] if image.shape[0] == 1 else np.transpose(image, (1, 2, 0))


def save_match_grid(
    result: MatchResult,
    reconstructions: np.ndarray,
    train_images: np.ndarray,
    path: str | Path,
    columns: int = 10,
    rows: int = 2,
) -> Path:
    """PNG of the best ``columns * rows`` pairs: each reconstruction above its training image, with SSIM."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    best = result.ranked()[: columns * rows]
    rows = max(1, -(-len(best) // columns))
    figure, axes = plt.subplots(2 * rows, columns, figsize=(columns * 1.1, rows * 2.4), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    grey = {"cmap": "gray", "vmin": 0, "vmax": 1}
    for k, position in enumerate(best):
        row, column = 2 * (k // columns), k % columns
        axes[row, column].imshow(_tile(reconstructions[result.recon_index[position]]), **grey)
        axes[row, column].set_title(f"{result.ssim[position]:.2f}", fontsize=8)
        axes[row + 1, column].imshow(_tile(train_images[result.train_index[position]]), **grey)
    figure.suptitle("best reconstructions (SSIM above) over their nearest training images", fontsize=9)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def save_informed_grid(
    path: str | Path,
    targets: np.ndarray,
    reconstructions: np.ndarray,
    oracles: np.ndarray,
    columns: int = 10,
) -> Path:
    """PNG of the first ``columns`` targets: target, reconstruction and nearest-neighbour oracle rows."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    columns = min(columns, len(targets))
    rows = (("target", targets), ("reconstruction", reconstructions), ("NN oracle", oracles))
    figure, axes = plt.subplots(3, columns, figsize=(columns * 1.1, 3.6), squeeze=False)
    for r, (title, images) in enumerate(rows):
        for c in range(columns):
            axes[r, c].imshow(_tile(np.asarray(images[c])), cmap="gray", vmin=0, vmax=1)
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
        axes[r, 0].set_ylabel(title, fontsize=8)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def metric_table(summary: dict[str, float], reference: dict[str, float] | None = None) -> str:
    """Name / value rows, with a reference column (e.g. a paper's figures) when given."""
    reference = reference or {}
    lines = [f"{'metric':24} {'value':>10} {'reference' if reference else '':>10}"]
    for name, value in summary.items():
        ref = reference.get(name)
        lines.append(f"{name:24} {value:10.4f} {'' if ref is None else f'{ref:10.4f}'}")
    return "\n".join(lines)


def save_class_grid(path: str | Path, images: np.ndarray, row_names: list[str], columns: int = 10) -> Path:
    """PNG with one row per class: ``images`` (classes, n, C, H, W), the first ``columns`` of each row."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    columns = min(columns, images.shape[1])
    size = (columns * 1.0, len(images) * 1.05)
    figure, axes = plt.subplots(len(images), columns, figsize=size, squeeze=False)
    for r, row in enumerate(images):
        for c in range(columns):
            axes[r, c].imshow(_tile(np.asarray(row[c])), cmap="gray", vmin=0, vmax=1)
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
        axes[r, 0].set_ylabel(row_names[r], fontsize=8)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
