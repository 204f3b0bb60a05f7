"""bayes_recon: recover weighted pseudo-data from published posterior draws.

Importing it changes no global setting: the attack's entry points switch JAX to float64 when they
are called (see :mod:`bayes_recon.precision`).
"""

from bayes_recon.precision import enable_float64
from bayes_recon.pseudo import Dummy
from bayes_recon.reconstruct import ReconConfig, Reconstruction, reconstruct
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure, linear_model_errors

__all__ = [
    "Dummy",
    "ReconConfig",
    "ReconError",
    "Reconstruction",
    "WeightedMeasure",
    "enable_float64",
    "linear_model_errors",
    "reconstruct",
]
