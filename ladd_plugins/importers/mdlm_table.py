"""MDLM's DiT checkpoint layout and the table from its tensor names to those of ladd's ``dit`` backbone.

Facts from MDLM's ``models/dit.py`` (kuleshov-group/mdlm): every LayerNorm has epsilon 1e-5 and a weight
but no bias; the attention's qkv and output projections have no biases; one adaLN projection per block
gives six chunks in the order shift, scale, gate of the attention then shift, scale, gate of the MLP;
the final layer's adaLN gives shift then scale; the output layer has a row for every id, the mask (the
last id) included, which SUBS removes from the softmax. ladd's blocks keep one adaLN projection per
branch and a head over the real tokens only, so the six chunks are split in two halves and the mask row
is dropped. Torch-free: ``ladd import`` checks a checkpoint against this table before loading any tensor.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from registry.errors import LaddError

PREFIX = "backbone."
#: GPT-2's 50,257 tokens plus MDLM's mask appended at id 50,257
GPT2_TOKENS = 50257
FREQUENCY_DIM = 256  # width of the sinusoidal features MDLM's sigma map reads
ROTARY_BUFFER = "rotary_emb.inv_freq"
#: the sizes an MDLM config.json gives, each a whole number >= 1
REQUIRED = ("hidden_dim", "cond_dim", "n_blocks", "n_heads", "vocab_size", "model_length")


@dataclass(frozen=True)
class MDLMShape:
    """The sizes in an MDLM checkpoint's ``config.json``."""

    hidden: int
    cond: int
    blocks: int
    heads: int
    vocab: int  # ids including the mask
    length: int
    time_conditioning: bool
    dropout: float = 0.1

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def read_shape(config: Mapping[str, Any], where: str) -> MDLMShape:
    """The sizes of an MDLM ``config.json`` (parsed, with every key of ``REQUIRED`` a whole number >= 1), refusing one
    that ladd cannot represent."""
    conditioning, dropout = config.get("time_conditioning", False), config.get("dropout", 0.1)
    if not isinstance(conditioning, bool):
        raise LaddError(f"{where}: time_conditioning is {conditioning!r}; it must be true or false")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise LaddError(f"{where}: dropout is {dropout!r}; it must be a number in [0, 1)")
    shape = MDLMShape(
        config["hidden_dim"], config["cond_dim"], config["n_blocks"], config["n_heads"], config["vocab_size"],
        config["model_length"], conditioning, float(dropout),
    )
    if shape.hidden % shape.heads or shape.head_dim % 2:
        raise LaddError(f"{where}: hidden_dim {shape.hidden} does not split into {shape.heads} heads of even width")
    if shape.vocab != GPT2_TOKENS + 1:
        raise LaddError(
            f"{where}: vocab_size {shape.vocab} is not GPT-2's {GPT2_TOKENS} tokens plus the mask at id {GPT2_TOKENS}; "
            f"ladd imports MDLM checkpoints whose vocabulary ends with the mask ({GPT2_TOKENS + 1} ids)"
        )
    return shape


Rows = Callable[[MDLMShape], tuple[int, int] | None]


def whole(shape: MDLMShape) -> None:
    """Every row."""
    return None


def attention_chunks(shape: MDLMShape) -> tuple[int, int]:
    """The first three adaLN chunks: shift, scale and gate of the attention."""
    return 0, 3 * shape.hidden


def mlp_chunks(shape: MDLMShape) -> tuple[int, int]:
    """The last three adaLN chunks: shift, scale and gate of the MLP."""
    return 3 * shape.hidden, 6 * shape.hidden


def real_tokens(shape: MDLMShape) -> tuple[int, int]:
    """The output rows of the real tokens: the mask's (the last) has no logit in ladd."""
    return 0, shape.vocab - 1


#: per block: MDLM's name, ladd's name (under ``trunk.blocks.N.``) and the rows taken
BLOCK_TABLE: tuple[tuple[str, str, Rows], ...] = (
    ("norm1.weight", "norm.weight", whole),
    ("attn_qkv.weight", "qkv.weight", whole),
    ("attn_out.weight", "proj.weight", whole),
    ("adaLN_modulation.weight", "adaln.proj.weight", attention_chunks),
    ("adaLN_modulation.bias", "adaln.proj.bias", attention_chunks),
    ("norm2.weight", "mlp.norm.weight", whole),
    ("mlp.0.weight", "mlp.mlp.0.weight", whole),
    ("mlp.0.bias", "mlp.mlp.0.bias", whole),
    ("mlp.2.weight", "mlp.mlp.2.weight", whole),
    ("mlp.2.bias", "mlp.mlp.2.bias", whole),
    ("adaLN_modulation.weight", "mlp.adaln.proj.weight", mlp_chunks),
    ("adaLN_modulation.bias", "mlp.adaln.proj.bias", mlp_chunks),
)
#: outside the blocks
OUTER_TABLE: tuple[tuple[str, str, Rows], ...] = (
    ("vocab_embed.embedding", "embed.weight", whole),
    ("output_layer.norm_final.weight", "final.norm.weight", whole),
    ("output_layer.adaLN_modulation.weight", "final.adaln.proj.weight", whole),
    ("output_layer.adaLN_modulation.bias", "final.adaln.proj.bias", whole),
    ("output_layer.linear.weight", "final.head.weight", real_tokens),
    ("output_layer.linear.bias", "final.head.bias", real_tokens),
)
#: MDLM's sigma map; ladd's time embedding of a time-conditioned checkpoint (an untimed one feeds it sigma = 0)
SIGMA_MAP = ("sigma_map.mlp.0.weight", "sigma_map.mlp.0.bias", "sigma_map.mlp.2.weight", "sigma_map.mlp.2.bias")
TIME_EMBED = ("time_embed.mlp.0.weight", "time_embed.mlp.0.bias", "time_embed.mlp.2.weight", "time_embed.mlp.2.bias")
#: the learned constant conditioning of ladd's untimed dit, set to MDLM's sigma map at sigma = 0
CONDITION = "condition"


@dataclass(frozen=True)
class Copy:
    """One ladd tensor: the rows ``rows`` (None: all) of MDLM's tensor ``source``."""

    target: str
    source: str
    rows: tuple[int, int] | None


def copies(shape: MDLMShape) -> list[Copy]:
    """Every ladd tensor taken from one MDLM tensor, names without the ``backbone.`` prefix (the sigma map aside)."""
    found = [Copy(target, source, rows(shape)) for source, target, rows in OUTER_TABLE]
    for block in range(shape.blocks):
        found += [
            Copy(f"trunk.blocks.{block}.{target}", f"blocks.{block}.{source}", rows(shape))
            for source, target, rows in BLOCK_TABLE
        ]
    if shape.time_conditioning:
        found += [Copy(target, source, None) for source, target in zip(SIGMA_MAP, TIME_EMBED, strict=True)]
    return found


def source_shapes(shape: MDLMShape) -> dict[str, tuple[int, ...]]:
    """Every tensor an MDLM checkpoint of these sizes holds, without the prefix, with its shape (in table order)."""
    d, c, inner = shape.hidden, shape.cond, 4 * shape.hidden
    block = {
        "norm1.weight": (d,), "attn_qkv.weight": (3 * d, d), "attn_out.weight": (d, d),
        "adaLN_modulation.weight": (6 * d, c), "adaLN_modulation.bias": (6 * d,), "norm2.weight": (d,),
        "mlp.0.weight": (inner, d), "mlp.0.bias": (inner,), "mlp.2.weight": (d, inner), "mlp.2.bias": (d,),
    }
    shapes = {
        "vocab_embed.embedding": (shape.vocab, d),
        "sigma_map.mlp.0.weight": (c, FREQUENCY_DIM), "sigma_map.mlp.0.bias": (c,),
        "sigma_map.mlp.2.weight": (c, c), "sigma_map.mlp.2.bias": (c,),
    }
    for index in range(shape.blocks):
        shapes.update({f"blocks.{index}.{name}": size for name, size in block.items()})
    shapes.update({
        "output_layer.norm_final.weight": (d,),
        "output_layer.adaLN_modulation.weight": (2 * d, c), "output_layer.adaLN_modulation.bias": (2 * d,),
        "output_layer.linear.weight": (shape.vocab, d), "output_layer.linear.bias": (shape.vocab,),
    })
    return shapes


def check_layout(found: Mapping[str, tuple[int, ...]], shape: MDLMShape, where: str) -> None:
    """Refuse, naming the first, a tensor missing, of another shape, or extra; the rotary buffer may be absent.

    The number of blocks is compared first: the table is only built for as many blocks as the file holds.
    """
    blocks = {int(part) for name in found for part in name.split(".")[2:3] if name.startswith(f"{PREFIX}blocks.")
              and part.isdigit()}
    if len(blocks) != shape.blocks:  # before the table is built for n_blocks blocks, which may be absurd
        raise LaddError(
            f"{where} holds {len(blocks)} blocks but config.json's n_blocks is {shape.blocks}; the config and the "
            f"weights disagree"
        )
    expected = source_shapes(shape)
    for name, size in expected.items():
        held = found.get(PREFIX + name)
        if held is None:
            raise LaddError(
                f"{where} lacks the tensor {PREFIX + name} of an MDLM checkpoint; it is not one, or it is damaged"
            )
        if tuple(held) != size:
            raise LaddError(
                f"{where}: {PREFIX + name} has shape {list(held)} but config.json's sizes give {list(size)}; "
                f"the config and the weights disagree"
            )
    rotary = found.get(PREFIX + ROTARY_BUFFER)
    if rotary is not None and tuple(rotary) != (shape.head_dim // 2,):
        raise LaddError(
            f"{where}: {PREFIX + ROTARY_BUFFER} has shape {list(rotary)}, not [{shape.head_dim // 2}] of heads "
            f"of width {shape.head_dim}"
        )
    extra = sorted(set(found) - {PREFIX + name for name in expected} - {PREFIX + ROTARY_BUFFER})
    if extra:
        raise LaddError(f"{where} holds {extra[0]}, which MDLM's DiT does not have; it is not an MDLM DiT checkpoint")


def backbone_options(shape: MDLMShape) -> dict[str, Any]:
    """The ``dit`` options that make ladd's backbone MDLM's network of these sizes."""
    options: dict[str, Any] = {
        "hidden": shape.hidden, "layers": shape.blocks, "heads": shape.heads, "cond_dim": shape.cond,
        "mlp_ratio": 4.0, "dropout": shape.dropout, "norm_eps": 1e-5, "norm_weight": True, "attention_bias": False,
        "token_time_conditioning": shape.time_conditioning,
    }
    if shape.time_conditioning:
        options["time_input"] = "sigma"
    return options
