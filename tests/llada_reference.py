"""LLaDA's published layout at a tiny size, and its forward pass written from the architecture (with Fast-dLLM's
key-value cache), for import and decoding tests.

The checkpoint is what GSAI-ML/LLaDA-8B ships, scaled down: a flat ``config.json`` of ``model_type`` "llada", bf16
safetensors in shards with ``model.safetensors.index.json``, and a tokenizer whose own mask id sits inside a table
larger than the vocabulary. The forward pass below is an independent implementation of that network (it shares no
code with ladd): embedding, per block RMSNorm -> attention with rotate-half RoPE and no causal mask -> residual,
RMSNorm -> SwiGLU ``ff_out(silu(ff_proj(x)) * up_proj(x))`` -> residual, final RMSNorm, untied head.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from chat_fixtures import chat_tokenizer

P = "model.transformer."
#: the tiny network: its table has 32 rows, more than the tokenizer's 26 ids, with its mask at id 3 (<|own_mask|>)
SIZES = {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 48, "embedding_size": 32}
OWN_MASK = 3


def config(**changes) -> dict:
    """A LLaDA ``config.json`` as published, at the tiny size."""
    return {
        "model_type": "llada", "architectures": ["LLaDAModelLM"], **SIZES, "vocab_size": SIZES["embedding_size"],
        "mask_token_id": OWN_MASK, "eos_token_id": 2, "pad_token_id": 2, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "max_sequence_length": 64, "block_type": "llama", "layer_norm_type": "rms",
        "activation_type": "silu", "weight_tying": False, "include_bias": False, "include_qkv_bias": False,
        "rope": True, "alibi": False, "mlp_ratio": 4, "scale_logits": False, "multi_query_attention": None,
        "auto_map": {"AutoModel": "modeling_llada.LLaDAModelLM"}, **changes,
    }


def random_tensors(seed: int = 0, mask_weight: float = 0.0) -> dict[str, torch.Tensor]:
    """Every tensor of the tiny network, random, in bf16 as published; ``mask_weight`` adds that multiple of the head's
    mean row to its mask row, so that the network often proposes its own mask."""
    generator = torch.Generator().manual_seed(seed)
    d, inner, rows = SIZES["d_model"], SIZES["mlp_hidden_size"], SIZES["embedding_size"]

    def draw(*shape: int, scale: float = 0.3, mean: float = 0.0) -> torch.Tensor:
        return (mean + scale * torch.randn(*shape, generator=generator)).to(torch.bfloat16)

    tensors = {P + "wte.weight": draw(rows, d, scale=1.0)}
    for index in range(SIZES["n_layers"]):
        block = f"{P}blocks.{index}."
        tensors.update({
            block + "attn_norm.weight": draw(d, mean=1.0, scale=0.2), block + "q_proj.weight": draw(d, d),
            block + "k_proj.weight": draw(d, d), block + "v_proj.weight": draw(d, d),
            block + "attn_out.weight": draw(d, d), block + "ff_norm.weight": draw(d, mean=1.0, scale=0.2),
            block + "ff_proj.weight": draw(inner, d), block + "up_proj.weight": draw(inner, d),
            block + "ff_out.weight": draw(d, inner),
        })
    head = draw(rows, d).float()
    head[OWN_MASK] += mask_weight * head.mean(0)
    tensors.update({P + "ln_f.weight": draw(d, mean=1.0, scale=0.2), P + "ff_out.weight": head.to(torch.bfloat16)})
    return tensors


def write_checkpoint(folder: Path, tensors: dict[str, torch.Tensor] | None = None, shards: int = 3, **changes) -> dict:
    """The tiny checkpoint in LLaDA's layout: config, ``shards`` safetensors files with their index, the tokenizer."""
    tensors = random_tensors() if tensors is None else tensors
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config(**changes)))
    write_shards(folder, tensors, shards)
    chat_tokenizer(folder)
    return tensors


def write_shards(folder: Path, tensors: dict[str, torch.Tensor], shards: int) -> None:
    """``tensors`` in ``shards`` safetensors files named as Hugging Face names them, with their index."""
    from safetensors.torch import save_file

    names = list(tensors)
    weight_map = {}
    for shard in range(shards):
        file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        part = names[shard::shards]
        save_file({name: tensors[name] for name in part}, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, theta: float, first: int = 0) -> torch.Tensor:
    """Rotate-half RoPE of ``x`` ``[B, H, L, Dh]`` at positions first..first+L-1."""
    length, dim = x.shape[2], x.shape[3]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = torch.outer(torch.arange(first, first + length, dtype=torch.float64), inv_freq)
    angles = torch.cat([freqs, freqs], dim=-1).to(x.dtype)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * angles.cos() + rotated * angles.sin()


class Network:
    """LLaDA's network over its whole table, float32, with Fast-dLLM's key-value cache: a full pass (``cache`` a dict
    it fills with every layer's keys and values), or a pass over ``ids[:, window]`` alone whose queries attend to
    fresh keys and values there and to the cached ones everywhere else (the prefix cache: the window runs to the end;
    the dual cache: the current block)."""

    def __init__(self, tensors: dict[str, torch.Tensor], theta: float = 500000.0, eps: float = 1e-5) -> None:
        self.w = {name: t.float() for name, t in tensors.items()}
        self.theta, self.eps = theta, eps

    def __call__(self, ids: torch.Tensor, cache: dict | None = None, window: slice | None = None) -> torch.Tensor:
        w, heads = self.w, SIZES["n_heads"]
        length = ids.shape[1]
        window = slice(0, length) if window is None else slice(window.start, window.stop or length)
        x = w[P + "wte.weight"][ids[:, window]]
        batch, width, d = x.shape
        for index in range(SIZES["n_layers"]):
            b = f"{P}blocks.{index}."
            h = _rms_norm(x, w[b + "attn_norm.weight"], self.eps)

            def split(t: torch.Tensor) -> torch.Tensor:
                return t.view(batch, width, heads, d // heads).transpose(1, 2)

            q = _rope(split(h @ w[b + "q_proj.weight"].T), self.theta, window.start)
            k = _rope(split(h @ w[b + "k_proj.weight"].T), self.theta, window.start)
            v = split(h @ w[b + "v_proj.weight"].T)
            if cache is not None and width < length:  # the other positions' keys and values as the full pass left them
                k_all, v_all = cache[index][0].clone(), cache[index][1].clone()
                k_all[:, :, window], v_all[:, :, window] = k, v
                k, v = k_all, v_all
            elif cache is not None:
                cache[index] = (k, v)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // heads)  # every position sees every position
            attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, width, d)
            x = x + attended @ w[b + "attn_out.weight"].T
            h = _rms_norm(x, w[b + "ff_norm.weight"], self.eps)
            gate, up = h @ w[b + "ff_proj.weight"].T, h @ w[b + "up_proj.weight"].T
            x = x + (torch.nn.functional.silu(gate) * up) @ w[b + "ff_out.weight"].T
        return _rms_norm(x, w[P + "ln_f.weight"], self.eps) @ w[P + "ff_out.weight"].T


def reference_logits(tensors: dict[str, torch.Tensor], ids: torch.Tensor, theta: float = 500000.0,
                     eps: float = 1e-5) -> torch.Tensor:
    """LLaDA's logits over its whole table for ``ids`` ``[B, L]`` (its own mask id at masked positions), float32."""
    return Network(tensors, theta, eps)(ids)
