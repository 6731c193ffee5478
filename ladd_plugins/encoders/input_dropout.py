"""Encoder-input dropout p_r (App. C.3), shared by every encoder that reads tokens.

The model passes the masked positions only while it trains, frozen encoder or not (as the authors' code
applies p_r whenever its loss trains); an encoder blanks whenever it receives them.
"""
from __future__ import annotations

import torch
from torch import Tensor


def input_dropout(masked: Tensor, max_rate: float) -> Tensor:
    """Positions to blank: each masked one with probability ``p_r ~ U[0, max_rate]``, drawn per sequence."""
    rate = max_rate * torch.rand(masked.shape[0], 1, device=masked.device)
    return masked & (torch.rand(masked.shape, device=masked.device) < rate)
