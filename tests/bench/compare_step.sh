#!/bin/sh
# One toy-transformer training step, qkv against PyTorch, measured back to back with the same
# thread count and precision. Usage: tests/bench/compare_step.sh [build-dir] [threads] [f32|bf16]
# Needs bench_step built in build-dir and Debian's python3-torch (/usr/bin/python3).
set -e
here=$(dirname "$0")
build=${1:-build}
threads=${2:-2}
precision=${3:-f32}
# one pool per library: no nested OpenMP/OpenBLAS threads beyond the count asked for
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1
qkv_out=$("$build/bench_step" "$threads" cpu 0.1 "$precision")
torch_out=$(/usr/bin/python3 "$here/torch_step.py" "$threads" cpu 0.1 "$precision")
echo "$qkv_out"
echo "$torch_out"
qkv_ms=$(echo "$qkv_out" | awk '/^ms\/step/ {print $2}')
torch_ms=$(echo "$torch_out" | awk '/^ms\/step/ {print $2}')
awk -v q="$qkv_ms" -v t="$torch_ms" 'BEGIN {
  printf "qkv %.2f ms/step, torch %.2f ms/step: qkv takes %.2fx torch'"'"'s time (%s)\n", q, t, q / t,
         (q <= t ? "qkv is faster or equal" : "qkv is slower") }'
