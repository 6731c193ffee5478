"""Datasets: the randomly shifted binary sawtooth (App. E.1), text corpora and instruction data."""
from __future__ import annotations

from registry import ComponentSpec

from .binsaw.config import BinarySawtoothConfig
from .chat.config import ChatDatasetConfig
from .text.config import TextDatasetConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("dataset", "binsaw", "ladd_plugins.datasets.binsaw.dataset:BinarySawtooth", BinarySawtoothConfig,
                  "randomly shifted binary sawtooth (seeded infinite stream)"),
    ComponentSpec("dataset", "text", "ladd_plugins.datasets.text.dataset:TextDataset", TextDatasetConfig,
                  "text from HF datasets or local files, tokenised, packed (wrap/pad) and cached"),
    ComponentSpec("dataset", "chat", "ladd_plugins.datasets.chat.dataset:ChatDataset", ChatDatasetConfig,
                  "prompt/response pairs and chat transcripts in a chat template, EOS-padded, prompts kept clean"),
]
