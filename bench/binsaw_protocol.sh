#!/usr/bin/env bash
# Binary sawtooth protocol: trains MDLM, Co-LADD (joint, sequential) and Di-LADD one after the other,
# evaluates the five variants (Di-LADD's one model is sampled jointly and sequentially) and writes
# the L^x table, the SWD table and the plot, and the verdict on the paper's ordering (bench/binsaw_verdict.py).
#
#   GPU, the paper's App. E.1 sizes (S=128, batch 2048, 20k evaluation samples), every stage capped
#   at STAGE_MINUTES of wall clock:            OUT=bench/out STAGE_MINUTES=1 bash bench/binsaw_protocol.sh
#   CPU, the `_cpu` presets with more steps:  OUT=bench/out SUFFIX=_cpu STAGE_STEPS=4000 bash bench/binsaw_protocol.sh
#
# SUFFIX picks the presets (binsaw/<variant>$SUFFIX); STAGE_STEPS, if set, is each LADD stage's step
# count; MDLM, trained in one stage, gets twice STAGE_STEPS and twice STAGE_MINUTES (matched steps).
# (Training the four concurrently on one H200 time-sliced the GPU: 4-9 steps/s each.)
# OUT receives results/ (reconstruction.csv, swd.csv, swd.png) and runs.tar.gz (configs, metrics,
# evaluation results and logs of every run, without weights); RUNS (default OUT/runs) holds the runs.
# EXTRA: further Hydra overrides for every training run (e.g. a tiny smoke test).
# PHASES (default "train eval report"): the phases to run, so that training and evaluation can be two
# calls where one command has a time limit (RUNS must then outlive the first call).
#
# On a machine without network access, carry the wheels of missing packages in .whl/ (see README).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
SUFFIX=${SUFFIX:-}
STAGE_MINUTES=${STAGE_MINUTES:-1}
STAGE_STEPS=${STAGE_STEPS:-}
EXTRA=${EXTRA:-}
PHASES=${PHASES:-train eval report}
RUNS=${RUNS:-$OUT/runs}
mkdir -p "$RUNS" "$OUT"

source bench/checkout_env.sh

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
date -u +"start %Y-%m-%dT%H:%M:%SZ"
double() { python3 -c "print(2 * $1)"; }
ladd_stage() {  # the overrides capping stage $1 at $2 steps (if set) and $3 minutes
  echo "train.stages.$1.max_minutes=$3"
  [ -n "$2" ] && echo "train.stages.$1.steps=$2"
}
phase() { [[ " $PHASES " == *" $1 "* ]]; }
if phase train; then
  mdlm_caps=$(ladd_stage 0 "${STAGE_STEPS:+$(double "$STAGE_STEPS")}" "$(double "$STAGE_MINUTES")")
  ladd train experiment=binsaw/mdlm$SUFFIX run_dir=$RUNS/mdlm train.progress=false $EXTRA $mdlm_caps \
    > "$RUNS/mdlm.log" 2>&1
  for variant in coladd_joint coladd_seq diladd_joint; do
    caps="$(ladd_stage 0 "$STAGE_STEPS" "$STAGE_MINUTES") $(ladd_stage 1 "$STAGE_STEPS" "$STAGE_MINUTES")"
    ladd train experiment=binsaw/$variant$SUFFIX run_dir=$RUNS/$variant train.progress=false $EXTRA $caps \
      > "$RUNS/$variant.log" 2>&1
  done
  date -u +"trained %Y-%m-%dT%H:%M:%SZ"
  for variant in mdlm coladd_joint coladd_seq diladd_joint; do
    tail -n 3 "$RUNS/$variant.log"
    for stage in "$RUNS/$variant"/logs/stage*; do
      echo "$variant $(basename "$stage"): $(tail -n 1 "$stage/metrics.csv")"
    done
  done
fi

# methods are labelled VARIANT_s0 (one training seed), as bench/binsaw_verdict.py reads them
if phase eval; then
  for variant in mdlm coladd_joint coladd_seq diladd_joint; do
    ladd eval "$RUNS/$variant" --method "${variant}_s0" > "$RUNS/eval_$variant.log" 2>&1
  done
  ladd eval "$RUNS/diladd_joint" --sampler sequential --sampler-option latent_steps=8 --method diladd_seq_s0 \
    > "$RUNS/eval_diladd_seq.log" 2>&1
  date -u +"evaluated %Y-%m-%dT%H:%M:%SZ"
fi
if phase report; then
  results=("$RUNS"/mdlm/eval_mdlm_s0.json "$RUNS"/coladd_joint/eval_coladd_joint_s0.json
           "$RUNS"/coladd_seq/eval_coladd_seq_s0.json "$RUNS"/diladd_joint/eval_diladd_joint_s0.json
           "$RUNS"/diladd_joint/eval_diladd_seq_s0.json)
  ladd report "${results[@]}" --out "$OUT/results"
  python3 bench/binsaw_verdict.py "${results[@]}" --out "$OUT/results" \
    --title "Binary sawtooth protocol, presets binsaw/VARIANT$SUFFIX" \
    --command "OUT=$OUT SUFFIX=$SUFFIX STAGE_MINUTES=$STAGE_MINUTES STAGE_STEPS=$STAGE_STEPS EXTRA=\"$EXTRA\" \
bash bench/binsaw_protocol.sh"
  tar --exclude='checkpoints' --exclude='model.safetensors' -czf "$OUT/runs.tar.gz" \
    -C "$(dirname "$RUNS")" "$(basename "$RUNS")"
fi
