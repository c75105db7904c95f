# shellcheck shell=sh disable=SC2034  # the variables are for the scripts that source this
# What every CLI test script starts with, sourced after `set -u` with the script's arguments
# QKV_BINARY SCRATCH_DIR: $qkv (an absolute path, so a case may run in another folder), a fresh
# $scratch, the case counters and the checks. A script ends with `finish`.
qkv=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
failures=0

pass() { echo "ok   $1"; }
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# has NAME FILE PATTERN / lacks NAME FILE PATTERN: a grep -E expression found / not found
has() { if grep -Eq -- "$3" "$2"; then pass "$1"; else fail "$1: no /$3/ in $2"; fi; }
lacks() { if grep -Eq -- "$3" "$2"; then fail "$1: /$3/ in $2"; else pass "$1"; fi; }

# refused NAME EXPECTED_CODE PATTERN COMMAND...: the command exits with the code and prints
# exactly one line on stderr matching PATTERN (grep -E).
refused() {
  name=$1 expected=$2 pattern=$3
  shift 3
  "$@" >"$scratch/stdout" 2>"$scratch/stderr" </dev/null
  code=$?
  lines=$(wc -l <"$scratch/stderr")
  if [ "$code" -eq "$expected" ] && [ "$lines" -eq 1 ] &&
    grep -Eq "^qkv: (error: )?.*$pattern" "$scratch/stderr"; then
    pass "$name"
  else
    fail "$name: exit $code (want $expected), $lines stderr lines (want 1), want /$pattern/:"
    sed 's/^/     | /' "$scratch/stderr" | head -5
  fi
}

# The tiny translation run the scripts train (a few seconds).
tiny="--task copy --train-size 100 --valid-size 8 --test-size 8 --min-length 3 --max-length 5
      --d-model 16 --heads 2 --layers 1 --ff-dim 32 --batch-size 16 --max-len 16 --pictures false"

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures case(s) failed"
    exit 1
  fi
  echo "all cases passed"
}
