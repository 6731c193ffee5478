"""Dream's published layout at a tiny size, its network and its tokenizer written from what they are, for import and
decoding tests.

The checkpoint is what Dream-org/Dream-v0-Instruct-7B ships, scaled down: a ``config.json`` of ``model_type`` "Dream",
bf16 safetensors in shards with ``model.safetensors.index.json`` under Qwen2's names, and the tokenizer as Dream ships
it: ``vocab.json``, ``merges.txt`` and a ``tokenizer_config.json`` naming a ``DreamTokenizer`` class (not shipped here,
and never run by ladd) with the added tokens, the special tokens and a chat template. The table is larger than the
tokenizer, with the mask inside it. The network below (embedding; per layer RMSNorm, attention with biased q/k/v,
grouped keys and values, rotate-half RoPE and no causal mask, RMSNorm, SwiGLU; final RMSNorm; untied head) and the
byte-level BPE share no code with ladd.
"""
from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import torch
from llada_reference import write_shards

SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 40}
#: BPE symbols (byte-level: "Ġ" is the space), then merges over them
SYMBOLS = ["h", "i", "t", "e", "r", "o", "n", "w", "a", "s", "?", "!", "Ġ", "\u010a",
           "hi", "Ġt", "Ġth", "Ġthe", "re", "on", "Ġon", "Ġone", "Ġtw", "Ġtwo", "as", "Ġw", "Ġwas"]
MERGES = ["h i", "Ġ t", "Ġt h", "Ġth e", "r e", "o n", "Ġ on", "Ġon e", "Ġt w", "Ġtw o", "a s", "Ġ w", "Ġw as"]
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"]
MASK = len(SYMBOLS) + ADDED.index("<|mask|>")
EOS = len(SYMBOLS) + ADDED.index("<|endoftext|>")
ROWS = len(SYMBOLS) + len(ADDED) + 4  # ids the tokenizer lacks, as Dream-7B's table holds
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def config(**changes) -> dict:
    """A Dream ``config.json`` as published, at the tiny size."""
    return {
        "architectures": ["DreamModel"], "auto_map": {"AutoModel": "modeling_dream.DreamModel"}, "model_type": "Dream",
        **SIZES, "vocab_size": ROWS, "mask_token_id": MASK, "pad_token_id": EOS, "bos_token_id": EOS,
        "eos_token_id": EOS, "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "rope_theta": 1e6, "rope_scaling": None, "tie_word_embeddings": False, "use_sliding_window": False,
        "sliding_window": None, "attention_dropout": 0.0, "torch_dtype": "bfloat16", **changes,
    }


def random_tensors(seed: int = 0, mask_weight: float = 0.0) -> dict[str, torch.Tensor]:
    """Every tensor of the tiny network, random, in bf16 as published; ``mask_weight`` adds that multiple of the
    hidden state's mean direction to the head's mask row, so that the mask is sometimes the argmax."""
    generator = torch.Generator().manual_seed(seed)
    d, inner = SIZES["hidden_size"], SIZES["intermediate_size"]
    kv = SIZES["num_key_value_heads"] * d // SIZES["num_attention_heads"]

    def draw(*shape: int, scale: float = 0.3, mean: float = 0.0) -> torch.Tensor:
        return (mean + scale * torch.randn(*shape, generator=generator)).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": draw(ROWS, d, scale=1.0)}
    for index in range(SIZES["num_hidden_layers"]):
        layer = f"model.layers.{index}."
        tensors.update({
            layer + "input_layernorm.weight": draw(d, mean=1.0, scale=0.2),
            layer + "self_attn.q_proj.weight": draw(d, d), layer + "self_attn.q_proj.bias": draw(d, scale=0.1),
            layer + "self_attn.k_proj.weight": draw(kv, d), layer + "self_attn.k_proj.bias": draw(kv, scale=0.1),
            layer + "self_attn.v_proj.weight": draw(kv, d), layer + "self_attn.v_proj.bias": draw(kv, scale=0.1),
            layer + "self_attn.o_proj.weight": draw(d, d),
            layer + "post_attention_layernorm.weight": draw(d, mean=1.0, scale=0.2),
            layer + "mlp.gate_proj.weight": draw(inner, d), layer + "mlp.up_proj.weight": draw(inner, d),
            layer + "mlp.down_proj.weight": draw(d, inner),
        })
    head = draw(ROWS, d).float()
    head[MASK] += mask_weight * head.mean(0)
    tensors.update({"model.norm.weight": draw(d, mean=1.0, scale=0.2), "lm_head.weight": head.to(torch.bfloat16)})
    return tensors


def tokenizer_files(folder: Path) -> None:
    """Dream's tokenizer files: vocab.json, merges.txt and tokenizer_config.json (naming the DreamTokenizer class)."""
    vocab = {symbol: index for index, symbol in enumerate(SYMBOLS)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(MERGES) + "\n", encoding="utf-8")
    added = {str(len(SYMBOLS) + i): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                                     "single_word": False, "special": True} for i, token in enumerate(ADDED)}
    settings = {
        "add_prefix_space": False, "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]}, "bos_token": "<|beginoftext|>",
        "chat_template": TEMPLATE, "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>",
        "errors": "replace", "mask_token": "<|mask|>", "model_max_length": 131072, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "DreamTokenizer", "unk_token": None,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")


def write_checkpoint(folder: Path, tensors: dict[str, torch.Tensor] | None = None, shards: int = 3,
                     **changes) -> dict:
    """The tiny checkpoint in Dream's layout: config, ``shards`` safetensors files with their index, the tokenizer."""
    tensors = random_tensors() if tensors is None else tensors
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config(**changes)))
    write_shards(folder, tensors, shards)
    tokenizer_files(folder)
    return tensors


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(torch.arange(x.shape[2], dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1).to(x.dtype)
    rotated = torch.cat([-x[..., dim // 2 :], x[..., : dim // 2]], dim=-1)
    return x * angles.cos() + rotated * angles.sin()


class Network:
    """Dream's network over its whole table, float32: the logits of every position, not shifted (Dream's code
    shifts them: position i is read at i - 1)."""

    def __init__(self, tensors: dict[str, torch.Tensor], theta: float = 1e6, eps: float = 1e-6) -> None:
        self.w = {name: t.float() for name, t in tensors.items()}
        self.theta, self.eps = theta, eps

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        w = self.w
        heads, kv_heads = SIZES["num_attention_heads"], SIZES["num_key_value_heads"]
        x = w["model.embed_tokens.weight"][ids]
        batch, length, d = x.shape
        dh = d // heads
        for index in range(SIZES["num_hidden_layers"]):
            a = f"model.layers.{index}.self_attn."
            h = _rms_norm(x, w[f"model.layers.{index}.input_layernorm.weight"], self.eps)

            def project(name: str, count: int) -> torch.Tensor:
                out = h @ w[a + f"{name}.weight"].T + w[a + f"{name}.bias"]  # noqa: B023  # called in this pass
                return out.view(batch, length, count, dh).transpose(1, 2)

            q, k, v = project("q_proj", heads), project("k_proj", kv_heads), project("v_proj", kv_heads)
            k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
            scores = _rope(q, self.theta) @ _rope(k, self.theta).transpose(-1, -2) / math.sqrt(dh)
            attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, d)
            x = x + attended @ w[a + "o_proj.weight"].T
            h = _rms_norm(x, w[f"model.layers.{index}.post_attention_layernorm.weight"], self.eps)
            mlp = f"model.layers.{index}.mlp."
            gate, up = h @ w[mlp + "gate_proj.weight"].T, h @ w[mlp + "up_proj.weight"].T
            x = x + (torch.nn.functional.silu(gate) * up) @ w[mlp + "down_proj.weight"].T
        return _rms_norm(x, w["model.norm.weight"], self.eps) @ w["lm_head.weight"].T


def _byte_characters() -> dict[int, str]:
    """GPT-2's reversible map of bytes to printable characters, which byte-level BPE merges over."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def bpe_encode(text: str) -> list[int]:
    """The ids DreamTokenizer gives ``text``: added tokens split out first, NFC, Qwen2's pre-tokenising expression,
    bytes as characters, merges applied lowest rank first."""
    import regex

    split = regex.compile(
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
        r"""|\s+(?!\S)|\s+"""
    )
    vocab = {symbol: index for index, symbol in enumerate(SYMBOLS)}
    added = {token: len(SYMBOLS) + i for i, token in enumerate(ADDED)}
    ranks = {tuple(merge.split()): rank for rank, merge in enumerate(MERGES)}
    characters = _byte_characters()
    ids: list[int] = []
    for piece in regex.split("(" + "|".join(regex.escape(t) for t in ADDED) + ")", text):
        if piece in added:
            ids.append(added[piece])
            continue
        for word in split.findall(unicodedata.normalize("NFC", piece)):
            symbols = [characters[b] for b in word.encode("utf-8")]
            while len(symbols) > 1:
                rank, i = min((ranks.get((symbols[j], symbols[j + 1]), math.inf), j) for j in range(len(symbols) - 1))
                if rank == math.inf:
                    break
                symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
            ids.extend(vocab[s] for s in symbols)
    return ids
