"""How many generated continuous latents sit near the null latent (0), against the encoder's latents of real data.

    python bench/latent_norms.py RUN_DIR [--num 1000] [--threshold 0.5] [--seed 0]

A sequential Co-LADD run whose latent denoiser learned the null latent as a target generates a share of
latents near 0; the tokens drawn from those are unconditional samples. Prints the share of latents with
norm below ``threshold`` among ``num`` generated ones and among the encoder's latents of held-out data,
and how often a token agrees with its right neighbour in the samples drawn from each group.
"""
from __future__ import annotations

import argparse

import torch

import registry
from registry.engine.loading import load_run


def neighbour_agreement(tokens: torch.Tensor) -> float:
    """Fraction of adjacent token pairs that are equal (nan for no sequences)."""
    if tokens.shape[0] == 0:
        return float("nan")
    return float((tokens[:, 1:] == tokens[:, :-1]).double().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--num", type=int, default=1000)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=32, help="token steps of the samples whose tokens are scored")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    experiment, _ = load_run(args.run_dir, registry.load())
    model = experiment.model.eval()
    generator = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        out = experiment.sampler.sample(model, args.num, args.steps, generator)
        data = next(experiment.dataset.batches(args.num, args.seed, "validation"))
        encoded = model.latent.encode(model.encoder(data)).y0
    generated = out.latent.flatten(1).norm(dim=1)
    near = generated < args.threshold
    print(f"generated latents with norm < {args.threshold}: {float(near.double().mean()):.4f} of {args.num}")
    print(
        f"encoder latents of data with norm < {args.threshold}: "
        f"{float((encoded.flatten(1).norm(dim=1) < args.threshold).double().mean()):.4f}"
    )
    print(
        f"neighbour agreement: near-null {neighbour_agreement(out.tokens[near]):.3f}, "
        f"others {neighbour_agreement(out.tokens[~near]):.3f}, data {neighbour_agreement(data):.3f}"
    )


if __name__ == "__main__":
    main()
