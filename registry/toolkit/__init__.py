"""The public toolkit for component authors: what processes, latents, samplers, backbones and encoders build on.

Import from its modules (``from registry.toolkit.tokens import per_sample``); this package imports none of
them, so ``options`` stays importable from torch-free config modules.

- ``tokens``: the mask id, per-sample broadcasting, token logits at rows, the float64 categorical draw and the
  chunked cross-entropy.
- ``sampling``: the reverse time grid, known tokens, guided token predictions and the token denoising chain.
- ``layers``: transformer building blocks (DiT blocks with adaLN-Zero and RoPE, attention, the timestep
  embedding, the vocabulary head, the final layer).
- ``options`` (torch-free): the transformer options dataclass and the loss weightings a process may offer.
- ``progress`` (torch-free): progress on stderr, a bar on a terminal and plain lines in a log.
- ``checkpoints``: an importer's reading of another library's checkpoint (its JSON config, its safetensors tensors).
"""
from __future__ import annotations

__all__ = ["checkpoints", "layers", "options", "progress", "sampling", "tokens"]
