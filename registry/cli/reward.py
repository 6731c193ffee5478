"""``ladd reward``: a trained model's mean reward on held-out prompts (its completions scored by a reward)."""
from __future__ import annotations

import argparse
import json

from registry.errors import LaddError
from registry.host.registry import Registry

from .arguments import add_sampler_choice, chosen_sampler, options_of, positive, result_path, seed

NAME = "reward"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser(NAME, help="mean reward of a model's completions of held-out prompts")
    p.add_argument("run_dir", help="a finished run or a model folder (ladd export, ladd import)")
    p.add_argument("--split", default="test", help="the split whose prompts are completed (default test)")
    p.add_argument("--prompts", type=positive, default=100, help="held-out prompts, in the data's seeded order")
    p.add_argument("--group", type=positive, default=4, help="completions per prompt")
    p.add_argument("--steps", type=positive, default=32, help="the sampler's token steps per completion")
    p.add_argument("--seed", type=seed, default=0, help="a whole number from 0 to 2**63-1")
    p.add_argument("--precision", default="auto", help="the networks' precision: auto, bf16-mixed or 32-true")
    p.add_argument(
        "--reward", help="a registered reward (`ladd list-components --kind reward`; default: the run's own reward)"
    )
    p.add_argument("--reward-option", action="append", default=[], metavar="KEY=VALUE", help="its option")
    add_sampler_choice(p, "complete")
    p.add_argument(
        "--out", help="result file (default: RUN_DIR/reward_REWARD.json; for a model folder, in the current folder)"
    )
    p.add_argument("--completions", help="also write every completion with its reward to this .jsonl file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Complete the held-out prompts, score them, print the mean and write the result."""
    from registry.engine.loading import load_trained  # torch: only when scoring
    from registry.engine.rewards import held_out_reward
    from registry.storage.files import check_name, write_text

    if args.reward_option and not args.reward:
        raise LaddError(
            "--reward-option sets an option of --reward NAME: give the reward too, e.g. --reward exact_match"
        )
    experiment, settings = load_trained(args.run_dir, registry)
    experiment = chosen_sampler(args, experiment, registry)
    # the run's own reward: the one its objective named, as recorded (its plugin picks a bare name among several)
    own = experiment.resolved["loss"].nested.get("reward") if "loss" in experiment.resolved else None
    if args.reward:
        component, options = registry.get(NAME, args.reward), options_of(args.reward_option)
    elif own is not None:
        component, options = own.component, dict((settings.selection("loss") or {}).get("reward_options") or {})
    else:
        raise LaddError(f"{args.run_dir} was trained with no reward: name one with --reward NAME (e.g. exact_match)")
    name = component.name
    check_name("--reward", name, "reward_REWARD.json")
    reward = registry.instantiate(component, options, dataset=experiment.dataset)[0]
    out = result_path(args.out, args.run_dir, f"reward_{name}.json")
    result, records = held_out_reward(
        experiment, reward, name, args.split, args.prompts, args.group, args.steps, args.seed, args.precision
    )
    write_text(out, json.dumps({**result.as_dict(), "run": str(args.run_dir)}, indent=2) + "\n")
    if args.completions:
        write_text(args.completions, "".join(json.dumps(record) + "\n" for record in records))
    print(
        f"{name} on {result.prompts} {result.split} prompts x {result.group} completions ({result.steps} steps): "
        f"{result.mean:.4f} +- {result.stderr:.4f}: {out}"
    )
