"""bayes_recon: recover weighted pseudo-data from published posterior draws."""

from bayes_recon.measure import WeightedMeasure, linear_model_errors

__all__ = ["WeightedMeasure", "linear_model_errors"]
