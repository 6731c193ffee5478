"""``ladd compare``: train several experiments, evaluate each, and publish one table and plot (the quickstart)."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from registry.host.registry import Registry
from registry.paper.report import publish
from registry.storage.files import check_outside
from registry.training.stopping import Stopped, check, stopping_on_signals


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("compare", help="train several experiments, evaluate them, write tables and a plot")
    p.add_argument("--experiments", default="binsaw/mdlm_cpu,binsaw/coladd_seq_cpu")
    p.add_argument("--runs-dir", default="runs/compare")
    p.add_argument("--out", default="results/quickstart")
    p.add_argument("overrides", nargs="*", help="Hydra overrides applied to every experiment")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Train (once per distinct model), evaluate and publish every experiment of ``--experiments``."""
    from registry.config.composition import compose  # torch and Lightning: only when comparing
    from registry.engine.assembly import Experiment, required_selection, with_sampler
    from registry.engine.evaluation import evaluate
    from registry.engine.runs import training_key
    from registry.training.loop import train

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the main job's output to its results
    names = args.experiments.split(",")
    check_outside(Path(args.out), [_run_dir(args, name) for name in names], "--out")  # the runs it evaluates
    results = []
    trained: dict[str, tuple[Path, Experiment]] = {}
    with stopping_on_signals():
        for name in names:
            settings = compose([f"experiment={name}", *args.overrides], registry)
            key = training_key(settings.plain())
            if key in trained:  # same model, other sampler (e.g. Di-LADD joint and sequential): train once
                run_dir, experiment = trained[key]
                experiment = with_sampler(experiment, registry, *required_selection(settings, "sampler"))
                print(f"{settings.method}: sampling the model trained in {run_dir}")
            else:
                run_dir = _run_dir(args, name)
                try:
                    experiment = train(settings, run_dir, registry)
                except Stopped as stop:
                    raise stop.at(f"training {name} {stop.where}") from None
                trained[key] = (run_dir, experiment)
            try:
                check()  # a signal that came as the training ended
                result = evaluate(experiment, settings.method, settings.eval)
            except Stopped as stop:
                raise stop.at(f"while evaluating {settings.method}") from None
            result.save(run_dir / f"eval_{settings.method}.json")
            results.append(result)
    publish(results, args.out)


def _run_dir(args: argparse.Namespace, experiment: str) -> Path:
    """The run folder ``ladd compare`` trains ``experiment`` in."""
    return Path(args.runs_dir) / experiment.replace("/", "_")
