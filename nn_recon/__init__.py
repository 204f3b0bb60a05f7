"""nn_recon: reconstruct training data from trained networks (stationarity, informed adversary, inversion)."""
