"""Configs read back from where ladd saved them: a run folder, an exported model or adapter."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from registry.errors import IncompatibleComponentsError, InvalidConfigError

from .safety import UnsafeConfigError, without_local_paths
from .settings import Settings, checked

if TYPE_CHECKING:  # annotations only
    from registry.host.registry import Registry


def saved_settings(cfg: Mapping[str, Any], registry: Registry, where: object) -> Settings:
    """The settings of a saved config, its local paths dropped, checked; a config this ladd refuses is named by
    ``where`` it was read from (an earlier ladd may have saved options since gone)."""
    try:
        return checked(without_local_paths(cfg, registry))
    except (InvalidConfigError, IncompatibleComponentsError, UnsafeConfigError) as error:
        raise type(error)(f"{where}: {error}") from None
