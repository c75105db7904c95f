#!/bin/sh
# The command line's --device cuda paths, run on the CPU emulator of CUDA (tests/cuda_emulator):
# qkv loads the emulated backend, libqkv_cuda_emulated.so, as it loads libqkv_cuda.so, from
# $QKV_CUDA_LIBRARY (engine/device_loader.h). `info` must name the device; a short training run on
# cuda must follow the CPU's loss curve from the same seed; eval and translate on cuda must agree
# with the CPU on the same checkpoint; bf16 must train; int8 must be refused on cuda.
# Usage: QKV_CUDA_LIBRARY=.../libqkv_cuda_emulated.so tests/cli/cuda_emulated.sh QKV SCRATCH_DIR.
# Run by ctest as cli_cuda_emulated.
# shellcheck disable=SC2086  # $tiny is split into its options on purpose
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"

tiny="--task copy --train-size 100 --valid-size 8 --test-size 8 --min-length 3 --max-length 5
      --d-model 16 --heads 2 --layers 1 --ff-dim 32 --batch-size 16 --max-len 16 --pictures false
      --warmup 0 --lr 0.01 --seed 5 --log-every 1"

if "$qkv" info | grep -q "^cuda: *qkv CPU emulator of a CUDA device, 16 GiB, compute capability 9.0$"; then
  pass "info names the device"
else
  fail "info does not name the emulated device:"
  "$qkv" info | sed 's/^/     | /'
fi

for device in cpu cuda; do
  if ! "$qkv" --threads 1 train translate $tiny --steps 40 --device $device --out "$scratch/$device" \
    >"$scratch/$device.log" 2>&1; then
    fail "train on $device:"
    sed 's/^/     | /' "$scratch/$device.log" | tail -5
    echo "$failures failure(s)"
    exit 1
  fi
done
pass "trained on cpu and cuda"

# The per-step losses, one per line.
losses() { grep -o '"loss":[-0-9.e+]*' "$1/metrics.jsonl" | cut -d: -f2; }
# Each cuda loss within 1e-4 (relative) of the cpu's (measured: 1.1e-7 over 40 Adam steps; a
# perturbation of the weights by 1e-6 grows to ~1e-3 under Adam, tests/cuda/training_test.cpp),
# and the run must have learned (last loss below 80% of the first).
losses "$scratch/cpu" >"$scratch/cpu.losses"
losses "$scratch/cuda" >"$scratch/cuda.losses"
if paste "$scratch/cpu.losses" "$scratch/cuda.losses" | awk '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    NR == 1 { first = $1 } { last = $2 }
    END { printf "     %d steps, largest relative gap %.2e, loss %.3f -> %.3f\n", n, worst, first, last
          exit !(n == 40 && worst <= 1e-4 && last < 0.8 * first) }'; then
  pass "cuda loss curve follows the cpu's"
else
  fail "cuda loss curve differs from the cpu's (or did not learn)"
fi

# The same checkpoint evaluated and used on both devices.
"$qkv" eval --run "$scratch/cpu" --device cpu >"$scratch/eval.cpu" 2>&1
"$qkv" eval --run "$scratch/cpu" --device cuda >"$scratch/eval.cuda" 2>&1
if [ -s "$scratch/eval.cpu" ] && cmp -s "$scratch/eval.cpu" "$scratch/eval.cuda"; then
  pass "eval agrees: $(grep 'exact match' "$scratch/eval.cuda")"
else
  fail "eval differs between cpu and cuda:"
  cat "$scratch/eval.cpu" "$scratch/eval.cuda" | sed 's/^/     | /'
fi
"$qkv" translate --run "$scratch/cpu" --device cpu abc hello dcba >"$scratch/tr.cpu" 2>&1
"$qkv" translate --run "$scratch/cpu" --device cuda abc hello dcba >"$scratch/tr.cuda" 2>&1
if [ -s "$scratch/tr.cpu" ] && cmp -s "$scratch/tr.cpu" "$scratch/tr.cuda"; then
  pass "translate agrees"
else
  fail "translate differs between cpu and cuda:"
  cat "$scratch/tr.cpu" "$scratch/tr.cuda" | sed 's/^/     | /'
fi

if "$qkv" --threads 1 train translate $tiny --steps 10 --device cuda --precision bf16 \
  --out "$scratch/bf16" 2>&1 | grep -q "bf16 products"; then
  pass "bf16 on cuda trains"
else
  fail "bf16 on cuda"
fi

if "$qkv" eval --run "$scratch/cpu" --int8 --device cuda 2>&1 |
  grep -q "int8 Linear layers run on the CPU only"; then
  pass "int8 on cuda is refused"
else
  fail "int8 on cuda is not refused"
fi
finish
