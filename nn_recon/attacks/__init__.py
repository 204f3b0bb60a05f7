"""Attacks that reconstruct training data from a trained network."""
