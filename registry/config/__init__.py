"""Experiment settings: the typed schema, Hydra composition and the refusal of unsafe configs (torch-free)."""
