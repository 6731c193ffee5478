"""How close the latents of samples drawn like references are to their own reference's, against the other references'.

    python bench/latent_agreement.py REFERENCES.safetensors SAMPLES.safetensors --num N

Both files are written by ``ladd encode``; the samples' file encodes the output of ``ladd sample --like`` (N samples
per reference, in reference order). Prints the mean agreement of each sample's latent with its own reference's
latent and with each other reference's: the cosine for vectors (averaged over the M latent vectors), the share of
equal code sequences for codes. Samples that ignore their reference agree with it no more than with the others.
"""
from __future__ import annotations

import argparse

import torch
from safetensors.torch import load_file


def agreement(latents: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per row: 1 where a code sequence equals the reference's, else 0; for vectors, the M vectors' mean cosine."""
    if not latents.is_floating_point():
        return (latents == reference).flatten(1).all(dim=1).double()
    return torch.nn.functional.cosine_similarity(latents.double(), reference.double(), dim=-1).flatten(1).mean(dim=1)


def own_and_others(references: torch.Tensor, samples: torch.Tensor, num: int) -> tuple[float, float]:
    """The mean agreement of the samples with their own reference and with every other reference."""
    count = len(references)
    if len(samples) != count * num:
        raise SystemExit(f"{len(samples)} sample latents are not {num} per each of {count} references")
    own = agreement(samples, references.repeat_interleave(num, dim=0)).mean()
    others = [
        agreement(samples[r * num : (r + 1) * num], references[other].expand(num, *references.shape[1:])).mean()
        for r in range(count)
        for other in range(count)
        if other != r
    ]
    return float(own), float(torch.stack(others).mean()) if others else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("references")
    parser.add_argument("samples")
    parser.add_argument("--num", type=int, required=True, help="samples per reference")
    args = parser.parse_args()
    own, others = own_and_others(load_file(args.references)["latents"], load_file(args.samples)["latents"], args.num)
    print(f"agreement with their own reference {own:.4f}, with the other references {others:.4f}")


if __name__ == "__main__":
    main()
