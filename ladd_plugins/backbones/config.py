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
