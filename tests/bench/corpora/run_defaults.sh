#!/bin/sh
# Trains each benchmark corpus of make_corpora.py with qkv's DEFAULT settings (no --steps, no
# --tokenizer, no split sizes: only --task pairs --data) and prints one line per corpus:
#   corpus  pairs  steps  seconds  test exact match
# Usage: tests/bench/corpora/run_defaults.sh QKV_BINARY OUT_DIR [NAME...]
# Runs one corpus at a time at QKV_NUM_THREADS (default 1), smallest first; docs/TRAINING.md
# ("Default run length") has the results.
set -eu
qkv=$1
out=$2
shift 2
names=${*:-"numbers inflect rewrite commands"}
here=$(dirname "$0")
mkdir -p "$out"
export QKV_NUM_THREADS=${QKV_NUM_THREADS:-1}
for name in $names; do
  [ -f "$out/$name.tsv" ] || python3 "$here/make_corpora.py" "$out" "$name" >/dev/null
  "$qkv" train translate --task pairs --data "$out/$name.tsv" --pictures false \
    --out "$out/run_$name" --overwrite >"$out/$name.log" 2>&1
  awk -v name="$name" -v pairs="$(wc -l <"$out/$name.tsv")" '
    /^test: exact match/ {
      exact = $4; sub(",", "", exact)
      match($0, /after [0-9]+ steps, [0-9.]+ s/)
      split(substr($0, RSTART, RLENGTH), run, " "); steps = run[2]; seconds = run[4]
    }
    END { printf "%-10s %6d pairs  %6s steps  %5s s  test exact match %s\n",
          name, pairs, steps, seconds, exact }' "$out/$name.log"
done
