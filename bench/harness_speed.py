"""Requests per second of ``ladd harness``'s likelihood against bare loops over the same model, in the same run.

    python bench/harness_speed.py                      # the offline text demo's MDLM (S = 64), random weights
    python bench/harness_speed.py --size tiny          # anywhere: a tiny network, to check the script

Every method scores the same multiple-choice requests (a context and a few words from the Shakespeare corpus, four
choices per context) with the same number of Monte Carlo draws per request:

- ``bare loop``: one network call per draw (a draw is a masked copy of the request's row);
- ``per-request batches``: the draws of one request in one call, as LLaDA's evaluation does;
- ``ladd bound``: ``registry.engine.likelihood.bound`` over all requests, draws of many requests per call;
- ``ladd loglikelihood``: the lm-eval model's ``loglikelihood``, greedy decoding check included.

The bare loops draw their masks with LLaDA's counts (stratified over 1..L) and leave out the weights and the time
draws, but run the output head at every position of every row (the plain network call), where ladd's bound runs it
at the masked positions only: they are the plain way of making those calls, a baseline, not a floor for an adapter.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from lm_eval.api.instance import Instance

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.likelihood import bound
from registry.harness import HarnessSettings, LaddLM
from registry.harness.requests import encode_pair, windows
from registry.interfaces import mask_id

SIZES = {
    "demo": ["experiment=demo/mdlm"],
    "tiny": ["experiment=demo/mdlm", "dataset.seq_len=16", "backbone.hidden=32", "backbone.layers=1",
             "backbone.heads=2", "backbone.cond_dim=32"],
}
CORPUS = Path(__file__).resolve().parent.parent / "ladd_plugins" / "datasets" / "text" / "corpus" / "shakespeare.txt"


def requests(count: int, seed: int = 0) -> list[Instance]:
    """``count`` (context, choice) requests: four choices of one to three words after each context."""
    words = CORPUS.read_text().split()
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        start = rng.randrange(len(words) - 40)
        context = " ".join(words[start : start + rng.randrange(6, 20)])
        for _ in range(4):
            pick = rng.randrange(len(words) - 3)
            choice = " " + " ".join(words[pick : pick + rng.randrange(1, 4)])
            out.append(Instance("loglikelihood", {}, (context, choice), len(out)))
    return out[:count]


def bare(model, rows: list[tuple[torch.Tensor, torch.Tensor]], draws: int, per_request: bool) -> None:
    """The network calls of masked copies of each row: one per draw, or one per request."""
    generator = torch.Generator().manual_seed(0)
    mask = mask_id(model.vocab_size)
    for tokens, scored in rows:
        positions = scored.nonzero().squeeze(1)
        states = tokens.repeat(draws, 1)
        for draw in range(draws):
            count = (draw * len(positions)) // draws + 1
            chosen = positions[torch.randperm(len(positions), generator=generator)[:count]]
            states[draw, chosen] = mask
        with torch.no_grad():
            if per_request:
                model.predict(states, torch.ones(draws), None, None)
            else:
                for state in states:
                    model.predict(state[None], torch.ones(1), None, None)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="demo")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--draws", type=int, default=32, help="Monte Carlo draws per request")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per network call of ladd's paths")
    parser.add_argument("--out", help="a JSON file for the rows")
    args = parser.parse_args()
    torch.manual_seed(0)
    reg = registry.load()
    experiment = build_experiment(compose(SIZES[args.size], reg), reg)
    model = experiment.model.eval()
    asked = requests(args.requests)
    tokenizer, length, unknown = experiment.dataset.tokenizer, model.seq_len, mask_id(model.vocab_size)
    rows = []
    for request in asked:
        (window,) = windows(*encode_pair(tokenizer, *request.args), length, unknown)
        rows.append((torch.tensor(window.tokens), torch.tensor(window.scored)))
    tokens, scored = torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])
    settings = HarnessSettings(mc_num=args.draws, batch_size=args.batch_size)
    seconds = {
        "bare loop": timed(lambda: bare(model, rows, args.draws, per_request=False)),
        "per-request batches": timed(lambda: bare(model, rows, args.draws, per_request=True)),
        "ladd bound": timed(lambda: bound(model, tokens, scored, args.draws, 0, False, args.batch_size)),
        "ladd loglikelihood": timed(lambda: LaddLM(experiment=experiment, settings=settings).loglikelihood(asked)),
    }
    threads = torch.get_num_threads()
    print(f"{args.requests} requests, {args.draws} draws each, S = {length}, {threads} threads, torch "
          f"{torch.__version__}")
    print(f"{'method':<22} {'seconds':>8} {'requests/s':>11}")
    for name, value in seconds.items():
        print(f"{name:<22} {value:>8.2f} {args.requests / value:>11.2f}")
    if args.out:
        record = {"size": args.size, "requests": args.requests, "draws": args.draws, "batch_size": args.batch_size,
                  "seq_len": length, "threads": threads, "torch": torch.__version__, "seconds": seconds}
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
