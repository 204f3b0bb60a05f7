"""Moved to :mod:`recon_core.errors` (issue 16); this name stays importable for existing code."""

from recon_core.errors import ReconError

__all__ = ["ReconError"]
