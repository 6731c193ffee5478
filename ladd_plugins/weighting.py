"""The loss weightings every built-in process offers (torch-free: config modules import it)."""
from __future__ import annotations

#: "elbo": T times the discrete-time ELBO weight of the step; "constant": 1.
WEIGHTINGS = ("elbo", "constant")


def check_weighting(weighting: str) -> None:
    """Raise ValueError naming the valid choices for an unknown weighting."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting={weighting!r}; valid choices: {', '.join(WEIGHTINGS)}")
