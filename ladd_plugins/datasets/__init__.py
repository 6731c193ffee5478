"""Datasets: the randomly shifted binary sawtooth (App. E.1) and text corpora."""
from __future__ import annotations

from registry import ComponentSpec

from .binsaw.config import BinarySawtoothConfig
from .text.config import TextDatasetConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("dataset", "binsaw", "ladd_plugins.datasets.binsaw.dataset:BinarySawtooth", BinarySawtoothConfig,
                  "randomly shifted binary sawtooth (seeded infinite stream)"),
    ComponentSpec("dataset", "text", "ladd_plugins.datasets.text.dataset:TextDataset", TextDatasetConfig,
                  "text from HF datasets or local files, tokenised, packed (wrap/pad) and cached"),
]
