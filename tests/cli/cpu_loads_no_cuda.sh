#!/bin/sh
# A CPU run of qkv maps no CUDA library: none among the executable's DT_NEEDED entries, none
# loaded while it trains and evaluates on the CPU (the dynamic loader's own log), and a CPU eval
# runs in 700,000 KiB of address space (cuBLAS alone reserves more). The CUDA backend,
# libqkv_cuda.so, is loaded only when a CUDA device is asked for (engine/device_loader.h); with
# BACKEND_LIBRARY given, `qkv info` must load it, which shows that the loader's log sees dlopen().
# Usage: tests/cli/cpu_loads_no_cuda.sh QKV SCRATCH_DIR [BACKEND_LIBRARY]. Run by ctest as
# cli_cpu_loads_no_cuda.
# shellcheck disable=SC2086  # $tiny is split into its options on purpose
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"
library=${3:-}
cuda_names='libcuda\.so|libcudart|libcublas'

needed=$(readelf -d "$qkv" | grep NEEDED)
if echo "$needed" | grep -Eq "$cuda_names"; then
  fail "qkv links a CUDA library:"
  echo "$needed" | grep -E "$cuda_names" | sed 's/^/     | /'
else
  pass "no CUDA library among qkv's DT_NEEDED ($(echo "$needed" | wc -l) entries)"
fi

tiny="--task copy --train-size 100 --valid-size 8 --test-size 8 --min-length 3 --max-length 5
      --d-model 16 --heads 2 --layers 1 --ff-dim 32 --batch-size 16 --max-len 16 --pictures false
      --warmup 0 --lr 0.01 --seed 5"
# The files the dynamic loader maps, one "file=NAME" line each, of a command run under it.
mapped() {
  rm -f "$scratch"/ld.*
  LD_DEBUG=files LD_DEBUG_OUTPUT="$scratch/ld" "$@" >"$scratch/out" 2>&1
  code=$?
  cat "$scratch"/ld.* | grep -o 'file=[^ ]*' | sort -u
  return $code
}

if ! mapped "$qkv" --threads 1 train translate $tiny --steps 3 --device cpu --out "$scratch/run" \
  >"$scratch/train.mapped"; then
  fail "train on cpu:"
  tail -5 "$scratch/out" | sed 's/^/     | /'
elif grep -Eq "$cuda_names|libqkv_cuda" "$scratch/train.mapped"; then
  fail "a CPU training run loaded a CUDA library:"
  grep -E "$cuda_names|libqkv_cuda" "$scratch/train.mapped" | sed 's/^/     | /'
else
  pass "a CPU training run loads no CUDA library ($(wc -l <"$scratch/train.mapped") files mapped)"
fi

# ulimit in a subshell: the limit stays with the eval. A sanitizer build reserves terabytes of
# address space for its shadow memory before main, so there (QKV_SANITIZER_BUILD, set by CMake)
# the check cannot run and is reported skipped; the regular build runs it.
if [ -n "${QKV_SANITIZER_BUILD:-}" ]; then
  echo "skip a CPU eval under ulimit -v 700000: a sanitizer's shadow memory needs more address space"
elif (ulimit -v 700000 && "$qkv" eval --run "$scratch/run" --device cpu) >"$scratch/eval.out" 2>&1 &&
  grep -q "exact match" "$scratch/eval.out"; then
  pass "a CPU eval runs under ulimit -v 700000"
else
  fail "a CPU eval under ulimit -v 700000 (exit $?):"
  tail -5 "$scratch/eval.out" | sed 's/^/     | /'
fi

# `qkv info` under the same limit: the CUDA backend links cuBLAS, which cannot be mapped there, so
# info reports the backend unavailable, naming the limit, and still exits 0.
real_backend=$(dirname "$qkv")/libqkv_cuda.so
if [ -n "${QKV_SANITIZER_BUILD:-}" ] || [ ! -e "$real_backend" ]; then
  echo "skip qkv info under ulimit -v 700000: no libqkv_cuda.so beside qkv (or a sanitizer build)"
elif (ulimit -v 700000 && QKV_CUDA_LIBRARY=$real_backend "$qkv" info) >"$scratch/info.out" 2>&1 &&
  grep -Eq "^cuda: +unavailable: .*ulimit -v" "$scratch/info.out"; then
  pass "qkv info under ulimit -v 700000 names the limit that keeps cuBLAS out"
else
  fail "qkv info under ulimit -v 700000:"
  tail -3 "$scratch/info.out" | sed 's/^/     | /'
fi

if [ -n "$library" ]; then
  if QKV_CUDA_LIBRARY=$library mapped "$qkv" info >"$scratch/info.mapped" &&
    grep -q "$(basename "$library")" "$scratch/info.mapped"; then
    pass "qkv info loads the backend library ($(basename "$library"))"
  else
    fail "qkv info did not load $library:"
    sed 's/^/     | /' "$scratch/out" | tail -3
  fi
fi
finish
