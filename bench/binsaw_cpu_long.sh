#!/usr/bin/env bash
# The binary sawtooth at the paper's size (S = 128; width 64, 4 layers, 4 heads, dropout 0.1; the App. E.1
# presets binsaw/<variant>) trained for about 60 minutes of a 2-core CPU per variant, to tell the training
# budget from the method. Two single-threaded jobs run at once, one per core: the joint variants with two
# training seeds each (Co-LADD joint, Di-LADD joint; Di-LADD seq is Di-LADD joint's model sampled
# sequentially), MDLM and Co-LADD seq with one. Then every variant is evaluated (L^x; SWD at budgets 1 to 32,
# 3 evaluation seeds of 1,000 samples, a 10-draw data floor: 2,000 samples at budgets to 64 would take as long
# as the training, bench/RESULTS.md), and the results folder gets the L^x and SWD
# tables, the SWD plot, per-seed rows, mean ± std over the training seeds, the verdict on the paper's
# ordering (bench/binsaw_verdict.py) and its provenance record (tests/provenance.py).
#
#   nice bash bench/binsaw_cpu_long.sh                    # about 4 hours on an idle 2-core CPU
#
# Run it again after a kill: finished runs and evaluations are kept, a run in progress resumes from its last
# checkpoint (ladd train's own resume). Settings (environment):
#   OUT (results/binsaw_cpu128), RUNS (runs/binsaw_cpu128), BATCH (64), JOINT_SEEDS ("0 1"), OTHER_SEEDS ("0"),
#   STEPS_MDLM, STEPS_COLADD_JOINT, STEPS_COLADD_SEQ, STEPS_DILADD_JOINT (steps per stage, from the calibration
#   in bench/RESULTS.md), STEPS (all variants: LADD stages STEPS each, MDLM 2 x STEPS), EVAL_SAMPLES (1000),
#   BUDGETS (1,2,4,8,16,32), EVAL_REPEATS (3), FLOOR_DRAWS (10), JOBS (2), EXTRA (further overrides of
#   every training run), COMMIT (the commit to record when the code is not this checkout's).
# A check at tiny size (a few minutes):
#   STEPS=20 EVAL_SAMPLES=200 BUDGETS=1,4 EXTRA="dataset.seq_len=32 train.warmup_steps=5" \
#     OUT=/tmp/long/results RUNS=/tmp/long/runs bash bench/binsaw_cpu_long.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/binsaw_cpu128}
RUNS=${RUNS:-runs/binsaw_cpu128}
BATCH=${BATCH:-64}
JOINT_SEEDS=${JOINT_SEEDS:-"0 1"}
OTHER_SEEDS=${OTHER_SEEDS:-"0"}
STEPS_MDLM=${STEPS:+$((2 * STEPS))}
STEPS_MDLM=${STEPS_MDLM:-9600}
STEPS_COLADD_JOINT=${STEPS:-${STEPS_COLADD_JOINT:-2800}}
STEPS_COLADD_SEQ=${STEPS:-${STEPS_COLADD_SEQ:-2900}}
STEPS_DILADD_JOINT=${STEPS:-${STEPS_DILADD_JOINT:-2800}}
EVAL_SAMPLES=${EVAL_SAMPLES:-1000}
BUDGETS=${BUDGETS:-1,2,4,8,16,32}
EVAL_REPEATS=${EVAL_REPEATS:-3}
FLOOR_DRAWS=${FLOOR_DRAWS:-10}
JOBS=${JOBS:-2}
EXTRA=${EXTRA:-}
export OMP_NUM_THREADS=1  # one core per job: JOBS jobs at once fill JOBS cores
mkdir -p "$RUNS" "$OUT"
source bench/checkout_env.sh
[ "$(type -t ladd)" = function ] && export -f ladd  # the jobs run in child shells
TIMING="$RUNS/timing.txt"
stamp() { date -u +"$1 %Y-%m-%dT%H:%M:%SZ" | tee -a "$TIMING"; }
failed=0

# Runs "$@" (one job each, a command line) at most JOBS at a time; counts the jobs that fail.
run_jobs() {
  local running=0 job
  for job in "$@"; do
    if [ "$running" -ge "$JOBS" ]; then
      wait -n || failed=$((failed + 1))
      running=$((running - 1))
    fi
    bash -c "$job" &
    running=$((running + 1))
  done
  while [ "$running" -gt 0 ]; do
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
  done
}

steps_of() {  # the overrides giving variant $1 its steps per stage
  case "$1" in
    mdlm) echo "train.stages.stage1.steps=$STEPS_MDLM" ;;
    coladd_joint) echo "train.stages.stage1.steps=$STEPS_COLADD_JOINT train.stages.stage2.steps=$STEPS_COLADD_JOINT" ;;
    coladd_seq) echo "train.stages.stage1.steps=$STEPS_COLADD_SEQ train.stages.stage2.steps=$STEPS_COLADD_SEQ" ;;
    diladd_joint) echo "train.stages.stage1.steps=$STEPS_DILADD_JOINT train.stages.stage2.steps=$STEPS_DILADD_JOINT" ;;
  esac
}

trainings=()
evaluations=()
results=()
for variant in coladd_joint diladd_joint mdlm coladd_seq; do
  case "$variant" in *_joint) seeds=$JOINT_SEEDS ;; *) seeds=$OTHER_SEEDS ;; esac
  for seed in $seeds; do
    run="$RUNS/${variant}_s$seed"
    trainings+=("ladd train experiment=binsaw/$variant seed=$seed run_dir=$run train.batch_size=$BATCH \
      $(steps_of "$variant") train.progress=false $EXTRA >> $run.log 2>&1 \
      || { echo 'training $run failed: see $run.log'; exit 1; }")
    evals=("$variant:")
    [ "$variant" = diladd_joint ] && evals+=("diladd_seq:--sampler sequential --sampler-option latent_steps=8")
    for entry in "${evals[@]}"; do
      method="${entry%%:*}_s$seed"
      result="$run/eval_$method.json"
      results+=("$result")
      # an evaluation newer than the run's weights is kept
      evaluations+=("[ $result -nt $run/model.safetensors ] || ladd eval $run ${entry#*:} --method $method \
        --num-samples $EVAL_SAMPLES --batch-size $((EVAL_SAMPLES < 1000 ? EVAL_SAMPLES : 1000)) --budgets $BUDGETS \
        --repeats $EVAL_REPEATS --floor-draws $FLOOR_DRAWS >> $run.eval_$method.log 2>&1 \
        || { echo 'evaluating $method failed: see $run.eval_$method.log'; exit 1; }")
    done
  done
done

stamp "start"
run_jobs "${trainings[@]}"
stamp "trained"
[ "$failed" -eq 0 ] || { echo "$failed training runs failed; fix them and run this again (finished runs are kept)"; exit 1; }
run_jobs "${evaluations[@]}"
stamp "evaluated"
[ "$failed" -eq 0 ] || { echo "$failed evaluations failed; run this script again (finished ones are kept)"; exit 1; }

command="OUT=$OUT RUNS=$RUNS BATCH=$BATCH JOINT_SEEDS=\"$JOINT_SEEDS\" OTHER_SEEDS=\"$OTHER_SEEDS\" \
STEPS_MDLM=$STEPS_MDLM \
STEPS_COLADD_JOINT=$STEPS_COLADD_JOINT STEPS_COLADD_SEQ=$STEPS_COLADD_SEQ STEPS_DILADD_JOINT=$STEPS_DILADD_JOINT \
EVAL_SAMPLES=$EVAL_SAMPLES BUDGETS=$BUDGETS EVAL_REPEATS=$EVAL_REPEATS FLOOR_DRAWS=$FLOOR_DRAWS EXTRA=\"$EXTRA\" \
nice bash bench/binsaw_cpu_long.sh"
ladd report "${results[@]}" --out "$OUT" || exit 1
calibration=bench/results/cpu/binsaw_cpu_calibration.json
python3 bench/binsaw_verdict.py "${results[@]}" --out "$OUT" --command "$command" --timing "$TIMING" \
  ${calibration:+$([ -f $calibration ] && echo --calibration $calibration)} || exit 1
python3 tests/provenance.py "$OUT" ${COMMIT:+--commit "$COMMIT"} --command "$command" \
  --cases binsaw/mdlm,binsaw/coladd_joint,binsaw/coladd_seq,binsaw/diladd_joint,binsaw/diladd_seq \
  --machine "$(uname -m), $(nproc --all) cores, one thread per job, $JOBS jobs at once" > /dev/null || exit 1
echo "results in $OUT (README.md, reconstruction.csv, swd.csv, swd.png, summary.csv, verdict.csv, provenance.json)"
