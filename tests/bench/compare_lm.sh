#!/bin/sh
# The GPT language model at nanoGPT's CPU size, qkv (lm_bench) then PyTorch (torch_lm.py), back to
# back on the same text file with the same thread count: ms per training step and validation loss.
# Usage: tests/bench/compare_lm.sh FILE [steps=2000] [threads=2] [build-dir=build]
# Needs lm_bench built in build-dir and Debian's python3-torch (/usr/bin/python3). PyTorch runs
# on the OpenBLAS kernel lm_bench names (see compare_step.sh for why).
set -e
here=$(dirname "$0")
file=${1:?usage: compare_lm.sh FILE [steps] [threads] [build-dir]}
steps=${2:-2000}
threads=${3:-2}
build=${4:-build}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1
qkv_out=$("$build/lm_bench" "$file" "$steps" "$threads")
echo "$qkv_out"
core=$(echo "$qkv_out" | awk '/^openblas_coretype/ {print $2}')
torch_out=$(env -u OPENBLAS_L2_SIZE ${core:+OPENBLAS_CORETYPE=$core} /usr/bin/python3 "$here/torch_lm.py" "$file" "$steps" "$threads")
echo "$torch_out"
q=$(echo "$qkv_out" | awk '/^ms\/step/ {print $2}')
t=$(echo "$torch_out" | awk '/^ms\/step/ {print $2}')
awk -v q="$q" -v t="$t" 'BEGIN { printf "qkv %.2f ms/step, torch %.2f ms/step: qkv takes %.2fx torch'"'"'s time\n", q, t, q / t }'
