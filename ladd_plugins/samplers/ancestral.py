"""Ancestral sampling of the token channel with the exact masked bridge (App. B.2)."""
from __future__ import annotations

from collections.abc import Iterator

from registry.interfaces import DenoiserModel, Needs
from registry.toolkit.sampling import ProcessRule, RuleDecoder, TokenChain, process_rules

from .config import AncestralConfig


class AncestralSampler(RuleDecoder):
    """MDLM sampling: the token chain alone, the token process's own reverse step at each step of the time grid
    (``sample`` is ``RuleDecoder``'s: the chain under these rules)."""

    needs = Needs(latent=False, blocks=False)  # its predictions take no latent; it denoises every position at once

    def __init__(self, config: AncestralConfig) -> None:
        self.config = config

    def rules(self, model: DenoiserModel, chain: TokenChain, steps: int) -> Iterator[ProcessRule]:
        return process_rules(chain, steps, self.config.fast)
