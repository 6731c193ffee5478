"""Options of the sample metrics (torch-free, for fast listing)."""

from __future__ import annotations

from dataclasses import dataclass

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range

#: Teacher weight types accepted by ``GenPPLConfig.dtype`` (names of ``torch`` dtypes).
TEACHER_DTYPES = ("float32", "float64", "bfloat16", "float16")


@dataclass
class GenPPLConfig:
    """The causal LM teacher (a Hub name or a local folder) and how it is run."""

    teacher: str = "gpt2-large"  # causal LM that scores the samples: a Hub name or a local folder
    batch_size: int = 8  # samples per teacher forward pass
    dtype: str = "float32"  # the teacher's precision
    max_length: int | None = None  # teacher tokens per forward pass, start token included; None: the teacher's context
    device: str = "auto"  # "auto": CUDA when available, else CPU

    def __post_init__(self) -> None:
        if not self.teacher:
            raise ValueError("gen_ppl teacher must name a causal language model (a Hub name or a local folder)")
        if self.batch_size < 1:
            raise ValueError(f"gen_ppl batch_size must be >= 1, got {self.batch_size}")
        if self.dtype not in TEACHER_DTYPES:
            raise ValueError(f"gen_ppl dtype must be one of {', '.join(TEACHER_DTYPES)}, got {self.dtype!r}")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"gen_ppl max_length must be >= 2 (start token + one scored token), got {self.max_length}")


#: Laws of the projection directions: App. F's Gaussian ones, or the authors' code's unit vectors.
DIRECTION_LAWS = ("gaussian", "unit")


@dataclass
class SlicedWassersteinConfig:
    """The law and number of the projection directions and the seed that fixes them."""

    # gaussian: u ~ N(0, I_S) as App. F writes; unit: u / |u|, uniform on the sphere, as the authors' code draws them.
    # Gaussian scores are about E|u| = sqrt(2) Gamma((S+1)/2) / Gamma(S/2) times the unit ones
    # (5.6 at S=32, 11.3 at S=128).
    directions: str = "gaussian"
    projections: int = 1000  # number of directions
    seed: int = 0  # fixes the directions, so scores compare across runs

    def __post_init__(self) -> None:
        if self.directions.isdigit():  # the option held the number of directions before it held their law
            raise InvalidConfigError(
                f"directions={self.directions!r} is not valid: directions is the law of the directions "
                f"({' or '.join(DIRECTION_LAWS)}) and projections their number; for a run saved by an earlier ladd, "
                f"write `directions: gaussian` and `projections: {self.directions}` under metric in its config.yaml"
            )
        check_choice("directions", self.directions, DIRECTION_LAWS)
        check_range("projections", self.projections, 1)
