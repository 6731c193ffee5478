"""Options of the built-in backbones (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range
from registry.toolkit.options import TransformerConfig

#: What each token position of a DiT attends to: every position, or its own block and the blocks before it
ATTENTIONS = ("bidirectional", "block_causal")
#: What a timestep embedding of the token time reads: "tau", the time scaled by 1000 (DiT's integer-step
#: range); "sigma", MDLM's total noise of the log-linear schedule, -log(1 - (1 - sigma_eps) tau), unscaled.
TIME_INPUTS = ("tau", "sigma")


@dataclass
class DiTConfig(TransformerConfig):
    """DiT and MM-DiT: adaLN conditioning width, whether token predictions see the token time, and the layer style."""

    cond_dim: int = 128  # width of the adaLN conditioning vector (time embedding)
    # The paper drops explicit timestep conditioning of the token denoiser; a latent channel is always conditioned.
    token_time_conditioning: bool = False
    time_input: str = "tau"  # what the token time embedding reads: tau (x1000) or sigma (MDLM's log-linear total noise)
    sigma_eps: float = 1e-3  # eps of the log-linear schedule behind time_input=sigma
    norm_eps: float = 1e-6  # LayerNorm epsilon (MDLM: 1e-5)
    norm_weight: bool = False  # LayerNorms scale by a learned weight, without bias (MDLM: true)
    attention_bias: bool = True  # biases in the attention's qkv and output projections (MDLM: false)
    # block_causal: blocks of block_size positions, each seeing itself and the blocks before it; trained on every block
    # noised at its own time given the clean blocks before it (BD3-LM), sampled block by block with an exact cache
    attention: str = "bidirectional"
    block_size: int | None = None  # positions per block of block_causal attention (it must divide the model's length)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("cond_dim", self.cond_dim, 1)
        check_choice("time_input", self.time_input, TIME_INPUTS)
        check_range("sigma_eps", self.sigma_eps, 0, 1, low_open=True, high_open=True)
        check_range("norm_eps", self.norm_eps, 0, low_open=True)
        check_choice("attention", self.attention, ATTENTIONS)
        check_range("block_size", self.block_size, 1, optional=True)
        if (self.attention == "block_causal") != (self.block_size is not None):
            raise InvalidConfigError(
                f"attention={self.attention} with block_size={self.block_size}: block_size sets the blocks of "
                "attention=block_causal; give both (e.g. attention=block_causal block_size=16) or neither"
            )
        if self.attention == "block_causal" and self.token_time_conditioning:
            raise InvalidConfigError(
                "token_time_conditioning=true with attention=block_causal: every block is trained at its own time, "
                "which one time embedding per sequence cannot tell apart; set token_time_conditioning=false"
            )


@dataclass
class MLPDenoiserConfig:
    """Residual MLP latent denoiser."""

    hidden: int = 256  # width of the residual MLP
    layers: int = 3  # number of residual blocks
    dropout: float = 0.0  # residual dropout in training
    cond_dim: int = 128  # width of the adaLN conditioning vector (time embedding)
    mlp_ratio: float = 4.0  # block hidden width = mlp_ratio * hidden

    def __post_init__(self) -> None:
        for key in ("hidden", "layers", "cond_dim"):
            check_range(key, getattr(self, key), 1)
        check_range("mlp_ratio", self.mlp_ratio, 0, low_open=True)
        check_range("dropout", self.dropout, 0, 1, high_open=True)


@dataclass
class HFMaskedLMConfig:
    """A pretrained Hugging Face masked language model (``AutoModelForMaskedLM``) as the token denoiser."""

    model: str = "google-bert/bert-base-uncased"  # Hub id, local folder or pkg:NAME holding the model and its tokenizer

    def __post_init__(self) -> None:
        if not self.model:
            raise InvalidConfigError("backbone.model must name a masked language model (a Hub id or a local folder)")


@dataclass
class LLaDAConfig:
    """A LLaMA-style bidirectional transformer (LLaDA-8B's network; the defaults are a tiny one for tests and CPUs).

    ``vocab_rows`` and ``mask_id`` describe a published network's table: its rows (LLaDA-8B: 126,464) and its own
    mask id inside it (126,336), to which ladd's mask (the id K after the data's real tokens) is mapped. Null: a
    table of the data's K tokens plus ladd's mask, as a network trained in ladd has.
    """

    hidden: int = 64  # width d (LLaDA-8B: 4096)
    layers: int = 2  # blocks (LLaDA-8B: 32)
    heads: int = 4  # attention heads (LLaDA-8B: 32); hidden must split into heads of even width (for RoPE)
    kv_heads: int | None = None  # key/value heads of grouped-query attention; None: as many as heads (LLaDA)
    mlp_hidden: int = 128  # the SwiGLU's inner width (LLaDA-8B: 12288)
    rope_theta: float = 500000.0  # RoPE base (LLaDA: 500000)
    norm_eps: float = 1e-5  # RMSNorm epsilon (LLaDA: 1e-5)
    qkv_bias: bool = False  # biases on the query, key and value projections (LLaDA: none; Dream: yes)
    # position i predicted from the state at i - 1, as a network adapted from a causal one does (Dream; LLaDA: no)
    shift_logits: bool = False
    vocab_rows: int | None = None  # ids the embedding and head hold; None: the data's K tokens plus ladd's mask
    mask_id: int | None = None  # the network's own mask id (LLaDA: 126336); None: ladd's mask K
    # keep the network's own mask in the output, as LLaDA's and Dream's code do: it takes part in every softmax and a
    # decoder proposing it leaves the position masked; false: it gets no probability (SUBS)
    mask_logit: bool = False
    cond_dim: int = 128  # with a latent channel: width of the latent stream's time conditioning
    latent_mlp_ratio: float = 4.0  # with a latent channel: MLP width of the latent stream's blocks, times hidden

    def __post_init__(self) -> None:
        for key in ("hidden", "layers", "heads", "mlp_hidden", "cond_dim"):
            check_range(f"backbone.{key}", getattr(self, key), 1)
        check_range("backbone.kv_heads", self.kv_heads, 1, optional=True)
        check_range("backbone.rope_theta", self.rope_theta, 0, low_open=True)
        check_range("backbone.norm_eps", self.norm_eps, 0, low_open=True)
        check_range("backbone.latent_mlp_ratio", self.latent_mlp_ratio, 0, low_open=True)
        check_range("backbone.vocab_rows", self.vocab_rows, 1, optional=True)
        check_range("backbone.mask_id", self.mask_id, 0, optional=True)
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise InvalidConfigError(
                f"backbone.hidden={self.hidden} must split into backbone.heads={self.heads} heads of even width "
                f"(for RoPE)"
            )
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise InvalidConfigError(
                f"backbone.kv_heads={self.kv_heads} must divide backbone.heads={self.heads} (grouped-query attention)"
            )
        if (self.vocab_rows is None) != (self.mask_id is None):
            raise InvalidConfigError(
                f"backbone.vocab_rows={self.vocab_rows} and backbone.mask_id={self.mask_id}: give both (a published "
                f"network's table and its mask) or neither (ladd's own)"
            )
        if self.mask_logit and self.mask_id is None:
            raise InvalidConfigError(
                "backbone.mask_logit=true keeps a published network's own mask in its output, but backbone.mask_id is "
                "null (ladd's own network has no mask column); set backbone.mask_id and backbone.vocab_rows, or "
                "mask_logit=false"
            )
        if self.vocab_rows is not None and self.mask_id is not None and self.mask_id >= self.vocab_rows:
            raise InvalidConfigError(
                f"backbone.mask_id={self.mask_id} is out of range: it must be < backbone.vocab_rows={self.vocab_rows}"
            )
