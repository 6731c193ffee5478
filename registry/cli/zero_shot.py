"""``ladd zero-shot``: one trained model's L^x and likelihood bound on several corpora, as a table."""
from __future__ import annotations

import argparse

from registry.host.registry import Registry
from registry.storage.results import write_csv

from .arguments import positive, result_path, whole


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser(
        "zero-shot", help="L^x and the likelihood bound (as perplexities) of a trained run on several corpora"
    )
    p.add_argument("run_dir", help="a finished run or a model folder (ladd export, ladd import)")
    p.add_argument("corpora", nargs="+", help="values of the dataset option --field, e.g. ptb wikitext103 lambada")
    p.add_argument("--field", default="source", help="the dataset option that names the corpus (default: source)")
    p.add_argument("--batches", type=positive, help="batches per corpus (default: eval.loss_batches)")
    p.add_argument("--batch-size", type=positive, help="default: eval.batch_size")
    p.add_argument(
        "--bound-draws", type=whole, default=1,
        help="Monte Carlo draws per row of the full variational bound on -log p (0 skips it; default 1)",
    )
    p.add_argument("--out", help="CSV (default: RUN_DIR/zero_shot.csv; for a model folder, in the current folder)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """Score every corpus, print the table and write it as CSV."""
    from registry.engine.loading import load_trained  # torch: only when scoring
    from registry.paper.zeroshot import format_zero_shot, zero_shot

    out = result_path(args.out, args.run_dir, "zero_shot.csv")
    experiment, settings = load_trained(args.run_dir, registry)
    table = zero_shot(
        experiment,
        settings,
        registry,
        args.corpora,
        args.field,
        args.batches or settings.eval.loss_batches,
        args.batch_size or settings.eval.batch_size,
        settings.eval.seed,
        args.bound_draws,
    )
    print(format_zero_shot(table))
    columns = ["corpus", "tokens", "token_loss", "bound", "perplexity"]
    write_csv(out, columns, [{**vars(r), "perplexity": r.perplexity} for r in table.rows])
    print(f"wrote {out}")
