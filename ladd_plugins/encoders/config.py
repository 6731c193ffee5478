"""Options of the encoders (torch-free, so listing components stays fast)."""
from __future__ import annotations

from dataclasses import dataclass, field

from registry.errors import InvalidConfigError
from registry.ranges import check_range
from registry.toolkit.options import LOCAL_PATH, TransformerConfig


@dataclass
class DiTEncoderConfig(TransformerConfig):
    """A DiT encoder read at the M rightmost positions, projected to d_l, with encoder-input dropout."""

    length: int = 1  # M: latent vectors, read at the M rightmost positions
    width: int = 32  # d_l: width of each latent vector
    input_dropout_max: float = 0.0  # p_r ~ U[0, input_dropout_max]; the paper uses 0.9 when enabled

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("length", self.length, 1)
        check_range("width", self.width, 1)
        check_range("input_dropout_max", self.input_dropout_max, 0, 1)


#: Ways ``PretrainedEncoderConfig.pooling`` reduces S token states to M < S latents.
POOLINGS = ("chunk_mean", "chunk_mean_eos")
#: Precisions of the frozen model; "auto" is bfloat16 on CUDA and float32 elsewhere.
ENCODER_DTYPES = ("auto", "bfloat16", "float32")


@dataclass
class PretrainedEncoderConfig:
    """A frozen Hugging Face text model: last-layer states, first d_l dims (Matryoshka), L2-normalised."""

    model: str = "Qwen/Qwen3-Embedding-0.6B"  # Hub name or local folder holding the model and its tokenizer
    length: int | None = None  # M; None: M = S, one latent per token (token-aligned)
    width: int = 32  # d_l: the first d_l hidden dimensions
    pooling: str = "chunk_mean_eos"  # used when M < S (App. D: the last latent is the final position's state)
    dtype: str = "auto"  # the frozen model's precision: auto (bfloat16 on CUDA, else float32), bfloat16, float32
    input_dropout_max: float = 0.0  # p_r ~ U[0, input_dropout_max], as for the DiT encoder
    # store features per sequence on disk (needs input_dropout_max = 0); never read from a saved config
    cache_dir: str | None = field(default=None, metadata=LOCAL_PATH)
    cache_entries: int = 4096  # features kept in memory in front of the disk store

    def __post_init__(self) -> None:
        if not self.model:
            raise InvalidConfigError("encoder.model must name a Hugging Face model (a Hub name or a local folder)")
        if (self.length is not None and self.length < 1) or self.width < 1:
            raise InvalidConfigError(f"encoder.length={self.length} and encoder.width={self.width} must be >= 1")
        if self.pooling not in POOLINGS:
            raise InvalidConfigError(f"encoder.pooling={self.pooling!r}; valid: {', '.join(POOLINGS)}")
        if self.dtype not in ENCODER_DTYPES:
            raise InvalidConfigError(f"encoder.dtype={self.dtype!r}; valid: {', '.join(ENCODER_DTYPES)}")
        if not 0.0 <= self.input_dropout_max <= 1.0:
            raise InvalidConfigError(f"encoder.input_dropout_max={self.input_dropout_max} must lie in [0, 1]")
        if self.cache_dir is not None and self.input_dropout_max > 0:
            raise InvalidConfigError(
                "encoder.cache_dir stores one feature set per sequence, but encoder-input dropout "
                f"(input_dropout_max={self.input_dropout_max}) changes the features at every step: "
                "set encoder.input_dropout_max=0 or encoder.cache_dir=null"
            )
        if self.cache_entries < 0:
            raise InvalidConfigError(f"encoder.cache_entries={self.cache_entries} must be >= 0")
