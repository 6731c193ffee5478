"""``ladd harness``: score a trained model on lm-eval tasks; lm-eval's results JSON and ladd's provenance record."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from registry.errors import LaddError
from registry.host.registry import Registry
from registry.storage.files import check_target

from .arguments import add_sampler_choice, chosen_sampler, positive, seed, whole

INSTALL = 'ladd harness needs lm-eval (EleutherAI\'s lm-evaluation-harness): pip install -e ".[harness]"'
#: what the command writes into --out: lm-eval's results and ladd's provenance record
RESULTS, PROVENANCE = "results.json", "provenance.json"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser("harness", help="score a trained model on lm-evaluation-harness tasks")
    p.add_argument(
        "run_dir", metavar="RUN_OR_MODEL", help="a finished run or a model folder (ladd export, ladd import)"
    )
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval task names (ladd's own: ladd_demo_choice, "
                   "ladd_demo_exact)")
    p.add_argument("--include-path", action="append", default=[], metavar="DIR",
                   help="a folder of lm-eval task YAML files (repeatable)")
    p.add_argument("--limit", type=positive, help="at most this many documents per task")
    p.add_argument("--num-fewshot", type=whole, help="few-shot examples per prompt (default: each task's own)")
    p.add_argument("--batch-size", type=positive, default=16, help="rows per network call (default 16)")
    p.add_argument("--mc-num", type=positive, default=128,
                   help="Monte Carlo draws per row of the likelihood bound (default 128)")
    p.add_argument("--likelihood", default="mc", choices=("mc", "exact"),
                   help="mc (LLaDA's Monte Carlo estimator) or exact (every masked set of a short continuation)")
    p.add_argument("--gen-steps", type=positive, help="token steps of generate_until (default: the model's length)")
    p.add_argument("--seed", type=seed, default=0, help="seeds every draw (default 0)")
    p.add_argument("--precision", default="32-true", choices=("32-true", "auto", "bf16-mixed"),
                   help="the networks' precision (default 32-true; auto: bf16-mixed on CUDA)")
    p.add_argument("--device", help="where the model runs (default: cuda when available, else cpu)")
    p.add_argument("--chat-template", action="store_true",
                   help="frame each request's context in the model tokenizer's chat template (an instruction model)")
    p.add_argument("--log-samples", action="store_true",
                   help="also write lm-eval's record of every request, one samples_TASK.jsonl per task")
    add_sampler_choice(p, "generate")
    p.add_argument("--out", help="folder for results.json and provenance.json (default: ./harness_METHOD)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Check everything, load the model, run lm-eval and write the two files."""
    if not _has_lm_eval():
        raise LaddError(INSTALL)
    names = [name.strip() for name in args.tasks.split(",") if name.strip()]
    if not names:
        raise LaddError("--tasks names no task: give comma-separated lm-eval task names")
    source = Path(args.run_dir)
    out = _checked_out(args.out, source)
    import time

    from registry.engine.devices import checked_device
    from registry.engine.loading import load_trained
    from registry.harness import HarnessSettings, LaddLM
    from registry.harness.adapter import check_chat_template
    from registry.harness.records import provenance, write, write_samples
    from registry.harness.tasks import evaluate_tasks

    device = checked_device(args.device, "--device")
    settings = HarnessSettings(
        mc_num=args.mc_num, likelihood=args.likelihood, batch_size=args.batch_size, seed=args.seed,
        gen_steps=args.gen_steps, precision=args.precision,
    )
    experiment, config = load_trained(source, registry)
    experiment = chosen_sampler(args, experiment, registry)
    if args.chat_template:
        check_chat_template(experiment.dataset.tokenizer)
    out = out or Path(f"harness_{config.method}")
    _check_new(out, names if args.log_samples else [])
    experiment.model.to(device)
    lm = LaddLM(experiment=experiment, settings=settings, scoring=config.harness)
    started = time.perf_counter()
    include = [Path(folder) for folder in args.include_path]
    results = evaluate_tasks(
        lm, names, include, args.limit, args.num_fewshot, args.seed, args.chat_template, args.log_samples
    )
    samples = results.pop("samples", None)
    sampler = {"name": experiment.components["sampler"].name, "options": args.sampler_option}
    tasks = {"names": names, "include_path": [str(f) for f in include], "limit": args.limit,
             "num_fewshot": args.num_fewshot, "chat_template": args.chat_template}
    record = provenance(
        source, experiment, settings, lm.counts, lm.scoring_record(), sampler, tasks, results,
        time.perf_counter() - started,
    )
    if samples is not None:
        for path in write_samples(out, samples):
            print(f"wrote {path}")
    write(out / RESULTS, out / PROVENANCE, results, record)
    for task, scores in results.get("results", {}).items():
        shown = ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if isinstance(v, float) and "stderr" not in k)
        print(f"{task}: {shown}")
    if lm.counts.cut:
        print(f"{lm.counts.cut} requests were longer than the model's {experiment.model.seq_len} positions: scored in "
              f"rows that keep the tokens nearest each scored chunk (provenance.json)")
    print(f"wrote {out / RESULTS} and {out / PROVENANCE}")


def _has_lm_eval() -> bool:
    try:
        return importlib.util.find_spec("lm_eval") is not None
    except ValueError:  # blocked: None in sys.modules
        return False


def _checked_out(given: str | None, source: Path) -> Path | None:
    """``--out``, refused inside the folder read or where it would replace results; None: decided by the method."""
    if given is None:
        return None
    out = Path(given)
    if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
        raise LaddError(f"--out {out} lies in {source}: ladd never writes into the folder it reads; choose another")
    _check_new(out)
    return out


def _check_new(out: Path, logged: list[str] | None = None) -> None:
    from registry.harness.records import samples_file

    for path in (out / RESULTS, out / PROVENANCE, *(samples_file(out, task) for task in logged or [])):
        check_target(path)
        if path.exists():
            raise LaddError(f"{path} exists: ladd harness replaces no earlier results; choose another --out")
