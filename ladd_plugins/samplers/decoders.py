"""The token decoder a LADD sampler runs its token steps with: any registered ``TokenDecoder`` sampler, by name."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry import load
from registry.errors import InvalidConfigError, LaddError
from registry.interfaces import TokenDecoder

__all__ = ["token_decoder"]


def token_decoder(name: str, options: Mapping[str, Any], fast: bool) -> TokenDecoder:
    """Sampler ``name`` built from ``options``, which must be a token decoder; ``fast`` (the LADD sampler's own
    option) becomes the decoder's when it has one and ``options`` leave it unset."""
    registry = load()
    component = registry.get("sampler", name)
    decoders = sorted(c.name for c in registry if c.kind == "sampler" and _decodes_tokens(c))
    if name not in decoders:
        raise InvalidConfigError(
            f"token_decoder={name!r} is no token decoder (a registry.interfaces.TokenDecoder sampler); "
            f"valid: {', '.join(decoders)}"
        )
    options = dict(options)
    if "guidance" in options:
        raise InvalidConfigError(
            "token_decoder_options.guidance: the token steps take the guidance of the sampler that runs them; set its "
            "guidance option instead"
        )
    if "fast" in component.option_names():
        options.setdefault("fast", fast)
    elif not fast:
        raise InvalidConfigError(
            f"fast=false turns off a token decoder's exact fast path, but token decoder {name!r} has none; "
            "leave fast=true"
        )
    try:
        return component.build(options)
    except InvalidConfigError as error:
        raise InvalidConfigError(f"token_decoder_options: {error}") from None


def _decodes_tokens(component: Any) -> bool:
    try:
        factory = component.factory()
    except LaddError:
        return False  # a broken plugin's sampler is reported where it is used
    return isinstance(factory, type) and issubclass(factory, TokenDecoder)
