"""What a LADD sampler asks of the token decoder ladd builds for it (``token_decoder``, a registered
``TokenDecoder``): guidance is the sampler's own."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry.errors import InvalidConfigError

__all__ = ["check_decoder_options"]


def check_decoder_options(options: Mapping[str, Any]) -> None:
    """Refuse token decoder options that the sampler running the decoder's steps sets itself."""
    if "guidance" in options:
        raise InvalidConfigError(
            "token_decoder_options.guidance: the token steps take the guidance of the sampler that runs them; set its "
            "guidance option instead"
        )
