"""The ``ladd`` command line."""
from __future__ import annotations

import argparse
import errno
import json
import logging
import math
import re
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, NoReturn

from ._registry import Registry, load
from .errors import LaddError
from .kinds import KIND_SPECS, KINDS
from .sampling_limits import DEFAULT_MAX_HOURS, MAX_HOURS_FLAG
from .stopping import Stopped, check, stopping_on_signals
from .switches import debugging

DEBUG_ENV = "LADD_DEBUG"
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def _list_components(args: argparse.Namespace, registry: Registry) -> None:
    rows = [c.as_dict() for c in registry if args.kind in (None, c.kind)]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        columns = ("kind", "name", "plugin", "distribution", "version")
        widths = {key: max([len(key)] + [len(str(r[key] or "-")) for r in rows]) for key in columns}
        print("  ".join(f"{k:<{widths[k]}}" for k in columns) + "  description")
        for r in rows:
            print("  ".join(f"{str(r[k] or '-'):<{widths[k]}}" for k in columns) + f"  {r['description']}")
    _print_problems(registry)


def _print_problems(registry: Registry) -> None:
    from ._registry import clash_message
    from .presets import preset_clashes

    for note in registry.notes:
        print(f"ladd: note: {note}", file=sys.stderr)
    for failure in registry.failures:
        print(f"ladd: warning: {failure.message}", file=sys.stderr)
    for line in [clash_message(found) for found in registry.clashes()] + preset_clashes(registry):
        print(f"ladd: warning: {line}", file=sys.stderr)


def _show(args: argparse.Namespace, registry: Registry) -> None:
    from .options import format_options

    component = registry.get(args.kind, args.name)
    print(component.label)
    if component.spec.description:
        print(f"  {component.spec.description}")
    factory = component.spec.factory
    print(f"  factory: {factory if isinstance(factory, str) else f'{factory.__module__}:{factory.__qualname__}'}")
    print(f"  implements: registry.interfaces.{KIND_SPECS[component.kind].interface}")
    print(format_options(component))


def _plugins(args: argparse.Namespace, registry: Registry) -> None:
    from ._registry import clash_message
    from .presets import preset_clashes

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
    for line in [clash_message(found) for found in registry.clashes()] + preset_clashes(registry):
        print(f"CLASH: {line}")
    for note in registry.notes:
        print(f"ladd: note: {note}", file=sys.stderr)


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


def _train(args: list[str], registry: Registry) -> None:
    from .config import check_selections
    from .train_command import HELP_FLAGS, USAGE, TrainCommand
    from .training import train

    if any(arg in HELP_FLAGS for arg in args):
        print(USAGE)
        return
    _print_problems(registry)  # a preset of a plugin that failed to load is missing too, not only its components
    command = TrainCommand.parse(args)
    check_selections(command.overrides, registry)  # every value of a sweep, before its first run trains
    jobs = command.prepared(registry)
    with stopping_on_signals():
        for number, job in enumerate(jobs):
            check()  # a signal that came as the last job's last stage ended
            if command.multirun:
                swept = " ".join(job.swept) or "(nothing swept)"
                print(f"job {number} of {len(jobs)}: {swept} -> {job.run_dir}", flush=True)
            # Lightning's DDP launcher starts the other ranks by running this process's command line again.
            sys.argv = [sys.argv[0], "train", *command.relaunch(job.overrides, job.run_dir)]
            train(job.cfg, job.run_dir, registry, command.allow_changes)
            print(f"trained {job.cfg.method}: {job.run_dir}")


def _sample(args: argparse.Namespace, registry: Registry) -> None:
    from .evaluation import sample
    from .export import from_pretrained
    from .files import check_target, write_text
    from .prompts import decode, fixed_tokens
    from .sampling_limits import check_sampling_memory, check_sampling_time
    from .training import load_run

    if (args.run_dir is None) == (args.model is None):
        raise LaddError("give either a run folder or --model EXPORTED_FOLDER")
    source = Path(args.run_dir or args.model)
    experiment = load_run(source, registry)[0] if args.run_dir else from_pretrained(source, registry)
    experiment = _chosen_sampler(args, experiment, registry)
    text = experiment.dataset.tokenizer is not None
    out = Path(args.out or f"samples_{args.steps}steps.{'jsonl' if text else 'txt'}")
    check_target(out)  # before sampling, not after
    check_sampling_memory(experiment, args.num, args.batch_size, "ladd sample")
    fixed = fixed_tokens(experiment.dataset, args.num, args.prompt, args.suffix) if args.prompt or args.suffix else None
    check_sampling_time(experiment, args.num, args.steps, args.batch_size, args.max_hours, fixed)
    tokens, calls = sample(experiment, args.num, args.steps, args.batch_size, args.seed, progress=True, fixed=fixed, precision=args.precision)
    if text:
        rows = zip(tokens.tolist(), decode(experiment.dataset, tokens), strict=True)
        write_text(out, "".join(json.dumps({"ids": ids, "text": line}) + "\n" for ids, line in rows))
    else:
        write_text(out, "\n".join(" ".join(map(str, row.tolist())) for row in tokens) + "\n")
    print(f"{args.num} samples, {args.steps} token steps, {calls} network calls each: {out}")


def _export(args: argparse.Namespace, registry: Registry) -> None:
    from .export import export

    print(f"exported {args.run_dir} to {export(args.run_dir, args.out_dir, registry, args.overwrite)}")


def _eval(args: argparse.Namespace, registry: Registry) -> None:
    from .distributed import connect, is_main
    from .evaluation import EvalResult, evaluate
    from .files import check_name, check_target
    from .report import format_table
    from .sampling_limits import check_sampling_memory
    from .training import load_run
    from .zeroshot import PPL_NOTE

    connect()  # under torchrun or srun, every rank evaluates its share of the batches and samples
    experiment, cfg = load_run(args.run_dir, registry)
    eval_cfg = dict(cfg["eval"])
    if args.budgets:
        eval_cfg["budgets"] = args.budgets
    for key in ("num_samples", "batch_size", "loss_batches", "precision", "repeats", "floor_draws"):
        if getattr(args, key):
            eval_cfg[key] = getattr(args, key)
    experiment = _chosen_sampler(args, experiment, registry)
    method = args.method or cfg["method"]
    check_name("--method", method, "eval_METHOD.json")
    out = Path(args.out or Path(args.run_dir) / f"eval_{method}.json")
    for target in EvalResult.files(out):
        check_target(target)  # before evaluating, not after
    check_sampling_memory(experiment, eval_cfg["num_samples"], eval_cfg["batch_size"], "ladd eval")
    result = evaluate(experiment, method, eval_cfg, progress=is_main())
    if not is_main():
        return
    path = result.save(out)
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


def _add_sampler_choice(parser: argparse.ArgumentParser, purpose: str) -> None:
    """``--sampler NAME`` and repeatable ``--sampler-option KEY=VALUE``, as `sample` and `eval` take them."""
    parser.add_argument("--sampler", help=f"{purpose} with another registered sampler (e.g. a sequential one)")
    parser.add_argument("--sampler-option", action="append", default=[], metavar="KEY=VALUE", help="its option")


def _chosen_sampler(args: argparse.Namespace, experiment: Any, registry: Registry) -> Any:
    """The experiment with the sampler ``--sampler`` and ``--sampler-option`` chose, checked against its model."""
    from .assembly import with_sampler

    if args.sampler_option and not args.sampler:
        raise LaddError(
            "--sampler-option sets an option of --sampler NAME: give the sampler too, e.g. --sampler joint "
            "--sampler-option guidance=2"
        )
    if not args.sampler:
        return experiment
    return with_sampler(experiment, registry, args.sampler, _options(args.sampler_option))


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
    from .assembly import Experiment, required_selection, with_sampler
    from .config import compose, to_plain
    from .evaluation import evaluate
    from .runs import training_key
    from .training import train

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the main job's output to its results
    results = []
    trained: dict[str, tuple[Path, Experiment]] = {}
    with stopping_on_signals():
        for name in args.experiments.split(","):
            cfg = to_plain(compose([f"experiment={name}", *args.overrides], registry))
            key = training_key(cfg)
            if key in trained:  # same model, other sampler (e.g. Di-LADD joint and sequential): train once
                run_dir, experiment = trained[key]
                experiment = with_sampler(experiment, registry, *required_selection(cfg, "sampler"))
                print(f"{cfg['method']}: sampling the model trained in {run_dir}")
            else:
                run_dir = Path(args.runs_dir) / name.replace("/", "_")
                try:
                    experiment = train(cfg, run_dir, registry)
                except Stopped as stop:
                    raise stop.at(f"training {name} {stop.where}") from None
                trained[key] = (run_dir, experiment)
            try:
                check()  # a signal that came as the training ended
                result = evaluate(experiment, cfg["method"], cfg["eval"])
            except Stopped as stop:
                raise stop.at(f"while evaluating {cfg['method']}") from None
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


class _Parser(argparse.ArgumentParser):
    """argparse with a bad argument reported as ladd's one line (the usage stays with --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"ladd: error: {message} (see {self.prog} --help)\n")


def _positive(text: str) -> int:
    """An argument that must be a whole number >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _seed(text: str) -> int:
    """A seed: a whole number that fits the random generators' 64 bits, with room for the offsets of chunks."""
    from .config import MAX_SAMPLING_SEED

    if not text.strip().isdigit() or int(text) > MAX_SAMPLING_SEED:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to 2**63-1")
    return int(text)


def _hours(text: str) -> float:
    """A positive, finite number of hours."""
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not math.isfinite(hours) or hours <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of hours")
    return hours


def _budgets(text: str) -> list[int]:
    """Comma-separated step counts, each >= 1."""
    try:
        return [_positive(part) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers >= 1 (e.g. 1,2,4,8)") from None


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ladd", description="Masked and latent-augmented discrete diffusion, built from plugins.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list-components", help="list registered components with their origin")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")
    p.set_defaults(run=_list_components)
    p = sub.add_parser("show", help="one component: origin, description and every option with its type, default and help")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("name")
    p.set_defaults(run=_show)
    p = sub.add_parser("plugins", help="list loaded, failed and blocked plugins; `ladd plugins check NAME` validates one")
    p.add_argument("action", nargs="?", choices=["check"])
    p.add_argument("name", nargs="?")
    p.set_defaults(run=_plugins)
    sub.add_parser("train", help="train an experiment: ladd train [experiment=NAME] [key=value ...] (Hydra overrides, -m for sweeps)")
    p = sub.add_parser("sample", help="sample from a trained run or an exported model")
    p.add_argument("run_dir", nargs="?", help="a run folder")
    p.add_argument("--model", help="a folder written by `ladd export` instead of a run folder")
    p.add_argument("--steps", type=_positive, default=32)
    p.add_argument("--num", type=_positive, default=16)
    p.add_argument("--batch-size", type=_positive, default=1000)
    p.add_argument("--seed", type=_seed, default=0, help="a whole number from 0 to 2**63-1")
    p.add_argument("--prompt", help="text every sample starts with (kept fixed while sampling)")
    p.add_argument("--precision", default="auto", help="the networks' precision: auto (bf16-mixed on CUDA, else 32-true), bf16-mixed or 32-true")
    p.add_argument("--suffix", help="text every sample ends with: with --prompt, an infill between the two")
    p.add_argument("--out", help="default: samples_STEPSsteps.jsonl (text data; ids and text) or .txt (ids) in the current folder")
    _add_sampler_choice(p, "sample")
    p.add_argument(
        MAX_HOURS_FLAG, type=_hours, default=DEFAULT_MAX_HOURS,
        help=f"refuse jobs whose measured estimate is longer (default {DEFAULT_MAX_HOURS:g}; raise it for longer jobs)",
    )
    p.set_defaults(run=_sample)
    p = sub.add_parser("export", help="write a run's EMA weights (safetensors) and config (JSON) to a shareable folder")
    p.add_argument("run_dir")
    p.add_argument("out_dir", help="a new or empty folder")
    p.add_argument("--overwrite", action="store_true", help="replace the model files of a folder that is not empty")
    p.set_defaults(run=_export)
    p = sub.add_parser("eval", help="held-out token loss and the metric at several step budgets")
    p.add_argument("run_dir")
    p.add_argument("--budgets", type=_budgets, help="comma-separated token step counts, e.g. 1,2,4,8")
    p.add_argument("--num-samples", type=_positive)
    p.add_argument("--batch-size", type=_positive, help="samples per sampler call (default: eval.batch_size)")
    p.add_argument("--loss-batches", type=_positive, help="held-out batches for L^x (default: eval.loss_batches)")
    p.add_argument("--precision", help="the networks' precision: auto, bf16-mixed or 32-true (default: eval.precision)")
    p.add_argument("--repeats", type=int, help="sample sets per budget, each against its own reference draw (default: eval.repeats)")
    p.add_argument("--floor-draws", type=int, help="data-vs-data pairs behind the data floor (default: eval.floor_draws)")
    _add_sampler_choice(p, "evaluate")
    p.add_argument("--method", help="label in tables (default: the run's method)")
    p.add_argument("--out", help="result file (default: RUN_DIR/eval_METHOD.json)")
    p.set_defaults(run=_eval)
    p = sub.add_parser("zero-shot", help="validation perplexity exp(L^x) of a trained run on several corpora, as a table")
    p.add_argument("run_dir")
    p.add_argument("corpora", nargs="+", help="values of the dataset option --field, e.g. ptb wikitext103 lambada")
    p.add_argument("--field", default="source", help="the dataset option that names the corpus (default: source)")
    p.add_argument("--batches", type=_positive, help="batches per corpus (default: eval.loss_batches)")
    p.add_argument("--batch-size", type=_positive, help="default: eval.batch_size")
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


def _show_error(error: BaseException, message: str | None = None) -> None:
    debug = debugging(DEBUG_ENV)
    if debug:
        traceback.print_exception(error)
    hint = f" ({DEBUG_ENV}=1 shows the traceback)" if error.__cause__ is not None and not debug else ""
    print(f"ladd: error: {message or error}{hint}", file=sys.stderr)


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
    except Stopped as stop:
        if not stop.quiet:
            print(f"ladd: {stop}", file=sys.stderr)
        return stop.exit_status
    except LaddError as error:
        _show_error(error)
        return 2
    except OSError as error:  # a full disk, a read-only folder, a file that vanished
        _show_error(error, _describe_os_error(error))
        return 2
    except (MemoryError, RuntimeError) as error:  # torch reports a failed allocation as a RuntimeError
        if not _out_of_memory(error):
            raise
        _show_error(error, _describe_out_of_memory(error))
        return 2


def _out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return isinstance(error, MemoryError) or "out of memory" in text or "allocate memory" in text


def _describe_out_of_memory(error: BaseException) -> str:
    asked = re.search(r"tried to allocate ([0-9.]+ ?[KMGT]iB|[0-9]+ bytes)", str(error), re.IGNORECASE)
    size = asked and (f"{int(asked[1].split()[0]) / 2**30:.1f} GiB" if asked[1].endswith("bytes") else asked[1])
    detail = f" (an allocation of {size} failed)" if size else ""
    return (
        f"out of memory{detail}; what ladd had written is intact (files are written whole, a run resumes from its last "
        f"checkpoint): reduce the batch size or the sequence length, or free memory, and run the command again"
    )


def _describe_os_error(error: OSError) -> str:
    where = f" ({error.filename})" if error.filename else ""
    if error.errno in _DISK_FULL:  # ladd writes every file whole, so what existed is still there
        return f"{error.strerror}{where}: the disk is full or a size limit applies; free space and run it again"
    return f"{error.strerror or error}{where}"


if __name__ == "__main__":
    sys.exit(main())
