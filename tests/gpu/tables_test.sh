#!/bin/sh
# The summary tables of tests/gpu/run.sh, checked without a GPU: a GPU run is rare and short, and
# a table that joins nothing wastes it. The step table reads logs of the real bench_step (run here
# on the CPU, so a change to its output format shows); the PyTorch lines and bench_cuda's RESULT
# lines are written as torch_step.py, torch_reference.py and train/bench/cuda_bench.cpp print them.
# Usage: tables_test.sh BENCH_STEP WORK_DIR
set -eu
bench_step=$1
work=$2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
fail() {
  echo "FAIL: $*"
  exit 1
}

# --- training step: joined by dropout, qkv's medians against PyTorch's ---
"$bench_step" 1 cpu 0.1 f32 2 >"$work/step.log"  # two timed steps: the format is what counts
"$bench_step" 1 cpu 0 f32 2 >>"$work/step.log"
printf '%s\n' "torch 2.5.1 threads 1 device cuda dropout 0.1" "ms/step 50.00 (best 49.00)" \
  "torch 2.5.1 threads 1 device cuda dropout 0" "ms/step 40.00 (best 39.00)" \
  >"$work/torch_step.log"
awk -f "$here/step_table.awk" "$work/step.log" "$work/torch_step.log" >"$work/step_table.txt"
cat "$work/step_table.txt"
[ "$(wc -l <"$work/step_table.txt")" -eq 2 ] || fail "expected one row per dropout"
for d in 0.1 0; do
  qkv_ms=$(awk -v d="$d" '/ dropout / { for (i = 1; i < NF; ++i) if ($i == "dropout") cur = $(i + 1) }
                         /^ms\/step/ && cur == d { print $2 }' "$work/step.log")
  torch_ms=$([ "$d" = 0.1 ] && echo 50.00 || echo 40.00)
  want=$(awk -v q="$qkv_ms" -v t="$torch_ms" 'BEGIN { printf "%.2fx", q / t }')
  grep -Eq "^  dropout $d +qkv +$qkv_ms +torch +$torch_ms +qkv/torch $want\$" \
    "$work/step_table.txt" || fail "no row 'dropout $d' with qkv $qkv_ms, torch $torch_ms, $want"
done

# --- benchmarks: joined by name and shape; a row only where both sides measured it ---
{
  printf 'RESULT | %-20s | %-22s | qkv %9.3f ms %9.1f GFLOP/s | %-8s %9.3f ms | ratio %.2f\n' \
    "matmul bf16" "1x1024x1024x1024" 0.5 4295.0 cuBLAS 0.45 0.90
  printf 'RESULT | %-20s | %-22s | qkv %9.3f ms %9.1f GFLOP/s | %-8s %9s    | ratio  -\n' \
    "flash fwd bf16" "B2 H8 T1024 d64" 0.25 1000.0 cuBLAS -
  printf 'RESULT | %-20s | %-22s | qkv %9.3f ms %9.1f GFLOP/s | %-8s %9s    | ratio  -\n' \
    "flash bwd bf16" "B2 H8 T1024 d64" 1.0 600.0 cuBLAS -
} >"$work/bench.log"
{
  printf 'RESULT | %-20s | %-22s | torch %9.3f ms %9.1f GFLOP/s\n' "flash fwd bf16" \
    "B2 H8 T1024 d64" 0.125 2000.0
  printf 'RESULT | %-20s | %-22s | torch %9.3f ms %9.1f GFLOP/s\n' "flash fwd bf16" \
    "B2 H8 T2048 d64" 0.4 2500.0
} >"$work/torch.log"
awk -f "$here/result_table.awk" "$work/bench.log" "$work/torch.log" >"$work/result_table.txt"
cat "$work/result_table.txt"
[ "$(wc -l <"$work/result_table.txt")" -eq 1 ] || fail "expected exactly one joined row"
grep -Eq '^  flash fwd bf16 \| B2 H8 T1024 d64 +qkv +0\.250 ms +torch +0\.125 ms +0\.50x$' \
  "$work/result_table.txt" || fail "the flash fwd row is missing or wrong"
echo "tables OK"
