"""MDLM's DiT written out from its published architecture (kuleshov-group/mdlm, models/dit.py), for tests.

Independent of ladd's modules: plain tensor operations on the checkpoint's own tensor names. Facts used:
the embedding is a ``[vocab, d]`` table; ``c = silu(sigma_map(sigma))`` where the sigma map is a two-layer
MLP (SiLU between) over ``[cos(sigma w), sin(sigma w)]`` with ``w_j = 10000^(-j/128)``; every block is
``x + gate_msa * attn_out(attention(rope(qkv(modulate(norm1(x))))))`` then
``x + gate_mlp * mlp(modulate(norm2(x)))`` with the six adaLN chunks of ``adaLN_modulation(c)`` in the
order shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp; LayerNorms have eps 1e-5, a weight
and no bias; qkv and attn_out have no bias; RoPE rotates halves with ``inv_freq_j = 10000^(-2j/head_dim)``
on queries and keys; the final layer modulates ``norm_final(x)`` by (shift, scale) and applies ``linear``.
SUBS: the mask's logit gets -1e6 before the log-softmax. An untimed model (time_conditioning false) sees
sigma = 0.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor

P = "backbone."


def write_checkpoint(folder: Path, hidden: int, blocks: int, heads: int, cond: int, time_conditioning: bool,
                     vocab: int = 50258, length: int = 1024, seed: int = 0, rotary: bool = True) -> dict[str, Tensor]:
    """A checkpoint in MDLM's published layout with random weights of a useful scale; returns its tensors."""
    g = torch.Generator().manual_seed(seed)

    def weight(rows: int, cols: int) -> Tensor:
        return torch.randn(rows, cols, generator=g) / math.sqrt(cols)

    def vector(n: int, scale: float = 0.05, base: float = 0.0) -> Tensor:
        return base + scale * torch.randn(n, generator=g)

    d, inner = hidden, 4 * hidden
    t = {
        P + "vocab_embed.embedding": torch.randn(vocab, d, generator=g),
        P + "sigma_map.mlp.0.weight": weight(cond, 256), P + "sigma_map.mlp.0.bias": vector(cond),
        P + "sigma_map.mlp.2.weight": weight(cond, cond), P + "sigma_map.mlp.2.bias": vector(cond),
    }
    for i in range(blocks):
        b = f"{P}blocks.{i}."
        t.update({
            b + "norm1.weight": vector(d, 0.1, 1.0), b + "attn_qkv.weight": weight(3 * d, d),
            b + "attn_out.weight": weight(d, d), b + "norm2.weight": vector(d, 0.1, 1.0),
            b + "mlp.0.weight": weight(inner, d), b + "mlp.0.bias": vector(inner),
            b + "mlp.2.weight": weight(d, inner), b + "mlp.2.bias": vector(d),
            b + "adaLN_modulation.weight": 0.5 * weight(6 * d, cond), b + "adaLN_modulation.bias": vector(6 * d, 0.2),
        })
    t.update({
        P + "output_layer.norm_final.weight": vector(d, 0.1, 1.0),
        P + "output_layer.adaLN_modulation.weight": 0.5 * weight(2 * d, cond),
        P + "output_layer.adaLN_modulation.bias": vector(2 * d, 0.2),
        P + "output_layer.linear.weight": 2 * weight(vocab, d), P + "output_layer.linear.bias": vector(vocab),
    })
    if rotary:
        t[P + "rotary_emb.inv_freq"] = 1.0 / (10_000 ** (torch.arange(0, d // heads, 2).float() / (d // heads)))
    folder.mkdir(parents=True, exist_ok=True)
    save_file(t, str(folder / "model.safetensors"))
    config = {
        "model_type": "mdlm", "architectures": ["MDLM"], "hidden_dim": hidden, "cond_dim": cond, "n_blocks": blocks,
        "n_heads": heads, "vocab_size": vocab, "model_length": length, "dropout": 0.1,
        "time_conditioning": time_conditioning, "var_min": True,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return t


def _norm(x: Tensor, weight: Tensor) -> Tensor:
    return F.layer_norm(x, (x.shape[-1],), eps=1e-5) * weight


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


def log_probs(
    t: dict[str, Tensor], heads: int, ids: Tensor, sigma: Tensor, time_conditioning: bool,
    mask: Tensor | None = None, positions: Tensor | None = None,
) -> Tensor:
    """MDLM's SUBS log-probabilities ``[B, S, vocab]`` at every position, in the dtype of the tensors ``t``.

    ``mask`` (bool ``[S, S]``, True: may attend; None: all) and ``positions`` (RoPE positions ``[S]``; ``0..S-1`` by
    default) serve networks of MDLM's layout trained with another attention (BD3-LM)."""
    dtype = t[P + "vocab_embed.embedding"].dtype
    sigma = sigma.to(dtype) if time_conditioning else torch.zeros(ids.shape[0], dtype=dtype)
    half = t[P + "sigma_map.mlp.0.weight"].shape[1] // 2
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, dtype=dtype) / half)
    angles = sigma[:, None] * freqs[None]
    features = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    h = F.silu(features @ t[P + "sigma_map.mlp.0.weight"].T + t[P + "sigma_map.mlp.0.bias"])
    c = F.silu(h @ t[P + "sigma_map.mlp.2.weight"].T + t[P + "sigma_map.mlp.2.bias"])

    x = t[P + "vocab_embed.embedding"][ids]
    batch, length, d = x.shape
    head_dim = d // heads
    inv_freq = 1.0 / (10_000 ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim))
    positions = torch.arange(length) if positions is None else positions
    angles = positions.to(dtype)[:, None] * inv_freq[None]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[None, :, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[None, :, None, :]
    i = 0
    while f"{P}blocks.{i}.norm1.weight" in t:
        b = f"{P}blocks.{i}."
        mod = (c @ t[b + "adaLN_modulation.weight"].T + t[b + "adaLN_modulation.bias"])[:, None]
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod.chunk(6, dim=-1)
        a = _norm(x, t[b + "norm1.weight"]) * (1 + scale_msa) + shift_msa
        q, k, v = (a @ t[b + "attn_qkv.weight"].T).view(batch, length, 3, heads, head_dim).unbind(2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        attended = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(batch, length, d)
        x = x + gate_msa * (attended @ t[b + "attn_out.weight"].T)
        m = _norm(x, t[b + "norm2.weight"]) * (1 + scale_mlp) + shift_mlp
        inner = F.gelu(m @ t[b + "mlp.0.weight"].T + t[b + "mlp.0.bias"], approximate="tanh")
        x = x + gate_mlp * (inner @ t[b + "mlp.2.weight"].T + t[b + "mlp.2.bias"])
        i += 1
    o = P + "output_layer."
    shift, scale = (c @ t[o + "adaLN_modulation.weight"].T + t[o + "adaLN_modulation.bias"])[:, None].chunk(2, dim=-1)
    final = _norm(x, t[o + "norm_final.weight"]) * (1 + scale) + shift
    logits = final @ t[o + "linear.weight"].T + t[o + "linear.bias"]
    logits[..., -1] += -1e6  # SUBS: the mask, the last id, gets no probability
    return logits - torch.logsumexp(logits, dim=-1, keepdim=True)
