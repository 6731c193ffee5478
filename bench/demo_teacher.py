"""An offline Gen PPL teacher for the text demo: a small GPT-2 trained on the demo corpus's training split.

    python bench/demo_teacher.py --out runs/teacher [--steps 300]

No generative LM ships offline, so the demo's samples cannot be scored by GPT-2 Large. This trains a causal
transformer with Hugging Face's ``GPT2LMHeadModel`` (2 layers, width 128, context 128) on the training split of the
demo's data (the Shakespeare corpus shipped with ladd, in the tokenizer of all-MiniLM-L6-v2, 64-token rows with
their EOS, each behind the tokenizer's [CLS] as the start token), and saves it with that tokenizer as a Hugging Face
folder that ``metric=gen_ppl metric.teacher=FOLDER`` loads. Gen PPL under it measures how well samples fit the
corpus's token statistics as a small causal model sees them: a relative score between decoders of the same data,
not comparable to published Gen PPL. It prints its held-out perplexity (the validation split) at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

import registry
from registry.config.composition import compose
from registry.engine.assembly import selection

BATCH, CONTEXT = 32, 128


def rows_of(dataset, split: str, seed: int, start: int):
    """Batches of the split's rows, each behind the start token."""
    for batch in dataset.batches(BATCH, seed, split):
        yield torch.cat([torch.full((batch.shape[0], 1), start), batch], dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)
    reg = registry.load()
    settings = compose(["experiment=demo/mdlm"], reg)
    name, options = selection(settings, "dataset")
    dataset = reg.build("dataset", name, options)
    tokenizer = AutoTokenizer.from_pretrained(dataset.tokenizer.name_or_path)
    tokenizer.bos_token = tokenizer.cls_token  # the start token the Gen PPL teacher scores after
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=CONTEXT, n_embd=128, n_layer=2, n_head=4,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.sep_token_id,
    )
    model = GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # what transformers falls back to for this class anyway, said without a warning
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    start, begun = tokenizer.bos_token_id, time.perf_counter()
    stream = rows_of(dataset, "train", 0, start)
    model.train()
    for step in range(args.steps):
        ids = next(stream)
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 250 == 0:
            print(f"step {step}: loss {loss.item():.3f}", flush=True)
    model.eval()
    with torch.no_grad():
        held_out = zip(rows_of(dataset, "validation", 0, start), range(8), strict=False)
        losses = [float(model(input_ids=ids, labels=ids).loss) for ids, _ in held_out]
    out = Path(args.out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {"steps": args.steps, "batch": BATCH, "validation_ppl": math.exp(sum(losses) / len(losses)),
              "seconds": time.perf_counter() - begun}
    (out / "teacher.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(record))


if __name__ == "__main__":
    main()
