"""Model folders that plugins ship (tokenizers, encoders, teachers), named in configs as ``pkg:NAME``, and the
checkpoint importers they ship (``ladd import NAME``), found by ``"module:attribute"``.

A config is data and never names code: ``pkg:NAME`` resolves only a NAME that an installed, permitted
plugin declares through its ``ladd_model_folders()`` hook, as ``{NAME: "module:function"}``; the function
returns the folder. Any other ``pkg:`` value is refused before anything is imported.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from registry.contract import CHANGELOG
from registry.errors import LaddError, MissingResourceError, did_you_mean

from .migrations import written_for
from .plugin_code import FAULTS, PluginCode, describe

if TYPE_CHECKING:  # annotations only
    from .component import Origin


PREFIX = "pkg:"


def _located(locator: str, label: str, origin: Origin) -> Any:
    """What a plugin's ``"module:attribute"`` names for ``label``, imported now (missing: one line)."""
    module_name, _, attribute = locator.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise MissingResourceError(
            f"{label} (plugin {origin.plugin!r}) needs the Python package {module_name!r}, which is not installed "
            f"({error})"
        ) from None
    if not hasattr(module, attribute):
        raise MissingResourceError(f"{label} (plugin {origin.plugin!r}): {module_name} has no {attribute!r}")
    return getattr(module, attribute)


def plugin_function(locator: str, label: str, origin: Origin) -> Callable[..., Any]:
    """The function a plugin declares as ``"module:function"`` for ``label``, imported now (missing: one line)."""
    found = _located(locator, label, origin)
    if not callable(found):
        raise MissingResourceError(f"{label} (plugin {origin.plugin!r}): {locator} is not a function")
    return cast(Callable[..., Any], found)


@dataclass(frozen=True)
class ModelFolder:
    """A named folder a plugin ships, found by calling ``locator`` ("module:function") on first use."""

    name: str
    locator: str
    origin: Origin

    def path(self) -> Path:
        """The folder, checked to exist."""
        folder = Path(plugin_function(self.locator, f"model folder {PREFIX}{self.name}", self.origin)())
        if not folder.is_dir():
            raise MissingResourceError(
                f"model folder {PREFIX}{self.name} (plugin {self.origin.plugin!r}) points to {folder}, which is not a "
                "folder"
            )
        return folder


@dataclass(frozen=True)
class PluginImporter:
    """A converter of another library's checkpoints into ladd model folders, shipped by a plugin (``ladd import``)."""

    name: str
    locator: str
    origin: Origin

    @property
    def label(self) -> str:
        """``importer 'name' of plugin 'p' (distribution version)``: what messages call it."""
        origin = self.origin
        source = f" ({origin.distribution} {origin.version or ''})".rstrip() if origin.distribution else ""
        return f"importer {self.name!r} of plugin {origin.plugin!r}{source}"

    def importer(self) -> Any:
        """The ``registry.interfaces.Importer`` the locator names (a subclass, built without arguments, or an instance),
        imported on first use; anything else is refused in one line naming the plugin."""
        from registry.interfaces import Importer  # torch: only when importing a checkpoint

        found = _located(self.locator, self.label, self.origin)
        if isinstance(found, type) and issubclass(found, Importer):
            with PluginCode() as code:
                try:
                    return found()
                except FAULTS as error:
                    if not code.is_fault(error):
                        raise
                    raise LaddError(f"{self.label}: {self.locator}() failed: {describe(error)}") from error
        if isinstance(found, Importer):
            return found
        if callable(found) and not isinstance(found, type):
            raise LaddError(
                f"{self.label} {written_for(self.origin.contract)} and predates contract 3: its {self.locator} is a "
                f"function that wrote the model folder itself; since contract 3 an importer is a "
                f"registry.interfaces.Importer (read, overrides, fill, record, files) and ladd builds, checks and "
                f"writes the folder ({CHANGELOG}, contract 3, says how to port it)"
            )
        raise LaddError(
            f"{self.label}: {self.locator} is {type(found).__name__}, not a registry.interfaces.Importer (a subclass "
            f"or an instance)"
        )


def resolve(spec: str, folders: dict[str, ModelFolder]) -> str:
    """``spec`` as given, or for ``pkg:NAME`` the folder a plugin registered under NAME."""
    if not spec.startswith(PREFIX):
        return spec
    name = spec.removeprefix(PREFIX)
    if name not in folders:
        provided = ", ".join(sorted(folders)) or "none"
        raise LaddError(
            f"{spec!r} names no model folder that an installed plugin provides{did_you_mean(name, folders)} "
            f"(provided: {provided}); ladd imports nothing a config names: use a Hugging Face id, a local folder, "
            f"or a name a plugin registers with ladd_model_folders()"
        )
    return str(folders[name].path())
