#!/usr/bin/env bash
# Binary sawtooth GPU protocol: the paper's App. E.1 settings (S=128, batch 2048, 20k + 20k steps,
# 20k evaluation samples) with every training stage capped at STAGE_MINUTES of wall clock.
# Trains MDLM, Co-LADD (joint, sequential) and Di-LADD one after the other, evaluates the five
# variants (Di-LADD's one model is sampled jointly and sequentially) and writes the tables and plot.
# (Training the four concurrently on one H200 time-sliced the GPU: 4-9 steps/s each.)
#
#   OUT=bench/out STAGE_MINUTES=1 bash bench/binsaw_gpu.sh
#
# OUT receives results/ (reconstruction.csv, swd.csv, swd.png) and runs.tar.gz (configs, metrics,
# evaluation results and logs of every run, without weights); RUNS (default OUT/runs) holds the runs.
#
# On a machine without network access, carry the wheels of missing packages in .whl/ (see README).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
STAGE_MINUTES=${STAGE_MINUTES:-1}
EXTRA=${EXTRA:-}  # extra Hydra overrides for every run (e.g. a tiny smoke test)
RUNS=${RUNS:-$OUT/runs}
mkdir -p "$RUNS" "$OUT"

if [ -d .whl ] && ! python3 -c "import hydra, omegaconf, vector_quantize_pytorch" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
# Make the checkout importable with its entry point without building it (the image has no network).
mkdir -p /tmp/site/ladd-0.0.0.dist-info
printf 'Metadata-Version: 2.1\nName: ladd\nVersion: 0.0.0+checkout\n' > /tmp/site/ladd-0.0.0.dist-info/METADATA
printf '[ladd]\nbuiltin = ladd_plugins\n' > /tmp/site/ladd-0.0.0.dist-info/entry_points.txt
ln -sfn "$PWD/configs" /tmp/site/ladd_configs
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
ladd() { python3 -m registry.cli "$@"; }

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
date -u +"start %Y-%m-%dT%H:%M:%SZ"
cap="train.stages.0.max_minutes=$STAGE_MINUTES"
ladd train experiment=binsaw/mdlm run_dir=$RUNS/mdlm train.progress=false $EXTRA \
  "train.stages.0.max_minutes=$(python3 -c "print(2 * $STAGE_MINUTES)")" > "$RUNS/mdlm.log" 2>&1
for variant in coladd_joint coladd_seq diladd_joint; do
  ladd train experiment=binsaw/$variant run_dir=$RUNS/$variant train.progress=false $EXTRA \
    "$cap" "train.stages.1.max_minutes=$STAGE_MINUTES" > "$RUNS/$variant.log" 2>&1
done
date -u +"trained %Y-%m-%dT%H:%M:%SZ"
for variant in mdlm coladd_joint coladd_seq diladd_joint; do
  tail -n 3 "$RUNS/$variant.log"
  for stage in "$RUNS/$variant"/logs/stage*; do echo "$variant $(basename "$stage"): $(tail -n 1 "$stage/metrics.csv")"; done
done

for variant in mdlm coladd_joint coladd_seq diladd_joint; do
  ladd eval "$RUNS/$variant" > "$RUNS/eval_$variant.log" 2>&1
done
ladd eval "$RUNS/diladd_joint" --sampler sequential --sampler-option latent_steps=8 --method diladd_seq \
  > "$RUNS/eval_diladd_seq.log" 2>&1
date -u +"evaluated %Y-%m-%dT%H:%M:%SZ"
ladd report "$RUNS"/mdlm/eval_mdlm.json "$RUNS"/coladd_joint/eval_coladd_joint.json \
  "$RUNS"/coladd_seq/eval_coladd_seq.json "$RUNS"/diladd_joint/eval_diladd_joint.json \
  "$RUNS"/diladd_joint/eval_diladd_seq.json --out "$OUT/results"
tar --exclude='checkpoints' --exclude='model.safetensors' -czf "$OUT/runs.tar.gz" -C "$(dirname "$RUNS")" "$(basename "$RUNS")"
