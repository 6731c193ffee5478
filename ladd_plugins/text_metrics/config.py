"""Options of the text sample metrics (torch-free, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass

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
