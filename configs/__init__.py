"""Hydra configuration tree shipped with ladd (installed as the data package ``ladd_configs``)."""
