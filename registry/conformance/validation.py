"""Validation of a plugin's components: they import, their configs fit their factories, they work in a tiny model."""
from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from registry.errors import ComponentError, LaddError, MissingResourceError
from registry.host.component import Component
from registry.host.kinds import KIND_SPECS
from registry.host.model_folders import PluginImporter
from registry.host.registry import Registry
from registry.toolkit.options import references

from .exercises import EXERCISES, ExerciseFailure, command_folders, exercise_command, exercise_importer


class NotExercised(UserWarning):
    """A component this machine cannot exercise (a download it lacks, a use no probe can make): a note, not a
    problem."""


def check_plugin(name: str, registry: Registry) -> list[str]:
    """Problems found in plugin ``name``'s components and importers (an empty list means they passed)."""
    reason = registry.unavailable(name)
    if reason is not None:
        return [reason]
    mine = [c for c in registry if c.origin.plugin == name]
    importers = [entry for entry in registry.importers.values() if entry.origin.plugin == name]
    if not mine and not importers and not any(hook.origin.plugin == name for hook in registry.command_hooks):
        loaded = sorted({c.origin.plugin for c in registry})
        return [f"plugin {name!r} registers no components, importers or commands (loaded plugins: {', '.join(loaded)})"]
    problems = [problem for component in mine for problem in _problems(component, registry)]
    return problems + [problem for entry in importers for problem in _importer_problems(entry, registry)]


def _importer_problems(entry: PluginImporter, registry: Registry) -> list[str]:
    """What goes wrong when ``entry`` imports the tiny checkpoint it offers, and the model folder is read back."""
    label = f"importer {entry.name!r} of plugin {entry.origin.plugin!r}"
    try:
        with _seeded():
            exercise_importer(entry, registry)
    except MissingResourceError as error:
        warnings.warn(f"{label}: not exercised: {error}", NotExercised, stacklevel=2)
    except LaddError as error:
        return [f"{label}: {error}"]
    except ExerciseFailure as error:
        return [error.line(label)]
    return []


def command_problems(
    plugin: str, examples: Mapping[str, Sequence[str]], run: Callable[[list[str]], None], registry: Registry
) -> list[str]:
    """What goes wrong when each of plugin ``plugin``'s commands runs on its example arguments (``examples``: command
    -> arguments) through ``run`` (ladd's command line)."""
    problems = []
    with command_folders(examples.values(), registry) as folders:
        for name, example in examples.items():
            label = f"command {name!r} of plugin {plugin!r}"
            try:
                with _seeded():
                    exercise_command(name, example, run, folders)
            except ExerciseFailure as error:
                problems.append(error.line(label))
    return problems


@contextlib.contextmanager
def _seeded() -> Iterator[None]:
    """Every weight and draw seeded: a check gives the same verdict each run."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


def _problems(component: Component, registry: Registry) -> list[str]:
    label = f"{component.kind} {component.qualified!r}"
    try:
        factory = component.factory()
    except ComponentError as error:
        return [f"{label}: {error.problem}"]
    signature_problem = _signature_problem(component, factory)
    if signature_problem:
        return [f"{label}: {signature_problem}"]
    try:
        with _seeded():
            EXERCISES[component.kind](component, registry)
    except MissingResourceError as error:
        # The defaults name a download (a pretrained model, a corpus): the plugin is fine, this machine lacks it.
        warnings.warn(f"{label}: not exercised: {error}", NotExercised, stacklevel=2)
    except ComponentError as error:
        return [f"{label}: {error.problem}"]
    except ExerciseFailure as error:
        return [error.line(label)]
    except Exception as error:
        return [f"{label}: fails when built with its default options: {type(error).__name__}: {error}"]
    return []


def _signature_problem(component: Component, factory: Callable[..., Any]) -> str | None:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        keywords: set[str] | None = None
    else:
        keywords = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    config = component.spec.config
    context = KIND_SPECS[component.kind].context
    given = (*context, *references(config))  # keywords ladd passes this factory
    required = [p for p in positional if p.default is p.empty and p.name not in given]
    if config is not None and not positional:
        return f"has config {config.__name__} but its factory takes no positional config argument"
    if config is None and required:
        return f"has no config but its factory requires {', '.join(p.name for p in required)}"
    if config is not None and len(required) > 1:
        return f"its factory requires {', '.join(p.name for p in required)}; only the config is passed positionally"
    if config is not None:
        try:
            config()
        except TypeError as error:
            return f"config {config.__name__} cannot be built from its defaults ({error}); every field needs a default"
    missing = [k for k in context if keywords is not None and k not in keywords]
    if missing:
        keys = ", ".join(missing)
        return f"its factory does not accept the keyword(s) {keys} that ladd passes to every {component.kind}"
    named = [k for k in references(config) if keywords is not None and k not in keywords]
    if named:
        return (
            f"its factory does not accept the keyword(s) {', '.join(named)}: its options name components "
            f"(refers_to), which ladd builds and passes under the option's name"
        )
    return None
