"""Range checks for option values: one line naming the key, the value and the valid range."""
from __future__ import annotations

import math
from collections.abc import Iterable

from .errors import InvalidConfigError


def check_range(
    key: str,
    value: float | None,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> None:
    """Raise InvalidConfigError unless ``value`` is a finite number within the bounds (None only when optional)."""
    if value is None and optional:
        return
    valid = _describe(low, high, low_open, high_open) + (", or null" if optional else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        raise InvalidConfigError(f"{key}={value!r} is not valid: it must be a finite number {valid}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        raise InvalidConfigError(f"{key}={value!r} is out of range: it must be {valid}")


def check_each(
    key: str, values: Iterable[float], low: float | None = None, high: float | None = None, **bounds: bool
) -> None:
    """``check_range`` for every element of a list option, naming its index; an empty list is refused."""
    values = list(values)
    if not values:
        raise InvalidConfigError(f"{key}=[] is not valid: it needs at least one value")
    for index, value in enumerate(values):
        check_range(f"{key}[{index}]", value, low, high, **bounds)


def check_choice(key: str, value: object, choices: Iterable[object]) -> None:
    """Raise InvalidConfigError unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise InvalidConfigError(f"{key}={value!r} is not valid: it must be one of {', '.join(map(str, choices))}")


def _describe(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high}"
    return "(any value)"
