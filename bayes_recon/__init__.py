"""bayes_recon: recover weighted pseudo-data from published posterior draws."""

import jax

# The statistics an attack recovers span many orders of magnitude (N ~ 10², XᵀX ~ 10⁶); float32
# cannot resolve the divergence's minimum.
jax.config.update("jax_enable_x64", True)

from bayes_recon.pseudo import Dummy  # noqa: E402
from bayes_recon.reconstruct import ReconConfig, Reconstruction, reconstruct  # noqa: E402
from recon_core.errors import ReconError  # noqa: E402
from recon_core.measure import WeightedMeasure, linear_model_errors  # noqa: E402

__all__ = [
    "Dummy",
    "ReconConfig",
    "ReconError",
    "Reconstruction",
    "WeightedMeasure",
    "linear_model_errors",
    "reconstruct",
]
