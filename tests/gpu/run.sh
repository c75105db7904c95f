#!/usr/bin/env bash
# Everything qkv checks on a GPU machine, in one run that fits a short device lease (~8 minutes):
#   configure + build (sm_90) -> CUDA test suite -> compute-sanitizer memcheck on it ->
#   benchmarks (qkv vs cuBLAS, flash attention; a training step of the toy translation model) ->
#   PyTorch timings of the same -> summary table.
# Each stage gets at most its own cap and never more than what is left of QKV_GPU_BUDGET_S
# (default 480 s), so a slow stage cannot eat the time of the ones after it.
# Logs go to $OUT (the device runner's result folder) when set, else build-gpu/logs.
# Usage: tests/gpu/run.sh            (from anywhere; it cds to the repository root)
set -u
cd "$(dirname "$0")/../.." || exit 1

BUDGET=${QKV_GPU_BUDGET_S:-480}
BUILD=build-gpu
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
START=$(date +%s)
SUMMARY=()

remaining() { echo $((BUDGET - ($(date +%s) - START))); }

# stage NAME CAP_SECONDS LOGFILE COMMAND...: runs COMMAND with a timeout, records the outcome.
stage() {
  local name=$1 cap=$2 log=$3
  shift 3
  local left
  left=$(remaining)
  if ((left < 10)); then
    SUMMARY+=("$(printf '%-12s %-8s %5s s' "$name" "NO TIME" "-")")
    echo "== $name: skipped, out of time budget"
    return 1
  fi
  ((cap > left)) && cap=$left
  echo "== $name (at most ${cap}s) -> $log"
  local t0 rc
  t0=$(date +%s)
  timeout --signal=INT --kill-after=10 "$cap" "$@" >"$LOGS/$log" 2>&1
  rc=$?
  local took=$(($(date +%s) - t0)) verdict=PASS
  ((rc != 0)) && verdict="FAIL($rc)"
  ((rc == 124 || rc == 130 || rc == 137)) && verdict=TIMEOUT
  SUMMARY+=("$(printf '%-12s %-8s %5s s' "$name" "$verdict" "$took")")
  tail -n 25 "$LOGS/$log"
  return $rc
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader | tee "$LOGS/gpu.txt"

stage configure 90 configure.log cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DWITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 &&
  stage build 300 build.log cmake --build "$BUILD" -j16 --target test_cuda bench_cuda bench_step
built=$?

if ((built == 0)); then
  stage tests 120 tests.log "$BUILD/test_cuda" --color_output=no --report_level=short
  SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [[ -n "$SANITIZER" ]]; then
    # memcheck slows kernels 10-100x: leave out the test sized to overflow a grid and the
    # training run (hundreds of small launches; its kernels are all covered by other tests)
    stage memcheck 120 memcheck.log "$SANITIZER" --tool memcheck --error-exitcode 1 \
      "$BUILD/test_cuda" --color_output=no --report_level=short \
      '--run_test=!elementwise/large_tensors_cover_the_grid_stride_loop' \
      '--run_test=!training/short_run_matches_the_cpu_loss_curve'
  else
    SUMMARY+=("$(printf '%-12s %-8s %5s s' memcheck "ABSENT" "-")")
  fi
  stage bench 150 bench.log "$BUILD/bench_cuda"
  # One training step of the toy translation model (tests/bench/bench_step.cpp), as the CPU
  # comparison measures it (dropout 0.1: attention composed from kernels) and with dropout 0
  # (attention on the fused flash kernels).
  stage step 60 step.log sh -c "$BUILD/bench_step 1 cuda 0.1 && $BUILD/bench_step 1 cuda 0"
fi

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  stage torch 120 torch.log python3 tests/gpu/torch_reference.py
  stage torch_step 60 torch_step.log sh -c \
    "python3 tests/bench/torch_step.py 1 cuda 0.1 && python3 tests/bench/torch_step.py 1 cuda 0"
else
  SUMMARY+=("$(printf '%-12s %-8s %5s s' torch "ABSENT" "-")")
fi

# Shared-memory hazards in the flash kernels (the tensor-core ones stage every tile through shared
# memory): racecheck on their tests alone, last, since it is the slowest check per kernel.
if ((built == 0)) && [[ -n "${SANITIZER:-}" ]]; then
  stage racecheck 60 racecheck.log "$SANITIZER" --tool racecheck --error-exitcode 1 \
    "$BUILD/test_cuda" --color_output=no --report_level=short --run_test=flash_attention
fi

echo
echo "================================ summary ================================"
printf '%s\n' "${SUMMARY[@]}"
echo "total $(($(date +%s) - START)) s of a ${BUDGET} s budget; logs in $LOGS"
echo
echo "ratio = reference time / qkv time (above 1: qkv is faster)"
grep -h '^RESULT' "$LOGS/bench.log" 2>/dev/null | cut -c10-
if [[ -f "$LOGS/torch.log" ]]; then
  echo "PyTorch on the same shapes:"
  grep -h '^RESULT' "$LOGS/torch.log" | cut -c10-
fi
if [[ -f "$LOGS/torch.log" && -f "$LOGS/bench.log" ]]; then
  echo "qkv against PyTorch, same name and shape (torch ms / qkv ms; above 1: qkv is faster):"
  awk -f tests/gpu/result_table.awk "$LOGS/bench.log" "$LOGS/torch.log"
fi
if [[ -f "$LOGS/step.log" ]]; then
  echo "Training step, toy translation model (batch 64, length 20, d 128), median ms/step;"
  echo "qkv/torch = qkv's time over PyTorch eager's (above 1: qkv is slower):"
  step_logs=("$LOGS/step.log")
  [[ -f "$LOGS/torch_step.log" ]] && step_logs+=("$LOGS/torch_step.log")
  awk -f tests/gpu/step_table.awk "${step_logs[@]}"
fi
# The script's own status: the tests' verdict (benchmarks only report).
grep -q '^tests  *PASS' <(printf '%s\n' "${SUMMARY[@]}")
