"""BD3-LM's checkpoint layout and network written out from its published facts (kuleshov-group/bd3lms), for tests.

A BD3-LM checkpoint is MDLM's DiT in MDLM's layout (``mdlm_reference``) with a ``config.json`` of ``model_type``
"bd3lm" and the keys ``block_size``, ``cross_attn``, ``attn_backend``, ``var_min``, ``sampling_eps_min`` and
``sampling_eps_max``, plus two scalar buffers of those last two names outside the ``backbone.`` prefix. Its network
is MDLM's with an attention mask: in training the input is ``x_t`` followed by ``x0`` (2L positions, both halves at
RoPE positions 0..L-1); a noisy position sees the noisy positions of its own block and the clean blocks strictly
before it, a clean position the clean blocks up to its own; sampling runs a sequence under the block-causal mask.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from mdlm_reference import log_probs, write_checkpoint
from safetensors.torch import load_file, save_file
from torch import Tensor


def write_bd3lm(folder: Path, hidden: int, blocks: int, heads: int, cond: int, block_size: int, length: int,
                times: tuple[float, float] = (0.3, 0.8), **config: object) -> dict[str, Tensor]:
    """A BD3-LM checkpoint with random weights (MDLM's at ``seed`` 0) and the clipped times ``times``; its tensors."""
    write_checkpoint(folder, hidden, blocks, heads, cond, time_conditioning=False, length=length)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors.update({"sampling_eps_min": torch.tensor(times[0]), "sampling_eps_max": torch.tensor(times[1])})
    save_file(tensors, str(folder / "model.safetensors"))
    settings = json.loads((folder / "config.json").read_text())
    settings.update({
        "model_type": "bd3lm", "block_size": block_size, "cross_attn": True, "attn_backend": "sdpa", "var_min": True,
        "sampling_eps_min": 1e-3, "sampling_eps_max": 1.0, **config,
    })
    (folder / "config.json").write_text(json.dumps(settings))
    return tensors


def _training_mask(length: int, block: int) -> Tensor:
    q = torch.arange(2 * length)[:, None]
    k = torch.arange(2 * length)[None, :]
    q_clean, k_clean = q >= length, k >= length
    q_block, k_block = (q % length) // block, (k % length) // block
    diagonal = (q_block == k_block) & (q_clean == k_clean)
    offset = (q_block > k_block) & k_clean & ~q_clean
    causal = (q_block >= k_block) & k_clean & q_clean
    return diagonal | offset | causal


def training_log_probs(t: dict[str, Tensor], heads: int, x_t: Tensor, x0: Tensor, block: int) -> Tensor:
    """Log-probabilities ``[B, L, vocab]`` of the noisy half of the training input ``x_t ⊕ x0``."""
    length = x_t.shape[1]
    ids, positions = torch.cat([x_t, x0], dim=1), torch.arange(length).repeat(2)
    out = log_probs(t, heads, ids, torch.zeros(len(ids)), False, _training_mask(length, block), positions)
    return out[:, :length]


def sampling_log_probs(t: dict[str, Tensor], heads: int, ids: Tensor, block: int) -> Tensor:
    """Log-probabilities ``[B, N, vocab]`` of a sequence under the block-causal mask (N within the trained length)."""
    blocks = torch.arange(ids.shape[1]) // block
    return log_probs(t, heads, ids, torch.zeros(len(ids)), False, blocks[None, :] <= blocks[:, None])
