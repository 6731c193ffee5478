"""LLaDA's checkpoint layout (GSAI-ML/LLaDA-8B-Base, -Instruct) and the table from its tensor names to ladd's ``llada``.

Facts from the published checkpoints (OLMo-derived code, ``block_type`` llama): a flat ``config.json`` of
``model_type`` "llada" (``d_model``, ``n_layers``, ``n_heads``, ``n_kv_heads``, ``mlp_hidden_size``,
``embedding_size``, ``mask_token_id``, ``rope_theta``, ``rms_norm_eps``, ...; ``mlp_ratio`` is ignored when
``mlp_hidden_size`` is set); tensors ``model.transformer.wte.weight``, per block ``q_proj``, ``k_proj``, ``v_proj``,
``attn_out``, ``attn_norm``, ``ff_norm``, ``ff_proj``, ``up_proj``, ``ff_out`` (weights only), then
``model.transformer.ln_f.weight`` and the untied head ``model.transformer.ff_out.weight``; the feed-forward is
``ff_out(silu(ff_proj(x)) * up_proj(x))``. Torch-free: ``ladd import`` checks a checkpoint against this table
before loading any tensor.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from registry.errors import LaddError

PREFIX = "model.transformer."
_REQUIRED = ("d_model", "n_layers", "n_heads", "mlp_hidden_size", "mask_token_id")
#: options of LLaDA's config that ladd's network does not have: each must keep the value LLaDA-8B has
_FIXED: dict[str, Any] = {
    "block_type": "llama", "layer_norm_type": "rms", "activation_type": "silu", "weight_tying": False,
    "include_bias": False, "bias_for_layer_norm": False, "layer_norm_with_affine": True, "rope": True,
    "alibi": False, "attention_layer_norm": False, "input_emb_norm": False, "scale_logits": False,
    "multi_query_attention": None,
}


@dataclass(frozen=True)
class LLaDAShape:
    """The sizes and ids in a LLaDA checkpoint's ``config.json``."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    mlp_hidden: int
    rows: int  # ids of the embedding table and the head (embedding_size)
    mask_id: int
    length: int  # max_sequence_length
    rope_theta: float
    norm_eps: float
    qkv_bias: bool
    shift_logits: bool = False  # position i read at i - 1 (Dream's network, adapted from a causal LM)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def whole(config: Mapping[str, Any], key: str, where: str, default: Any = None, family: str = "LLaDA") -> int:
    """``config[key]`` (or ``default``), refused unless a whole number >= 1."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LaddError(f"{where}: {key} is {value!r}; a {family} config gives it as a whole number >= 1")
    return value


def positive(config: Mapping[str, Any], key: str, where: str, default: float, family: str = "LLaDA") -> float:
    """``config[key]`` (or ``default``), refused unless a number > 0."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise LaddError(f"{where}: {key} is {value!r}; a {family} config gives it as a number > 0")
    return float(value)


def read_shape(config: Any, where: str) -> LLaDAShape:
    """The sizes of a LLaDA ``config.json`` (parsed), refusing one that is not LLaDA's or that ladd cannot represent."""
    if not isinstance(config, Mapping) or config.get("model_type") != "llada":
        found = config.get("model_type") if isinstance(config, Mapping) else type(config).__name__
        raise LaddError(f"{where} is not a LLaDA checkpoint's config (model_type {found!r}, expected 'llada')")
    for key, value in _FIXED.items():
        if key in config and config[key] != value and not (value is None and config[key] is False):
            raise LaddError(
                f"{where}: {key} is {config[key]!r}; ladd's llada network has LLaDA-8B's {value!r} and cannot "
                f"represent another"
            )
    sizes = {key: whole(config, key, where) for key in _REQUIRED if key != "mask_token_id"}
    rows = whole(config, "embedding_size", where, config.get("vocab_size"))
    mask_id = config.get("mask_token_id")
    if isinstance(mask_id, bool) or not isinstance(mask_id, int) or not 0 <= mask_id < rows:
        raise LaddError(f"{where}: mask_token_id is {mask_id!r}; it must be an id of the table's {rows} rows")
    heads = sizes["n_heads"]
    kv_heads = whole(config, "n_kv_heads", where, heads)
    if sizes["d_model"] % heads or (sizes["d_model"] // heads) % 2 or heads % kv_heads:
        raise LaddError(
            f"{where}: d_model {sizes['d_model']} does not split into {heads} heads of even width sharing "
            f"{kv_heads} key/value heads"
        )
    qkv_bias = config.get("include_qkv_bias", False)
    if not isinstance(qkv_bias, bool):
        raise LaddError(f"{where}: include_qkv_bias is {qkv_bias!r}; it must be true or false")
    return LLaDAShape(
        hidden=sizes["d_model"], layers=sizes["n_layers"], heads=heads, kv_heads=kv_heads,
        mlp_hidden=sizes["mlp_hidden_size"], rows=rows, mask_id=mask_id,
        length=whole(config, "max_sequence_length", where, 4096),
        rope_theta=positive(config, "rope_theta", where, 10_000.0),
        norm_eps=positive(config, "rms_norm_eps", where, 1e-5), qkv_bias=qkv_bias,
    )


#: per block: LLaDA's name (under ``model.transformer.blocks.N.``) and ladd's (under ``blocks.N.``)
BLOCK_TABLE = (
    ("attn_norm.weight", "attn_norm.weight"),
    ("q_proj.weight", "attn.q.weight"),
    ("k_proj.weight", "attn.k.weight"),
    ("v_proj.weight", "attn.v.weight"),
    ("attn_out.weight", "attn.out.weight"),
    ("ff_norm.weight", "ff_norm.weight"),
    ("ff_proj.weight", "ff.gate.weight"),
    ("up_proj.weight", "ff.up.weight"),
    ("ff_out.weight", "ff.down.weight"),
)
QKV_BIASES = (("q_proj.bias", "attn.q.bias"), ("k_proj.bias", "attn.k.bias"), ("v_proj.bias", "attn.v.bias"))
#: outside the blocks
OUTER_TABLE = (("wte.weight", "embed.weight"), ("ln_f.weight", "norm.weight"), ("ff_out.weight", "head.weight"))


def copies(shape: LLaDAShape) -> dict[str, str]:
    """ladd's name of every tensor (under the backbone) -> LLaDA's full name."""
    block = BLOCK_TABLE + (QKV_BIASES if shape.qkv_bias else ())
    found = {target: PREFIX + source for source, target in OUTER_TABLE}
    for index in range(shape.layers):
        found.update({f"blocks.{index}.{target}": f"{PREFIX}blocks.{index}.{source}" for source, target in block})
    return found


def source_shapes(shape: LLaDAShape) -> dict[str, tuple[int, ...]]:
    """Every tensor a LLaDA checkpoint of these sizes holds, by its full name, with its shape."""
    d, kv, inner = shape.hidden, shape.kv_heads * shape.head_dim, shape.mlp_hidden
    block: dict[str, tuple[int, ...]] = {
        "attn_norm.weight": (d,), "q_proj.weight": (d, d), "k_proj.weight": (kv, d), "v_proj.weight": (kv, d),
        "attn_out.weight": (d, d), "ff_norm.weight": (d,), "ff_proj.weight": (inner, d), "up_proj.weight": (inner, d),
        "ff_out.weight": (d, inner),
    }
    if shape.qkv_bias:
        block.update({"q_proj.bias": (d,), "k_proj.bias": (kv,), "v_proj.bias": (kv,)})
    shapes: dict[str, tuple[int, ...]] = {PREFIX + "wte.weight": (shape.rows, d)}
    for index in range(shape.layers):
        shapes.update({f"{PREFIX}blocks.{index}.{name}": size for name, size in block.items()})
    shapes.update({PREFIX + "ln_f.weight": (d,), PREFIX + "ff_out.weight": (shape.rows, d)})
    return shapes


def backbone_options(shape: LLaDAShape) -> dict[str, Any]:
    """The ``llada`` options that make ladd's backbone this checkpoint's network, its own mask kept in its output as
    the family's code keeps it."""
    return {
        "hidden": shape.hidden, "layers": shape.layers, "heads": shape.heads,
        "kv_heads": None if shape.kv_heads == shape.heads else shape.kv_heads, "mlp_hidden": shape.mlp_hidden,
        "rope_theta": shape.rope_theta, "norm_eps": shape.norm_eps, "qkv_bias": shape.qkv_bias,
        "shift_logits": shape.shift_logits, "vocab_rows": shape.rows, "mask_id": shape.mask_id, "mask_logit": True,
    }
