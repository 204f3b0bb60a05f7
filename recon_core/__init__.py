"""recon_core: what both attacks share, importing neither JAX nor torch.

The result type (:class:`WeightedMeasure`), the one error type for a user's mistake
(:class:`ReconError`), JSON and HTML page pieces, the command-line helpers, the progress helper and
the atomic file write. ``bayes_recon`` and ``nn_recon`` import from here; nothing here imports them.
"""

from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure

__all__ = ["ReconError", "WeightedMeasure"]
