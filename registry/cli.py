"""The ``ladd`` command line."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

from ._component import KINDS
from ._registry import Registry, load
from .errors import LaddError

DEBUG_ENV = "LADD_DEBUG"


def _list_components(args: argparse.Namespace, registry: Registry) -> None:
    rows = [c.as_dict() for c in registry if args.kind in (None, c.kind)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    widths = {key: max([len(key)] + [len(str(r[key] or "")) for r in rows]) for key in ("kind", "name", "plugin")}
    print("  ".join(f"{k:<{widths[k]}}" for k in widths) + "  version  description")
    for r in rows:
        print("  ".join(f"{str(r[k]):<{widths[k]}}" for k in widths) + f"  {r['version'] or '-':<7}  {r['description']}")
    _print_failures(registry)


def _print_failures(registry: Registry) -> None:
    for failure in registry.failures:
        print(f"plugin {failure.plugin!r} failed to load: {failure.error}", file=sys.stderr)


def _plugins(args: argparse.Namespace, registry: Registry) -> None:
    if args.action == "check":
        _check_plugin(args.name, registry)
        return
    counts: dict[tuple[str, str | None, str | None], int] = {}
    for c in registry:
        key = (c.origin.plugin, c.origin.distribution, c.origin.version)
        counts[key] = counts.get(key, 0) + 1
    for (plugin, dist, version), n in sorted(counts.items()):
        print(f"{plugin:<16} {dist or '-':<24} {version or '-':<10} {n} components")
    for failure in registry.failures:
        print(f"{failure.plugin:<16} {failure.distribution or '-':<24} {'-':<10} FAILED: {failure.error}")
    for blocked in registry.blocked:
        print(f"{blocked.plugin:<16} {blocked.distribution or '-':<24} {'-':<10} BLOCKED: {blocked.error}")


def _check_plugin(name: str | None, registry: Registry) -> None:
    from .validation import check_plugin

    if not name:
        raise LaddError("usage: ladd plugins check NAME (see `ladd plugins` for the names)")
    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always")
        problems = check_plugin(name, registry)
    for warning in skipped:
        print(f"note: {warning.message}", file=sys.stderr)
    if problems:
        raise LaddError(f"plugin {name!r} has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    count = sum(1 for c in registry if c.origin.plugin == name)
    print(
        f"plugin {name!r}: {count} components import and match their configs; {count - len(skipped)} built and ran "
        f"at a tiny size" + (f", {len(skipped)} need downloads or text data this check lacks (notes above)" if skipped else "")
    )


def _train(overrides: list[str], registry: Registry) -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig

    from .config import (
        CONFIG_MODULE,
        PRIMARY_CONFIG,
        register_configs,
        search_path_override,
    )
    from .training import train

    register_configs(registry)
    command = [sys.argv[0], "train", *overrides]

    @hydra.main(version_base=None, config_path=f"pkg://{CONFIG_MODULE}", config_name=PRIMARY_CONFIG)
    def run(cfg: Any) -> None:
        # Lightning's DDP launcher starts the other ranks by running this process's command line again.
        sys.argv = command
        try:
            run_dir = HydraConfig.get().runtime.output_dir
            train(cfg, run_dir, registry)
            print(f"trained {cfg.method}: {run_dir}")
        except LaddError as error:
            _show_error(error)
            raise SystemExit(2)

    sys.argv = ["ladd train", *search_path_override(registry), *overrides]
    run()


def _sample(args: argparse.Namespace, registry: Registry) -> None:
    from .evaluation import sample
    from .export import from_pretrained
    from .prompts import decode, fixed_tokens
    from .training import load_run

    if (args.run_dir is None) == (args.model is None):
        raise LaddError("give either a run folder or --model EXPORTED_FOLDER")
    source = Path(args.run_dir or args.model)
    experiment = load_run(source, registry)[0] if args.run_dir else from_pretrained(source, registry)
    text = experiment.dataset.tokenizer is not None
    fixed = fixed_tokens(experiment.dataset, args.num, args.prompt, args.suffix) if args.prompt or args.suffix else None
    tokens, calls = sample(experiment, args.num, args.steps, args.batch_size, args.seed, progress=True, fixed=fixed, precision=args.precision)
    out = Path(args.out or source / f"samples_{args.steps}steps.{'jsonl' if text else 'txt'}")
    if text:
        rows = zip(tokens.tolist(), decode(experiment.dataset, tokens))
        out.write_text("".join(json.dumps({"ids": ids, "text": line}) + "\n" for ids, line in rows))
    else:
        out.write_text("\n".join(" ".join(map(str, row.tolist())) for row in tokens) + "\n")
    print(f"{args.num} samples, {args.steps} token steps, {calls} network calls each: {out}")


def _export(args: argparse.Namespace, registry: Registry) -> None:
    from .export import export

    print(f"exported {args.run_dir} to {export(args.run_dir, args.out_dir, registry)}")


def _eval(args: argparse.Namespace, registry: Registry) -> None:
    from .distributed import connect, is_main
    from .evaluation import evaluate
    from .report import format_table
    from .training import load_run
    from .zeroshot import PPL_NOTE

    connect()  # under torchrun or srun, every rank evaluates its share of the batches and samples
    experiment, cfg = load_run(args.run_dir, registry)
    eval_cfg = dict(cfg["eval"])
    if args.budgets:
        eval_cfg["budgets"] = [int(b) for b in args.budgets.split(",")]
    for key in ("num_samples", "batch_size", "loss_batches", "precision", "repeats", "floor_draws"):
        if getattr(args, key):
            eval_cfg[key] = getattr(args, key)
    if args.sampler:
        experiment.sampler = registry.build("sampler", args.sampler, _options(args.sampler_option))
    method = args.method or cfg["method"]
    result = evaluate(experiment, method, eval_cfg, progress=is_main())
    if not is_main():
        return
    path = result.save(args.out or Path(args.run_dir) / f"eval_{method}.json")
    print(format_table([result]))
    if experiment.dataset.tokenizer is not None:
        print(f"validation PPL {result.token_perplexity:.2f} ({PPL_NOTE})")
    print(f"wrote {path}")


def _zero_shot(args: argparse.Namespace, registry: Registry) -> None:
    from .evaluation import write_csv
    from .training import load_run
    from .zeroshot import format_zero_shot, zero_shot

    experiment, cfg = load_run(args.run_dir, registry)
    eval_cfg = cfg["eval"]
    rows = zero_shot(
        experiment, cfg, registry, args.corpora, args.field,
        args.batches or eval_cfg["loss_batches"], args.batch_size or eval_cfg["batch_size"], eval_cfg["seed"],
    )
    print(format_zero_shot(rows))
    out = Path(args.out or Path(args.run_dir) / "zero_shot.csv")
    write_csv(out, ["corpus", "tokens", "token_loss", "perplexity"], [{**vars(r), "perplexity": r.perplexity} for r in rows])
    print(f"wrote {out}")


def _options(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` strings to a dict, values parsed as YAML scalars."""
    import yaml

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise LaddError(f"option {pair!r} must read key=value")
        options[key] = yaml.safe_load(value)
    return options


def _report(args: argparse.Namespace, registry: Registry) -> None:
    from .evaluation import EvalResult

    _publish([EvalResult.load(path) for path in args.results], args.out)


def _publish(results: list[Any], out: str) -> None:
    from .report import format_table, write_report

    paths = write_report(results, out)
    print(format_table(results))
    print("wrote " + ", ".join(str(p) for p in paths))


def _compare(args: argparse.Namespace, registry: Registry) -> None:
    import dataclasses

    from .assembly import selection
    from .config import compose, to_plain
    from .evaluation import evaluate
    from .training import train, training_key

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the main job's output to its results
    results, trained = [], {}
    for name in args.experiments.split(","):
        cfg = to_plain(compose([f"experiment={name}", *args.overrides], registry))
        key = training_key(cfg)
        if key in trained:  # same model, other sampler (e.g. Di-LADD joint and sequential): train once
            run_dir, experiment = trained[key]
            sampler_name, sampler_options = selection(cfg, "sampler")
            experiment = dataclasses.replace(experiment, sampler=registry.build("sampler", sampler_name, sampler_options))
            print(f"{cfg['method']}: sampling the model trained in {run_dir}")
        else:
            run_dir = Path(args.runs_dir) / name.replace("/", "_")
            experiment = train(cfg, run_dir, registry)
            trained[key] = (run_dir, experiment)
        result = evaluate(experiment, cfg["method"], cfg["eval"])
        result.save(run_dir / f"eval_{cfg['method']}.json")
        results.append(result)
    _publish(results, args.out)


def _flops(args: argparse.Namespace, registry: Registry) -> None:
    from .config import compose, to_plain
    from .flops import flops_report

    report = flops_report(to_plain(compose(args.overrides, registry)), registry)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.table())


def _frontier(args: argparse.Namespace, registry: Registry) -> None:
    from .frontier import (
        as_json,
        format_table,
        matched_compute,
        parse_budgets,
        plot,
        read_measurements,
    )

    runs, budgets = read_measurements(args.results), parse_budgets(args.budgets)
    table = matched_compute(runs, budgets)
    print(json.dumps(as_json(table), indent=2) if args.json else format_table(table))
    if args.plot:
        print(f"wrote {plot(runs, budgets, args.plot)}", file=sys.stderr)

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ladd", description="Masked and latent-augmented discrete diffusion, built from plugins.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list-components", help="list registered components with their origin")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")
    p.set_defaults(run=_list_components)
    p = sub.add_parser("plugins", help="list loaded, failed and blocked plugins; `ladd plugins check NAME` validates one")
    p.add_argument("action", nargs="?", choices=["check"])
    p.add_argument("name", nargs="?")
    p.set_defaults(run=_plugins)
    sub.add_parser("train", help="train an experiment: ladd train [experiment=NAME] [key=value ...] (Hydra overrides, -m for sweeps)")
    p = sub.add_parser("sample", help="sample from a trained run or an exported model")
    p.add_argument("run_dir", nargs="?", help="a run folder")
    p.add_argument("--model", help="a folder written by `ladd export` instead of a run folder")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--num", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", help="text every sample starts with (kept fixed while sampling)")
    p.add_argument("--precision", default="auto", help="the networks' precision: auto (bf16-mixed on CUDA, else 32-true), bf16-mixed or 32-true")
    p.add_argument("--suffix", help="text every sample ends with: with --prompt, an infill between the two")
    p.add_argument("--out", help="default: SOURCE/samples_STEPSsteps.jsonl (text data; ids and text) or .txt (ids)")
    p.set_defaults(run=_sample)
    p = sub.add_parser("export", help="write a run's EMA weights (safetensors) and config (JSON) to a shareable folder")
    p.add_argument("run_dir")
    p.add_argument("out_dir")
    p.set_defaults(run=_export)
    p = sub.add_parser("eval", help="held-out token loss and the metric at several step budgets")
    p.add_argument("run_dir")
    p.add_argument("--budgets", help="comma-separated token step counts, e.g. 1,2,4,8")
    p.add_argument("--num-samples", type=int)
    p.add_argument("--batch-size", type=int, help="samples per sampler call (default: eval.batch_size)")
    p.add_argument("--loss-batches", type=int, help="held-out batches for L^x (default: eval.loss_batches)")
    p.add_argument("--precision", help="the networks' precision: auto, bf16-mixed or 32-true (default: eval.precision)")
    p.add_argument("--repeats", type=int, help="sample sets per budget, each against its own reference draw (default: eval.repeats)")
    p.add_argument("--floor-draws", type=int, help="data-vs-data pairs behind the data floor (default: eval.floor_draws)")
    p.add_argument("--sampler", help="evaluate with another registered sampler (e.g. the same model sampled sequentially)")
    p.add_argument("--sampler-option", action="append", default=[], metavar="KEY=VALUE", help="option of --sampler")
    p.add_argument("--method", help="label in tables (default: the run's method)")
    p.add_argument("--out", help="result file (default: RUN_DIR/eval_METHOD.json)")
    p.set_defaults(run=_eval)
    p = sub.add_parser("zero-shot", help="validation perplexity exp(L^x) of a trained run on several corpora, as a table")
    p.add_argument("run_dir")
    p.add_argument("corpora", nargs="+", help="values of the dataset option --field, e.g. ptb wikitext103 lambada")
    p.add_argument("--field", default="source", help="the dataset option that names the corpus (default: source)")
    p.add_argument("--batches", type=int, help="batches per corpus (default: eval.loss_batches)")
    p.add_argument("--batch-size", type=int, help="default: eval.batch_size")
    p.add_argument("--out", help="CSV (default: RUN_DIR/zero_shot.csv)")
    p.set_defaults(run=_zero_shot)
    p = sub.add_parser("report", help="tables and plot from several `ladd eval` results")
    p.add_argument("results", nargs="+", help="eval_*.json files")
    p.add_argument("--out", required=True, help="folder for reconstruction.csv, METRIC.csv and METRIC.png")
    p.set_defaults(run=_report)
    p = sub.add_parser("compare", help="train several experiments, evaluate them, write tables and a plot")
    p.add_argument("--experiments", default="binsaw/mdlm_cpu,binsaw/coladd_seq_cpu")
    p.add_argument("--runs-dir", default="runs/compare")
    p.add_argument("--out", default="results/quickstart")
    p.add_argument("overrides", nargs="*", help="Hydra overrides applied to every experiment")
    p.set_defaults(run=_compare)
    p = sub.add_parser("flops", help="GFLOPs per sampling step of an experiment's backbones (paper convention and measured)")
    p.add_argument("overrides", nargs="*", help="experiment=NAME and other Hydra overrides")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(run=_flops)
    p = sub.add_parser("frontier", help="Gen PPL and entropy at matched sampling compute from per-step-count results")
    p.add_argument("results", help="CSV: method,steps,gflops_per_step,gen_ppl,entropy[,ms_per_sample][,fixed_gflops]")
    p.add_argument("--budgets", required=True, help="comma-separated GFLOPs per sample, e.g. 50,100,200")
    p.add_argument("--json", action="store_true", help="print {method: {budget: {gen_ppl, entropy}}} (null: n/a)")
    p.add_argument("--plot", help="write Gen PPL against GFLOPs (log axes) to this image")
    p.set_defaults(run=_frontier)
    return parser


def _show_error(error: BaseException) -> None:
    if os.environ.get(DEBUG_ENV):
        traceback.print_exception(error)
    print(f"ladd: error: {error}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ladd`` command."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        registry = load()
        if argv[:1] == ["train"]:
            _train(argv[1:], registry)
            return 0
        args = _parser().parse_args(argv)
        args.run(args, registry)
        return 0
    except LaddError as error:
        _show_error(error)
        return 2


if __name__ == "__main__":
    sys.exit(main())
