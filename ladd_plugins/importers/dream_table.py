"""Dream's checkpoint layout (Dream-org/Dream-v0-Base-7B, -Instruct-7B) and the table from its tensor names to ladd's
``llada`` with Dream's options.

Facts from the published checkpoints (Qwen2.5-7B's layout trained as a masked diffusion LM): a ``config.json`` of
``model_type`` "Dream" (``hidden_size``, ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``vocab_size``, ``mask_token_id``, ``rope_theta``, ``rms_norm_eps``,
``max_position_embeddings``, ...); tensors ``model.embed_tokens.weight``, per layer ``self_attn.{q,k,v}_proj`` with
biases, ``self_attn.o_proj`` without, ``mlp.{gate,up,down}_proj``, ``input_layernorm`` and ``post_attention_layernorm``,
then ``model.norm.weight`` and the untied ``lm_head.weight``; attention is bidirectional and the logit of position i is
read at i - 1. Torch-free: ``ladd import`` checks a checkpoint against this table before loading any tensor.

What a call of Dream's ``diffusion_generate`` without a generation config samples with (its code, under the
transformers 4.46.2 it pins): ``DreamGenerationConfig.from_model_config(model.config)``, which reads the model's
config, not ``generation_config.json``. That config holds the legacy generation defaults every transformers config set
then (temperature 1.0, top-k 50, top-p 1.0) unless ``config.json`` gives others; Dream's own options (``eps``,
``alg``, ``alg_temp``, ``steps``) come from ``config.json`` or Dream's defaults (1e-3, origin, none, 512).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry.errors import LaddError

from .llada_table import LLaDAShape, positive, whole

PREFIX = "model."
FAMILY = "Dream"
#: options of Dream's config that ladd's network does not have: each must keep the value Dream-7B has
_FIXED: dict[str, Any] = {
    "hidden_act": "silu", "tie_word_embeddings": False, "use_sliding_window": False, "rope_scaling": None,
}
#: per layer: Dream's name (under ``model.layers.N.``) and ladd's (under ``blocks.N.``)
BLOCK_TABLE = (
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn.q.weight"),
    ("self_attn.q_proj.bias", "attn.q.bias"),
    ("self_attn.k_proj.weight", "attn.k.weight"),
    ("self_attn.k_proj.bias", "attn.k.bias"),
    ("self_attn.v_proj.weight", "attn.v.weight"),
    ("self_attn.v_proj.bias", "attn.v.bias"),
    ("self_attn.o_proj.weight", "attn.out.weight"),
    ("post_attention_layernorm.weight", "ff_norm.weight"),
    ("mlp.gate_proj.weight", "ff.gate.weight"),
    ("mlp.up_proj.weight", "ff.up.weight"),
    ("mlp.down_proj.weight", "ff.down.weight"),
)
#: outside the layers
OUTER_TABLE = (("model.embed_tokens.weight", "embed.weight"), ("model.norm.weight", "norm.weight"),
               ("lm_head.weight", "head.weight"))
#: a plain call's sampling settings when config.json gives none: the legacy defaults of a transformers 4.46 config,
#: then DreamGenerationConfig's own
GENERATION_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0, "top_p": 1.0, "top_k": 50, "eps": 1e-3, "alg": "origin", "alg_temp": None,
}
#: where a config key given as null leaves DreamGenerationConfig's own default (from_model_config drops nulls)
_DREAM_DEFAULTS: dict[str, Any] = {
    "temperature": 0.0, "top_p": None, "top_k": None, "eps": 1e-3, "alg": "origin", "alg_temp": None,
}
#: Dream's ``alg`` -> the confidence sampler's ``remasking`` under ``schedule=dream``
ALGORITHMS = {"origin": "origin", "maskgit_plus": "low_confidence", "topk_margin": "margin", "entropy": "entropy"}


def read_shape(config: Any, where: str) -> LLaDAShape:
    """The sizes of a Dream ``config.json`` (parsed), refusing one that is not Dream's or that ladd cannot represent."""
    if not isinstance(config, Mapping) or config.get("model_type") != FAMILY:
        found = config.get("model_type") if isinstance(config, Mapping) else type(config).__name__
        raise LaddError(f"{where} is not a Dream checkpoint's config (model_type {found!r}, expected 'Dream')")
    for key, value in _FIXED.items():
        if key in config and config[key] != value:
            raise LaddError(
                f"{where}: {key} is {config[key]!r}; ladd's llada network has Dream-7B's {value!r} and cannot "
                f"represent another"
            )
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    sizes = {key: whole(config, key, where, family=FAMILY) for key in keys}
    rows, heads, hidden = sizes["vocab_size"], sizes["num_attention_heads"], sizes["hidden_size"]
    mask_id = config.get("mask_token_id")
    if isinstance(mask_id, bool) or not isinstance(mask_id, int) or not 0 <= mask_id < rows:
        raise LaddError(f"{where}: mask_token_id is {mask_id!r}; it must be an id of the table's {rows} rows")
    kv_heads = whole(config, "num_key_value_heads", where, heads, family=FAMILY)
    if hidden % heads or (hidden // heads) % 2 or heads % kv_heads:
        raise LaddError(
            f"{where}: hidden_size {hidden} does not split into {heads} heads of even width sharing {kv_heads} "
            f"key/value heads"
        )
    return LLaDAShape(
        hidden=hidden, layers=sizes["num_hidden_layers"], heads=heads, kv_heads=kv_heads,
        mlp_hidden=sizes["intermediate_size"], rows=rows, mask_id=mask_id,
        length=whole(config, "max_position_embeddings", where, 32768, family=FAMILY),
        rope_theta=positive(config, "rope_theta", where, 10_000.0, family=FAMILY),
        norm_eps=positive(config, "rms_norm_eps", where, 1e-6, family=FAMILY), qkv_bias=True, shift_logits=True,
    )


def copies(shape: LLaDAShape) -> dict[str, str]:
    """ladd's name of every tensor (under the backbone) -> Dream's full name."""
    found = {target: source for source, target in OUTER_TABLE}
    for index in range(shape.layers):
        found.update({f"blocks.{index}.{target}": f"{PREFIX}layers.{index}.{source}" for source, target in BLOCK_TABLE})
    return found


def source_shapes(shape: LLaDAShape) -> dict[str, tuple[int, ...]]:
    """Every tensor a Dream checkpoint of these sizes holds, by its full name, with its shape."""
    d, kv, inner = shape.hidden, shape.kv_heads * shape.head_dim, shape.mlp_hidden
    layer: dict[str, tuple[int, ...]] = {
        "input_layernorm.weight": (d,), "self_attn.q_proj.weight": (d, d), "self_attn.q_proj.bias": (d,),
        "self_attn.k_proj.weight": (kv, d), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.weight": (kv, d),
        "self_attn.v_proj.bias": (kv,), "self_attn.o_proj.weight": (d, d), "post_attention_layernorm.weight": (d,),
        "mlp.gate_proj.weight": (inner, d), "mlp.up_proj.weight": (inner, d), "mlp.down_proj.weight": (d, inner),
    }
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (shape.rows, d)}
    for index in range(shape.layers):
        shapes.update({f"{PREFIX}layers.{index}.{name}": size for name, size in layer.items()})
    shapes.update({"model.norm.weight": (d,), "lm_head.weight": (shape.rows, d)})
    return shapes


def generation(config: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling settings a plain ``diffusion_generate`` call takes from this ``config.json`` (see the module)."""
    return {key: _DREAM_DEFAULTS[key] if key in config and config[key] is None else config.get(key, default)
            for key, default in GENERATION_DEFAULTS.items()}


def sampler_options(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Dream's sampling settings as the confidence sampler's options under ``schedule=dream``."""
    alg = settings["alg"]
    if alg not in ALGORITHMS:
        raise LaddError(f"{where}: alg is {alg!r}; Dream's generation knows {', '.join(ALGORITHMS)}")
    top_p = settings["top_p"]
    return {
        "schedule": "dream", "remasking": ALGORITHMS[alg], "temperature": float(settings["temperature"]),
        "top_p": top_p if top_p is not None and top_p < 1 else None, "top_k": settings["top_k"],
        "eps": float(settings["eps"]), "alg_temp": settings["alg_temp"] or None,
    }
