#!/bin/sh
# One training step, qkv against PyTorch, measured back to back with the same thread count and
# precision. Usage: tests/bench/compare_step.sh [build-dir] [threads] [f32|bf16] [translation|cnn]
# - translation (the default): the toy transformer, bench_step against torch_step.py;
# - cnn: the CNN+CBAM classifier of train/configs/fashion_cbam.json, qkv's trainer
#   on Fashion-MNIST (the median unprofiled step of its --profile-warmup steps) against
#   torch_cnn_step.py, the same model (python/qkv_torch_models) and step on random images.
# Needs bench_step (and for cnn qkv, and `make deps DATA=fashion-mnist`) built in build-dir and
# Debian's python3-torch (/usr/bin/python3).
#
# A fair yardstick: PyTorch 1.13's CPU matmuls go through Debian's OpenBLAS, whose own detection
# falls back to SSE3 ("Prescott") on CPU models newer than it, so PyTorch is given the kernel
# bench_step names (chosen by cpuid, train/bench/openblas.cpp). And glibc hands large freed
# buffers back to the OS, so each step pays its page faults again; PyTorch is timed with glibc's
# defaults, with glibc told to keep its memory, and with that memory also advised onto
# transparent huge pages (glibc.malloc.hugetlb=1, as qkv's host memory is: engine/cpu/host_memory.h),
# and compared at its fastest setting.
set -e
here=$(dirname "$0")
build=${1:-build}
threads=${2:-2}
precision=${3:-f32}
model=${4:-translation}
# one pool per library: no nested OpenMP/OpenBLAS threads beyond the count asked for
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1
case $model in
translation)
  qkv_out=$("$build/bench_step" "$threads" cpu 0.1 "$precision")
  torch_run="$here/torch_step.py $threads cpu 0.1 $precision"
  ;;
cnn)
  run=$(mktemp -d)
  # 60 steps before the profiled ones: the median of the last 30 of them, unprofiled
  "$build/qkv" --threads "$threads" train classify --precision "$(echo "$precision" | sed s/f32/fp32/)" --config "$here/../../train/configs/fashion_cbam.json" \
    --steps 65 --profile-warmup 60 --profile 5 --pictures false --out "$run/run" >"$run/log" 2>&1 ||
    { cat "$run/log" >&2; rm -rf "$run"; exit 1; }
  qkv_out=$(awk '/^wall time per step/ {print "ms/step", $6, "(qkv train classify, fashion_cbam.json)"}' "$run/log")
  rm -rf "$run"
  # the OpenBLAS kernel for PyTorch's linear layers: the one bench_step chooses (one timed step)
  qkv_out="$qkv_out
$("$build/bench_step" 1 cpu 0.1 f32 1 | grep '^openblas_coretype')"
  torch_run="$here/torch_cnn_step.py $threads $precision"
  ;;
*)
  echo "compare_step.sh: unknown model '$model' (translation or cnn)" >&2
  exit 1
  ;;
esac
echo "$qkv_out"
core=$(echo "$qkv_out" | awk '/^openblas_coretype/ {print $2}')
[ -n "$core" ] || { echo "compare_step.sh: bench_step named no OpenBLAS kernel" >&2; exit 1; }

# name|environment for each allocator setting PyTorch is timed with
settings="glibc-default|
glibc-keep-memory|MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=268435456
glibc-keep-memory-huge-pages|MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=268435456 GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
echo "$settings" | while IFS='|' read -r name vars; do
  echo "--- PyTorch, OPENBLAS_CORETYPE=$core, allocator $name${vars:+ ($vars)}"
  out=$(env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE="$core" $vars /usr/bin/python3 $torch_run)
  echo "$out"
  echo "$out" | awk -v n="$name" '/^ms\/step/ {print n, $2}' >>"${TMPDIR:-/tmp}/compare_step.$$"
done
result=$(sort -k2 -g "${TMPDIR:-/tmp}/compare_step.$$" | head -n 1)
rm -f "${TMPDIR:-/tmp}/compare_step.$$"
torch_name=${result% *}
torch_ms=${result#* }
qkv_ms=$(echo "$qkv_out" | awk '/^ms\/step/ {print $2}')
awk -v q="$qkv_ms" -v t="$torch_ms" -v n="$torch_name" -v c="$core" 'BEGIN {
  printf "qkv %.2f ms/step, torch %.2f ms/step (OpenBLAS %s, allocator %s, its fastest): qkv takes %.2fx torch'"'"'s time (%s)\n",
         q, t, c, n, q / t, (q <= t ? "qkv is faster or equal" : "qkv is slower") }'
