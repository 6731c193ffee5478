"""Model folders that plugins ship (tokenizers, encoders, teachers), named in configs as ``pkg:NAME``, and the
checkpoint importers they ship (``ladd import NAME``), found by ``"module:attribute"``.

A config is data and never names code: ``pkg:NAME`` resolves only a NAME that an installed, permitted
plugin declares through its ``ladd_model_folders()`` hook, as ``{NAME: "module:function"}``; the function
returns the folder. Any other ``pkg:`` value is refused before anything is imported.

A model folder may carry files its components read (an imported model's tokenizer): its config names them
``model:PATH``, resolved inside the folder while ladd builds from it (:func:`reading`), wherever it was moved.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar, cast

from registry.contract import CHANGELOG
from registry.errors import ComponentClashError, LaddError, MissingResourceError, did_you_mean

from .component import qualify
from .migrations import written_for
from .plugin_code import FAULTS, PluginCode, describe

if TYPE_CHECKING:  # annotations only
    from .component import Origin


PREFIX = "pkg:"
MODEL_PREFIX = "model:"
_READING: ContextVar[Path | None] = ContextVar("ladd_model_folder_read", default=None)
D = TypeVar("D", bound="Declared")


@contextmanager
def reading(folder: str | Path) -> Iterator[None]:
    """While a model folder's config is built: ``model:PATH`` in it names ``PATH`` inside ``folder``."""
    token = _READING.set(Path(folder))
    try:
        yield
    finally:
        _READING.reset(token)


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
class Declared:
    """Something a plugin declares by name as ``"module:attribute"`` (a model folder, an importer)."""

    name: str
    locator: str
    origin: Origin

    @property
    def qualified(self) -> str:
        """``PLUGIN:NAME``: the name that selects this one whatever else is installed."""
        return qualify(self.origin.plugin, self.name)


def select(declared: Mapping[str, D], name: str, what: str) -> D | None:
    """The entry of ``declared`` (keyed by qualified name) that ``name`` selects, bare or ``PLUGIN:NAME``; None for
    none. A bare name that several plugins declare is refused in one line naming the qualified names."""
    if name in declared:
        return declared[name]
    found = [entry for entry in declared.values() if entry.name == name]
    if len(found) > 1:
        raise ComponentClashError(
            f"{what} {name!r} is declared by several plugins: {', '.join(repr(e.origin.plugin) for e in found)}; "
            f"name the one you mean: {' or '.join(entry.qualified for entry in found)}"
        )
    return found[0] if found else None


def names(declared: Mapping[str, Declared]) -> list[str]:
    """The sorted bare names of ``declared``."""
    return sorted({entry.name for entry in declared.values()})


@dataclass(frozen=True)
class ModelFolder(Declared):
    """A named folder a plugin ships, found by calling ``locator`` ("module:function") on first use."""

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
class PluginImporter(Declared):
    """A converter of another library's checkpoints into ladd model folders, shipped by a plugin (``ladd import``)."""

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
    """``spec`` as given, for ``pkg:NAME`` the folder a plugin registered under NAME, for ``model:PATH`` that path in
    the model folder being read."""
    if spec.startswith(MODEL_PREFIX):
        return str(_in_model_folder(spec))
    if not spec.startswith(PREFIX):
        return spec
    name = spec.removeprefix(PREFIX)
    folder = select(folders, name, "model folder")
    if folder is None:
        provided = names(folders)
        raise LaddError(
            f"{spec!r} names no model folder that an installed plugin provides{did_you_mean(name, provided)} "
            f"(provided: {', '.join(provided) or 'none'}); ladd imports nothing a config names: use a Hugging Face "
            f"id, a local folder, or a name a plugin registers with ladd_model_folders()"
        )
    return str(folder.path())


def _in_model_folder(spec: str) -> Path:
    folder, relative = _READING.get(), PurePosixPath(spec.removeprefix(MODEL_PREFIX))
    if folder is None:
        raise LaddError(
            f"{spec!r} names a file inside the model folder whose config holds it, and is read only from there "
            f"(ladd sample FOLDER, train.init_from=FOLDER); name the file's path instead"
        )
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise LaddError(f"{spec!r} must name a path inside its model folder (no '..', not absolute)")
    return folder / relative
