#!/usr/bin/env bash
# One command that proves on a GPU what a GPU user relies on, in under 10 minutes on one H100:
#   - the step's host synchronisations (training and sampling; the goal is none);
#   - speed.py's headline rows: the output head padded or not, MDLM DiT and LADD-32 MM-DiT training
#     tokens/s and MFU (compiled) against a matmul rate measured in the same run, MDLM
#     sampling ms/sample at 128 steps, plain against fast;
#   - every preset (binsaw/*, lm1b/*, owt/*) at its full size: a few steps of every stage through
#     `ladd train`'s loop at the per-GPU batch, tokens/s, peak memory, one sampling call; the binsaw
#     rows are the sawtooth's steps/s at App. E.1 size (S = 128, batch 2048), batches drawn on the GPU,
#     then again for MDLM and Co-LADD with the backbones compiled into CUDA graphs (reduce-overhead);
#   - an MDLM checkpoint of the published OWT size (random weights) imported with `ladd import mdlm`, then
#     sampled: ms/sample at 128 steps and batch 64, plain against fast (bench/import_mdlm.py);
#   - the field's decoders at batch 1 on a DiT of length 640 (prompt 512, generation 128, block 32, 128 steps):
#     network calls, FLOPs and ms/sample against uncached ancestral sampling, the prefix and dual key-value caches
#     and their token agreement with uncached decoding (bench/decoders.py);
#   - block diffusion's exact key-value cache on OWT's DiT (length 256, blocks of 16): token forwards of 16 blocks with
#     and without it against (K + 1) / 2, ms per generated token at 4x the length, tokens compared (bench/block_diffusion.py).
#   - fine-tuning (bench/finetune_check.py): LoRA SFT at LLaDA-8B's size, batch 1 x 2048 (frozen base in bfloat16,
#     activation checkpointing): peak memory, whether it fits in 80 GB, tokens/s, beside the dry run's estimate;
#     then train.strategy=fsdp stopped by SIGTERM and resumed against a run straight through, plain and with LoRA.
#
#   OUT=/tmp/out bash bench/gpu_check.sh                # on a GPU, the wheels of missing packages in .whl/
#   OUT=/tmp/out bash bench/gpu_check.sh --size tiny    # anywhere: the same steps with tiny networks
#
# Each section runs in its own process under a time limit (LIMIT_SYNCS, LIMIT_SPEED, LIMIT_BINSAW, LIMIT_GRAPHS,
# LIMIT_LM1B, LIMIT_OWT, LIMIT_IMPORT, LIMIT_DECODERS, LIMIT_BLOCKS, LIMIT_LORA, LIMIT_SHARDED seconds; 14.5 minutes
# in all by default: set the last two to 0 to skip fine-tuning and keep under 10), so a failure or a timeout is a row
# and the next section still runs. Run folders and stand-ins go to SCRATCH (default: a temporary folder on
# /dev/shm, removed at the end). Rows are printed as measured and kept under OUT
# (JSON and logs); a run cut short keeps what it measured.
set -uo pipefail
cd "$(dirname "$0")/.."
SIZE=full
if [ "${1:-}" = "--size" ]; then SIZE=${2:?--size needs full or tiny}; fi
OUT=${OUT:-bench/out/gpu_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# run folders (gigabytes of weights at the text presets' size), stand-ins and caches: a RAM disk where there is one
if [ -z "${SCRATCH:-}" ]; then
  SCRATCH=$(mktemp -d -p "$([ -w /dev/shm ] && echo /dev/shm || echo "$OUT")" gpu_check.XXXXXX)
  trap 'rm -rf "$SCRATCH"' EXIT
fi
source bench/checkout_env.sh

ROWS='^(train |sample |import |decoder |finetune |output head|host syncs|token forwards|length |NVIDIA|cpu,|(binsaw|lm1b|owt)/)|skipping cudagraphs'
section() {  # section NAME SECONDS COMMAND...: run it, print its rows, report a failure or timeout as a row
  local name=$1 limit=$2 started rc
  shift 2
  [ "$limit" -gt 0 ] || return 0
  started=$(date +%s)
  timeout --kill-after=10 "$(( limit * scale ))" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  grep -E "$ROWS" "$OUT/$name.log"
  if [ "$rc" -ne 0 ]; then
    echo "$name: FAILED (exit $rc after $(( $(date +%s) - started )) s; limit $(( limit * scale )) s): $(grep -v '^\s' "$OUT/$name.log" | tail -n 1)"
  fi
}

command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
date -u +"start %Y-%m-%dT%H:%M:%SZ"
if [ "$SIZE" = tiny ]; then  # a dry run on a CPU of unknown speed: the limits are the GPU's, ten times over
  steps=2 speed_steps=4 binsaw=coladd_seq,diladd_joint graphs=mdlm lm1b=coladd_32,diladd_32_seq owt=mdlm scale=10
else
  steps=${STEPS:-12} speed_steps=128 binsaw= graphs=mdlm,coladd_joint lm1b= owt= scale=1
fi
only() { [ -n "$1" ] && echo "--only $1"; }

section syncs "${LIMIT_SYNCS:-45}" python3 bench/gpu_check.py syncs --out "$OUT" --scratch "$SCRATCH"
section presets_binsaw "${LIMIT_BINSAW:-45}" python3 bench/gpu_check.py presets --group binsaw --size "$SIZE" \
  --steps "$steps" --out "$OUT" --scratch "$SCRATCH" $(only "$binsaw")
# the sawtooth's step is overhead at this size: captured in CUDA graphs, more steps so that the rate is measured after capture
# (inductor's performance hints name anything that keeps a graph from being captured)
section presets_binsaw_graphs "${LIMIT_GRAPHS:-90}" env TORCH_LOGS=perf_hints python3 bench/gpu_check.py presets --group binsaw --size "$SIZE" \
  --steps "$(( steps * 5 ))" --out "$OUT" --scratch "$SCRATCH" --only "$graphs" --label _graphs \
  --extra train.compile=true train.compile_mode=reduce-overhead
section speed "${LIMIT_SPEED:-170}" python3 bench/speed.py --size "$SIZE" --out "$OUT/speed" --scratch "$SCRATCH" \
  --sections head,sampling,training --models mdlm,coladd --variants compile --steps "$speed_steps"
for group in lm1b owt; do
  limit_name="LIMIT_${group^^}" default_limit=$(case $group in lm1b) echo 100;; owt) echo 40;; esac)
  # shellcheck disable=SC2046
  section "presets_$group" "${!limit_name:-$default_limit}" python3 bench/gpu_check.py presets --group "$group" --size "$SIZE" \
    --steps "$steps" --out "$OUT" --scratch "$SCRATCH" $(only "${!group}")
done
mdlm_size=$([ "$SIZE" = tiny ] && echo tiny || echo owt)
section import "${LIMIT_IMPORT:-60}" python3 bench/import_mdlm.py --size "$mdlm_size" --sample --out "$OUT/import" --scratch "$SCRATCH"
section decoders "${LIMIT_DECODERS:-30}" python3 bench/decoders.py --size "$SIZE" --out "$OUT/decoders"
section block_diffusion "${LIMIT_BLOCKS:-20}" python3 bench/block_diffusion.py --size "$SIZE" --batch 8 \
  --out "$OUT/block_diffusion"
section finetune_lora "${LIMIT_LORA:-150}" python3 bench/finetune_check.py lora --size "$SIZE" --out "$OUT" --scratch "$SCRATCH"
section finetune_sharded "${LIMIT_SHARDED:-120}" python3 bench/finetune_check.py sharded --out "$OUT" --scratch "$SCRATCH"
date -u +"end %Y-%m-%dT%H:%M:%SZ"
