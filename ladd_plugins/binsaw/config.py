"""Options of the binary sawtooth dataset and its sliced Wasserstein metric (torch-free, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range


@dataclass
class BinarySawtoothConfig:
    """Sequence length S, number of sawtooth periods P and minimum probability s (App. E.1)."""

    seq_len: int = 128  # S: tokens per sequence
    periods: int = 2  # P: sawtooth periods along the sequence
    floor: float = 0.01  # s: the smallest probability of a 1 (at most 0.5)
    #: training batches drawn where the model trains, in float32, each from its own seed (a stream of its own)
    draw_on_device: bool = False

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise ValueError(f"binary sawtooth seq_len must be >= 1, got {self.seq_len}")
        if self.periods < 1:
            raise ValueError(f"binary sawtooth periods must be >= 1, got {self.periods}")
        if not 0.0 <= self.floor <= 0.5:
            raise ValueError(f"binary sawtooth floor must lie in [0, 0.5], got {self.floor}")


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
