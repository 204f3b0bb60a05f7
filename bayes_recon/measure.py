"""Moved to :mod:`recon_core.measure` (issue 16); these names stay importable for existing code."""

from recon_core.jsonio import jsonable
from recon_core.measure import Kernel, WeightedMeasure, linear_model_errors

__all__ = ["Kernel", "WeightedMeasure", "jsonable", "linear_model_errors"]
