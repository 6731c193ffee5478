"""The Lightning training loop and what it needs (EMA, checkpoints, signals, metrics file); the only wing importing
Lightning."""
