#!/usr/bin/env bash
# Valgrind memcheck on a short training run and on the commands that read its run folder back:
# no invalid read or write, no use of uninitialized memory, no leak. `make valgrind` calls it with
# a build made without -march=native (valgrind cannot run AVX-512 code).
#
#   tests/valgrind/run.sh [QKV_BINARY]
#
# Exits non-zero at the first command with any error (--error-exitcode=1). Leaks of every kind
# count, "possibly lost" included; qkv.supp holds the only exceptions, each with its reason.
set -euo pipefail
# One CPU thread: the pool's workers spin while they wait, and valgrind runs one thread at a time,
# so a spinning worker starves the one doing the work (20 steps did not finish in 12 minutes with
# two threads). The thread pool is covered by make sanitize instead.
export QKV_NUM_THREADS=1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
qkv=${1:-$root/build-valgrind/qkv}
out=$(mktemp -d "${TMPDIR:-/tmp}/qkv-valgrind.XXXXXX")
trap 'rm -rf "$out"' EXIT

memcheck() {
  echo "== valgrind: qkv $*"
  local rc=0
  valgrind --tool=memcheck --error-exitcode=1 --leak-check=full \
    --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
    --track-origins=yes --num-callers=30 --suppressions="$here/qkv.supp" \
    --log-file="$out/valgrind.%p.log" "$qkv" "$@" >"$out/stdout.txt" || rc=$?
  if [ $rc != 0 ]; then cat "$out/stdout.txt" "$out"/valgrind.*.log; fi
  grep -hE "ERROR SUMMARY|definitely|indirectly|possibly|still reachable" "$out"/valgrind.*.log || true
  rm -f "$out"/valgrind.*.log
  return $rc
}

# 20 steps of the README's dates model, with batches of 8 and small splits (memcheck runs ~100x
# slower; batches of 64 took 6 minutes for 10 steps); a checkpoint and an evaluation on the way, so
# saving, the pictures and the decoders run too.
memcheck train translate --config "$root/train/configs/dates.json" --steps 20 --batch-size 8 \
  --eval-every 10 --checkpoint-every 10 --train-size 500 --valid-size 16 --test-size 16 \
  --out "$out/run"
# Reading the run folder back: config, vocabularies, model.json, safetensors.
memcheck eval --run "$out/run"
memcheck translate --run "$out/run" --beam 2 "nov 29, 2026"
memcheck train translate --resume "$out/run" --steps 22
echo "valgrind: no errors, no leaks"
