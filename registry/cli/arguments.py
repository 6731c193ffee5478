"""Argument types and options shared by several commands (torch-free, like the parser itself)."""
from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import yaml

from registry.config.settings import MAX_SAMPLING_SEED, Settings
from registry.errors import LaddError, first_line
from registry.host.registry import Registry


class Parser(argparse.ArgumentParser):
    """argparse with a bad argument reported as ladd's one line (the usage stays with --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"ladd: error: {message} (see {self.prog} --help)\n")


def positive(text: str) -> int:
    """An argument that must be a whole number >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def whole(text: str) -> int:
    """An argument that must be a whole number >= 0."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def at_least_two(text: str) -> int:
    """A count of points that must include two ends: a whole number >= 2."""
    if not text.strip().isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 2 (the path's two ends and any between)")
    return int(text)


def seed(text: str) -> int:
    """A seed: a whole number that fits the random generators' 64 bits, with room for the offsets of chunks."""
    if not text.strip().isdigit() or int(text) > MAX_SAMPLING_SEED:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to 2**63-1")
    return int(text)


def hours(text: str) -> float:
    """A positive, finite number of hours."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of hours")
    return value


def budgets(text: str) -> list[int]:
    """Comma-separated step counts, each >= 1."""
    try:
        return [positive(part) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of whole numbers >= 1 (e.g. 1,2,4,8)"
        ) from None


def add_sampler_choice(parser: argparse.ArgumentParser, purpose: str) -> None:
    """``--sampler NAME`` and repeatable ``--sampler-option KEY=VALUE``, as `sample` and `eval` take them."""
    parser.add_argument("--sampler", help=f"{purpose} with another registered sampler (e.g. a sequential one)")
    parser.add_argument("--sampler-option", action="append", default=[], metavar="KEY=VALUE", help="its option")


def chosen_sampler(args: argparse.Namespace, experiment: Any, registry: Registry) -> Any:
    """The experiment with the sampler ``--sampler`` and ``--sampler-option`` chose, checked against its model."""
    from registry.engine.assembly import with_sampler

    if args.sampler_option and not args.sampler:
        raise LaddError(
            "--sampler-option sets an option of --sampler NAME: give the sampler too, e.g. --sampler joint "
            "--sampler-option guidance=2"
        )
    if not args.sampler:
        return experiment
    return with_sampler(experiment, registry, args.sampler, options_of(args.sampler_option))


def chosen_metric(args: argparse.Namespace, experiment: Any, registry: Registry) -> Any:
    """The experiment with the metric ``--metric`` and ``--metric-option`` chose."""
    from registry.engine.assembly import with_metric

    if args.metric_option and not args.metric:
        raise LaddError("--metric-option sets an option of --metric NAME: give the metric too, e.g. --metric entropy")
    if not args.metric:
        return experiment
    return with_metric(experiment, registry, args.metric, options_of(args.metric_option))


def guided(args: argparse.Namespace, experiment: Any, registry: Registry, settings: Settings) -> Any:
    """The experiment with ``--guidance W`` set as the guidance option of ``--sampler`` or, without it, of the model's
    own sampler (``settings``), the sampler's other options kept; unchanged without ``--guidance``."""
    from registry.engine.assembly import required_selection, with_sampler

    if args.guidance is None:
        return experiment
    if args.sampler:
        name, options = args.sampler, options_of(args.sampler_option)
    else:
        name, options = required_selection(settings, "sampler")
    component = registry.get("sampler", name)
    config = component.spec.config
    if config is None or "guidance" not in {option.name for option in dataclasses.fields(config)}:
        raise LaddError(
            f"--guidance sets a sampler's classifier-free guidance, but sampler {component.name!r} has no guidance "
            "option; choose one that has (e.g. --sampler joint or --sampler sequential)"
        )
    return with_sampler(experiment, registry, name, {**options, "guidance": args.guidance})


def options_of(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` strings to a dict, values parsed as YAML scalars."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise LaddError(f"option {pair!r} must read key=value")
        try:
            options[key] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            reason = str(getattr(error, "problem", None) or first_line(error))
            raise LaddError(
                f"--sampler-option {pair!r}: {value!r} is not a value ({reason}); write a number, true/false, a "
                f"word or a list such as [1,2]"
            ) from None
    return options


def result_path(
    given: str | None, source: str, name: str, written: Callable[[Path], Iterable[Path]] = lambda path: (path,)
) -> Path:
    """Where a command that scores ``source`` writes its result ``name``: ``--out`` when ``given``, else the run folder
    itself (a run keeps its own results) or, for a model folder (shared, never written to), the current folder. Every
    file ``written`` makes of the path is checked first: a regular file or new, and outside what the command reads
    unless it is the run's own result."""
    from registry.engine.loading import is_model_folder  # torch: only when scoring
    from registry.storage.files import check_outside, check_target

    in_run = given is None and not is_model_folder(source)
    path = Path(given) if given is not None else (Path(source) if in_run else Path()) / name
    for target in written(path):
        check_target(target)
        check_outside(target, () if in_run else (source,), "--out")
    return path
