"""``ladd eval``: held-out token loss and the metric at several sampling budgets, as a result file."""
from __future__ import annotations

import argparse
import dataclasses

from registry.host.registry import Registry

from .arguments import add_sampler_choice, budgets, chosen_metric, chosen_sampler, positive, result_path, whole

#: options of `eval` that replace the run's `eval.*` settings when given
_OVERRIDES = ("budgets", "num_samples", "batch_size", "loss_batches", "precision", "repeats", "floor_draws")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("eval", help="held-out token loss and the metric at several step budgets")
    p.add_argument("run_dir", help="a finished run or a model folder (ladd export, ladd import)")
    p.add_argument("--budgets", type=budgets, help="comma-separated token step counts, e.g. 1,2,4,8")
    p.add_argument("--num-samples", type=positive)
    p.add_argument("--batch-size", type=positive, help="samples per sampler call (default: eval.batch_size)")
    p.add_argument("--loss-batches", type=positive, help="held-out batches for L^x (default: eval.loss_batches)")
    p.add_argument("--precision", help="the networks' precision: auto, bf16-mixed or 32-true (default: eval.precision)")
    p.add_argument(
        "--repeats",
        type=positive,
        help="sample sets per budget, each against its own reference draw (default: eval.repeats)",
    )
    p.add_argument(
        "--floor-draws", type=positive, help="data-vs-data pairs behind the data floor (default: eval.floor_draws)"
    )
    p.add_argument(
        "--bound-draws", type=whole,
        help="Monte Carlo draws per held-out row of the full variational bound on -log p (0 skips it; default 1 where "
        "the model's components give a bound, else it is left out with a note)",
    )
    add_sampler_choice(p, "evaluate")
    p.add_argument("--metric", help="score with another registered metric (`ladd list-components --kind metric`)")
    p.add_argument("--metric-option", action="append", default=[], metavar="KEY=VALUE", help="its option")
    p.add_argument("--method", help="label in tables (default: the run's method)")
    p.add_argument(
        "--out",
        help="result file (default: RUN_DIR/eval_METHOD.json, eval_METHOD_METRIC.json with --metric; for a model "
        "folder, in the current folder)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Evaluate (every rank its share under torchrun), print the table and write the result."""
    from registry.distributed import connected, is_main  # torch: only when evaluating
    from registry.engine.evaluation import bound_meaning, evaluate, token_perplexity_meaning
    from registry.engine.loading import load_trained
    from registry.engine.sampling_limits import check_sampling_memory
    from registry.paper.report import format_table
    from registry.storage.files import check_name
    from registry.storage.results import BOUND_NOTE, EvalResult, perplexity

    with connected():  # under torchrun or srun, every rank evaluates its share of the batches and samples
        experiment, settings = load_trained(args.run_dir, registry)
        given = {key: getattr(args, key) for key in _OVERRIDES if getattr(args, key) is not None}
        eval_settings = dataclasses.replace(settings.eval, **given)  # the options given, checked as the config's are
        experiment = chosen_metric(args, chosen_sampler(args, experiment, registry), registry)
        method = args.method or settings.method
        check_name("--method", method, "eval_METHOD.json")
        named = f"eval_{method}.json" if args.metric is None else f"eval_{method}_{args.metric}.json"
        out = result_path(args.out, args.run_dir, named, EvalResult.files)  # before evaluating
        check_sampling_memory(experiment, eval_settings.num_samples, eval_settings.batch_size, "ladd eval")
        result = evaluate(experiment, method, eval_settings, progress=is_main(), bound_draws=args.bound_draws)
    if not is_main():
        return
    path = result.save(out)
    print(format_table([result]))
    model = experiment.model
    print(f"L^x {result.token_loss:.4f} nats per token: {result.token_loss_meaning}")
    if experiment.dataset.tokenizer is not None:
        print(f"exp(L^x) {result.token_perplexity:.2f}: {token_perplexity_meaning(model)}")
    if result.no_bound is not None:
        print(f"note: no bound on -log p: {result.no_bound}")
    if result.bound is not None:
        print(
            f"bound {result.bound:.4f} nats per token: {bound_meaning(model, result.bound_draws)} ({BOUND_NOTE}); "
            f"exp(bound) {perplexity(result.bound):.2f}, the same for the perplexity"
        )
    print(f"wrote {path}")
