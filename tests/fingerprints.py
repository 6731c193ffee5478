"""Fingerprints of short seeded runs of the presets: what they train, score, sample, decode, count and evaluate.

A case trains a preset for a few steps on one thread (as committed results are produced), then records its numbers:
the logged losses, every weight tensor's norm, the loss terms, samples of the preset's sampler (tokens, latent,
network calls and the FLOPs meter's count), a tiny evaluation (``L^x``, the likelihood bound, the metric at two
budgets, the data floor, FLOPs per sample), for text the Gen PPL of the samples under a small teacher, and last,
on the network spread apart by seeded noise and given a prompt, samples of the field's other decoders with their
caches (:data:`CASES`). Integers and tokens must match exactly; floats within :data:`TOLERANCE`, measured across
torch builds and CPU kernels: a fingerprint guards behaviour, not the last bit of one build.

``python tests/fingerprints.py [NAME ...]`` records ``fixtures/data/preset_fingerprints.json`` (the named cases,
keeping the others); ``python tests/fingerprints.py --out FILE [NAME ...]`` writes them to FILE instead, and
``python tests/fingerprints.py --spread A B ...`` prints the largest difference between such files, case by case
(how the tolerance was measured). ``test_fingerprints.py`` recomputes every case against the fixture, and
committed results store the fingerprints of the code that produced them (``tests/provenance.py``), which
``test_provenance.py`` recomputes.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import functools
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import torch

import registry
from registry.config.composition import compose
from registry.config.settings import EvalConfig
from registry.engine.assembly import Experiment, with_metric, with_sampler
from registry.engine.compute import counting
from registry.engine.evaluation import evaluate
from registry.interfaces import mask_id
from registry.training.loop import train

FIXTURE = Path(__file__).parent / "fixtures" / "data" / "preset_fingerprints.json"
#: Floats of a fingerprint agree when ``|found - recorded| <= atol + rtol * |recorded|``. Measured with ``--spread``
#: on 2026-11-28 (every case of the fast tier, one thread, an Intel Xeon with AVX-512): torch 2.13.0 (CPU build) and
#: 2.14.1 (CUDA build) gave the same numbers, bit for bit; the CPU's AVX2 and baseline kernels
#: (``ATEN_CPU_CAPABILITY=avx2``/``default``, with MKL's and oneDNN's matching limits) differed from AVX-512's by at
#: most 4.5e-6 relative (a Co-LADD latent's norm), tokens and counts equal. The tolerance is twenty times that; a
#: change of behaviour moves tokens, counts or numbers by far more.
TOLERANCE: dict[str, Any] = {"rtol": 1e-4, "atol": 1e-6}
#: runs are on one thread, as committed results are produced (``OMP_NUM_THREADS=1``)
THREADS = 1
SHORT = [
    "train.batch_size=8",
    "train.warmup_steps=2",
    "train.progress=false",
    "train.log_every=1",
    "train.stages=[{steps:3},{steps:2,lambda_latent:1.0,freeze_encoder:true}]",
]
#: A whole evaluation (held-out L^x and bound, samples at two budgets, two repeats, the data floor) at a few samples.
TINY_EVAL = {"num_samples": 4, "batch_size": 4, "loss_batches": 1, "budgets": [1, 2], "repeats": 2, "floor_draws": 2}
SAMPLES, STEPS = 4, 4
#: the noise that spreads the network's predictions apart before the other decoders run (:func:`_spread`)
SPREAD = 0.1
#: the other decoders continue the first tokens of held-out rows: from all-mask every position has the same inputs
#: (attention over equal values returns that value wherever it looks), so a confidence order would be one of ties
PROMPT = 4
_BINSAW = ("mdlm", "coladd_joint", "coladd_seq", "diladd_joint", "diladd_seq")


@dataclasses.dataclass(frozen=True)
class Case:
    """A preset with overrides, and the other samplers (label -> sampler name and options) its model is decoded with."""

    experiment: str
    overrides: tuple[str, ...] = ("dataset.seq_len=16",)
    decoders: tuple[tuple[str, str, tuple[tuple[str, Any], ...]], ...] = ()
    gen_ppl: bool = False  # score the samples by Gen PPL under a small teacher (text)


def _decoder(label: str, sampler: str, **options: Any) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
    return label, sampler, tuple(sorted(options.items()))


#: the field's decoders and Fast-dLLM's caches on a token-only model (LLaDA's, Dream's orders, threshold, blocks)
_CONFIDENCE = (
    _decoder("low_confidence", "confidence"),
    _decoder("random", "confidence", remasking="random"),
    _decoder("margin_blocks", "confidence", remasking="margin", block_length=4),
    _decoder("entropy_threshold", "confidence", remasking="entropy", threshold=0.5),
    _decoder("greedy_prefix_cache", "confidence", temperature=0.0, block_length=6, cache="prefix"),
    _decoder("dual_cache", "confidence", block_length=4, cache="dual", refresh=2),
)
#: LADD's samplers decoding their tokens with the confidence rule
_LADD = {
    "seq": (
        _decoder("sequential_confidence", "sequential", latent_steps=8, token_decoder="confidence",
                 token_decoder_options={"remasking": "margin"}),
    ),
    "joint": (_decoder("joint_confidence", "joint", token_decoder="confidence"),),
}


def _overrides(name: str) -> tuple[str, ...]:
    """A sawtooth case's overrides: 16 positions, and no dead-code restarts for a vector quantiser (Di-LADD).

    A restart copies encoder outputs of the batch into the codebook; a few steps into training they are nearly alike,
    so the nearest code among the copies, and every step after, follows the last bits of the kernels (the CPU's
    vector width moved a logged loss by 18%). Without restarts the codes stay apart and the run is stable.
    """
    return ("dataset.seq_len=16", *(("latent.dead_code_threshold=0",) if name.startswith("diladd") else ()))


CASES: dict[str, Case] = {
    "binsaw/ar_cpu": Case("binsaw/ar_cpu", decoders=(_decoder("no_cache", "autoregressive", cache=False),)),
    "binsaw/mdlm_cpu": Case("binsaw/mdlm_cpu", decoders=_CONFIDENCE),
    **{
        f"binsaw/{name}_cpu": Case(f"binsaw/{name}_cpu", _overrides(name), _LADD[name.split("_")[1]])
        for name in _BINSAW[1:]
    },
    # block diffusion: blocks of 4 over the 16 positions, with the exact cache (the preset's) and without it
    "binsaw/bd3lm_cpu": Case(
        "binsaw/bd3lm_cpu",
        decoders=(
            _decoder("no_cache", "blockwise", cache=False),
            _decoder("confidence_blocks", "blockwise", token_decoder="confidence"),
        ),
    ),
    # the text demos keep their data and encoder, with a shorter sequence
    "demo/mdlm": Case(
        "demo/mdlm",
        ("dataset.seq_len=16", "train.stages=[{steps:3}]"),
        (_decoder("dual_cache", "confidence", remasking="entropy", block_length=6, cache="dual"),),
        gen_ppl=True,
    ),
    "demo/coladd": Case(
        "demo/coladd",
        (
            "dataset.seq_len=16",
            "train.stages=[{steps:3,lambda_latent:1.0,freeze_encoder:true}]",
            "encoder.cache_dir=null",
        ),
        gen_ppl=True,
    ),
    # RL's CPU demo: LLaDA's SFT on the increments data, and diffu-GRPO from those random weights under its LoRA,
    # rewarded for a completion without a "5", which random weights write about half the time (their answers are never
    # right): the groups' advantages are not all zero, so the estimate, the clip and the KL move the logged losses
    "demo/arith_sft": Case("demo/arith_sft", ("train.stages=[{steps:3}]",)),
    "demo/arith_grpo": Case(
        "demo/arith_grpo",
        ("train.init_from=null", "train.stages=[{steps:2}]", "loss.group=4", "loss.rollout_batch=2", "loss.steps=4",
         "loss.reward=builtin:format", "+loss.reward_options={pattern:'[^5]*'}"),
    ),
    # the paper-size presets (App. E.1 networks, batches drawn on the device, full-precision evaluation) on 16 positions
    **{f"binsaw/{name}": Case(f"binsaw/{name}", _overrides(name)) for name in _BINSAW},
    # the quantiser ablation's other latents
    **{
        f"binsaw/diladd_joint_cpu latent={latent}": Case(
            "binsaw/diladd_joint_cpu", (f"latent={latent}", "dataset.seq_len=16")
        )
        for latent in ("fsq", "lfq")
    },
}
#: the cases the fast test tier recomputes (the others are in the slow tier)
FAST = [*(f"binsaw/{name}_cpu" for name in ("ar", *_BINSAW, "bd3lm")), "demo/mdlm", "demo/coladd", "demo/arith_sft",
        "demo/arith_grpo"]


@contextlib.contextmanager
def threads(count: int) -> Iterator[None]:
    """Run torch's CPU kernels on ``count`` threads inside the block."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _norms(state: dict[str, torch.Tensor]) -> dict[str, float]:
    """Each tensor's float64 L2 norm (an integer buffer's sum)."""
    return {
        key: float(value.double().norm()) if value.is_floating_point() else float(value.sum())
        for key, value in state.items()
    }


def _floats(scores: dict[str, Any]) -> dict[str, float]:
    return {name: float(value) for name, value in sorted(scores.items())}


def _sampled(experiment: Experiment, seed: int, fixed: torch.Tensor | None = None) -> dict[str, Any]:
    """Samples of the experiment's sampler (given the known tokens of ``fixed``): tokens, the latent (codes, or each
    sample's norm), network calls, the FLOPs the meter counted."""
    model = experiment.model
    with counting(model) as meter:
        out = experiment.sampler.sample(model, SAMPLES, STEPS, torch.Generator().manual_seed(seed), fixed=fixed)
    latent = out.latent
    if latent is not None:
        latent = latent.double().flatten(1).norm(dim=1).tolist() if latent.is_floating_point() else latent.tolist()
    return {
        "tokens": out.tokens.tolist(),
        "latent": latent,
        "network_calls": out.network_calls,
        "flops": meter.spent().flops,
    }


def _spread(model: torch.nn.Module) -> None:
    """Move every parameter by seeded noise of scale :data:`SPREAD`, in place: the other decoders' network.

    A network a few steps from its adaLN-Zero start predicts nearly alike at every position, so the order in which
    confidence decoding commits positions would follow the last bits of the kernels; spread out, it follows the
    decoder's rule.
    """
    with torch.random.fork_rng():
        torch.manual_seed(0)
        for parameter in model.parameters():
            parameter.add_(SPREAD * torch.randn_like(parameter))


def _evaluation(experiment: Experiment, settings: EvalConfig) -> dict[str, Any]:
    """Every number of a tiny evaluation: L^x, the bound where the model has one, scores, FLOPs, the data floor."""
    result = evaluate(experiment, "fingerprint", dataclasses.replace(settings, **TINY_EVAL), progress=False,
                      bound_draws=None)
    return {
        "token_loss": float(result.token_loss),
        "bound": result.bound,
        "data_floor": _floats(result.data_floor or {}),
        "scores": {
            str(score.steps): {
                "mean": _floats(score.scores),
                "spread": _floats(score.spread),
                "network_calls": score.network_calls,
                "flops_per_sample": score.flops_per_sample,
            }
            for score in result.scores
        },
    }


def _gen_ppl(experiment: Experiment, reg: registry.Registry, tokens: torch.Tensor, folder: Path) -> dict[str, float]:
    """Gen PPL and entropies of ``tokens`` under a one-layer GPT-2 of seeded random weights in the data's tokenizer."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(experiment.dataset.tokenizer.name_or_path)
    tokenizer.bos_token = tokenizer.cls_token  # the start token the teacher scores after (bench/demo_teacher.py)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=32, n_layer=1, n_head=2,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.sep_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    scored = with_metric(experiment, reg, "gen_ppl", {"teacher": str(folder), "device": "cpu", "dtype": "float32"})
    return _floats(scored.metric(tokens, tokens))


def fingerprint(case: str, run_dir: Path) -> dict[str, Any]:
    """Train ``case`` for a few steps in ``run_dir`` on one thread, then score, sample, decode and evaluate it."""
    with threads(THREADS):
        return _fingerprint(CASES[case], run_dir)


def _fingerprint(case: Case, run_dir: Path) -> dict[str, Any]:
    reg = registry.load()
    cfg = compose([f"experiment={case.experiment}", *SHORT, *case.overrides], reg)
    experiment = train(cfg, run_dir / "run", reg)
    model = experiment.model.eval()
    with open(run_dir / "run" / "metrics.csv") as handle:
        logged = [float(row["loss"]) for row in csv.DictReader(handle)]
    state = model.state_dict()
    batch = next(experiment.dataset.batches(8, 7, "test"))
    with torch.no_grad():
        losses = model.loss(batch, torch.Generator().manual_seed(3))
        samples = _sampled(experiment, 5)
        teacher = run_dir / "teacher"
        gen_ppl = _gen_ppl(experiment, reg, torch.tensor(samples["tokens"]), teacher) if case.gen_ppl else None
        evaluation = _evaluation(experiment, cfg.eval)
        # in train mode a quantiser's forward pass updates its codebook: after everything that reads it trained
        training = model.train().loss(batch, torch.Generator().manual_seed(3))
        model.eval()
        _spread(model)
        prompt = torch.full_like(batch[:SAMPLES], mask_id(model.vocab_size))
        prompt[:, :PROMPT] = batch[:SAMPLES, :PROMPT]
        decoders = {
            label: _sampled(with_sampler(experiment, reg, name, dict(options)), 11, prompt)
            for label, name, options in case.decoders
        }
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "state_keys": list(state),
        "weights": _norms(state),
        "logged_losses": logged,
        "loss_terms": _floats(losses),
        "train_loss_terms": _floats(training),
        "samples": samples,
        "decoders": decoders,
        "gen_ppl": gen_ppl,
        "evaluation": evaluation,
    }


def differences(found: Any, recorded: Any, tolerance: dict[str, Any] = TOLERANCE, where: str = "") -> list[str]:
    """Where ``found`` differs from ``recorded``: ints, strings and structure exactly, floats within ``tolerance``."""
    nested = functools.partial(differences, tolerance=tolerance)
    if isinstance(recorded, dict) and isinstance(found, dict):
        if sorted(found) != sorted(recorded):
            return [f"{where or 'top'}: keys {sorted(found)} instead of {sorted(recorded)}"]
        return [line for key in recorded for line in nested(found[key], recorded[key], where=f"{where}/{key}")]
    if isinstance(recorded, list) and isinstance(found, list):
        if len(found) != len(recorded):
            return [f"{where}: {len(found)} entries instead of {len(recorded)}"]
        return [line for k, (a, b) in enumerate(zip(found, recorded, strict=True))
                for line in nested(a, b, where=f"{where}[{k}]")]
    if isinstance(recorded, float) and isinstance(found, float | int) and not isinstance(found, bool):
        if math.isclose(found, recorded, rel_tol=tolerance["rtol"], abs_tol=tolerance["atol"]):
            return []
        return [f"{where}: {found!r} instead of {recorded!r}"]
    if found == recorded and type(found) is type(recorded):
        return []
    return [f"{where}: {found!r} instead of {recorded!r}"]


def largest_difference(found: Any, recorded: Any) -> float:
    """The largest relative difference between the floats of two fingerprints of one case (inf where others differ)."""
    if isinstance(recorded, dict) and isinstance(found, dict):
        if sorted(found) != sorted(recorded):
            return math.inf
        return max([largest_difference(found[key], recorded[key]) for key in recorded], default=0.0)
    if isinstance(recorded, list) and isinstance(found, list):
        if len(found) != len(recorded):
            return math.inf
        return max([largest_difference(a, b) for a, b in zip(found, recorded, strict=True)], default=0.0)
    if isinstance(recorded, float) and isinstance(found, float | int):
        return abs(found - recorded) / max(abs(recorded), TOLERANCE["atol"] / TOLERANCE["rtol"])
    return 0.0 if found == recorded else math.inf


@functools.cache
def computed(case: str) -> dict[str, Any]:
    """``case``'s fingerprint under the current code, computed once per process (the fixture's and results' tests)."""
    with TemporaryDirectory() as folder:
        return fingerprint(case, Path(folder))


def record(cases: list[str]) -> dict[str, Any]:
    """Fingerprints of ``cases``, each trained in a fresh temporary folder."""
    return {case: computed(case) for case in cases}


def recorded() -> dict[str, Any]:
    """The committed fingerprints, by case."""
    return json.loads(FIXTURE.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"cases to record (default: all); known: {', '.join(CASES)}")
    parser.add_argument("--out", type=Path, help="write them to this file instead of the fixture")
    parser.add_argument("--spread", nargs="+", type=Path, help="fingerprint files to compare with the first")
    args = parser.parse_args()
    if args.spread:
        first, *others = [json.loads(path.read_text()) for path in args.spread]
        for case in first:
            gaps = [largest_difference(other[case], first[case]) for other in others if case in other]
            print(f"{case}: largest relative difference {max(gaps):.3g}" if gaps else f"{case}: in the first only")
        return
    chosen = args.cases or list(CASES)
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        sys.exit(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    out = args.out or FIXTURE
    kept = json.loads(out.read_text()) if out.is_file() else {}
    kept = {case: entry for case, entry in kept.items() if case in CASES}
    out.write_text(json.dumps({**kept, **record(chosen)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
