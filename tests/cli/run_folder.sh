#!/bin/sh
# What `qkv train` does with a run folder that is already there: a folder holding a run (or any
# file a run writes) is refused, naming the files, unless --resume or --overwrite is given; one
# folder takes one writer at a time (a second training, a --resume or `qkv quantize` while a run
# is going are refused, naming its pid), while `qkv eval` still reads the run's checkpoint.
# Usage: tests/cli/run_folder.sh QKV_BINARY SCRATCH_DIR. Prints one line per case; exits 1 if any
# case failed. Run by ctest as cli_run_folder.
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"

train() { "$qkv" --threads 1 train translate $tiny "$@"; }
records() { grep -c '"step":1,' "$1/metrics.jsonl"; }  # how many runs logged their step 1

run=$scratch/run
if ! train --steps 2 --out "$run" >/dev/null 2>&1; then
  echo "FAIL could not train the run the cases need"
  exit 1
fi
cp "$run/model.safetensors" "$scratch/model.before"

# ---- a folder that holds a run
refused "a finished run in --out is refused, naming its files" 1 \
  "--out: .*/run already holds files of a run \(best.safetensors, checkpoint, config.json, log.txt, metrics.jsonl, model.json, model.safetensors, .*\): continue that run with --resume .*/run, replace it with --overwrite" \
  train --steps 3 --out "$run"
if cmp -s "$run/model.safetensors" "$scratch/model.before" && [ "$(records "$run")" -eq 1 ]; then
  pass "the refused folder is untouched"
else
  fail "the refused folder changed: $(records "$run") runs in metrics.jsonl"
fi

mine=$scratch/mine
mkdir -p "$mine" && echo '{"my": "own file"}' >"$mine/config.json" && echo notes >"$mine/notes.txt"
refused "--out . holding the user's config.json is refused, naming it" 1 \
  "--out: \. already holds files of a run \(config.json\)" \
  sh -c "cd '$mine' && '$qkv' --threads 1 train translate $(echo $tiny) --steps 1 --out ."
if [ "$(cat "$mine/config.json")" = '{"my": "own file"}' ] && [ ! -e "$mine/qkv.lock" ]; then
  pass "the user's config.json is untouched, and no lock file was left"
else
  fail "the user's folder changed: $(ls "$mine")"
fi

if train --steps 3 --overwrite --out "$run" >/dev/null 2>&1 && [ "$(records "$run")" -eq 1 ] &&
  grep -q '"step": 3' "$run/trainer_state.json" &&
  [ "$(find "$run" -maxdepth 1 -name 'checkpoint.*' | wc -l)" -eq 1 ]; then
  pass "--overwrite replaces the run (one run in metrics.jsonl, the new checkpoint only)"
else
  fail "--overwrite: $(records "$run") runs in metrics.jsonl; $(ls "$run" | tr '\n' ' ')"
fi
echo notes >"$run/notes.txt"
train --steps 2 --overwrite --out "$run" >/dev/null 2>&1
if [ -e "$run/notes.txt" ] && [ "$(records "$run")" -eq 1 ]; then
  pass "--overwrite keeps files that are not a run's"
else
  fail "--overwrite removed notes.txt or kept the old metrics"
fi
refused "--overwrite with --resume exits 2" 2 "--resume excludes --overwrite" \
  "$qkv" train translate --resume "$run" --overwrite
refused "--resume of a run stopped before its first checkpoint says what to do" 1 \
  "--resume: .*nockpt has no checkpoint .* starts again with --overwrite" \
  sh -c "mkdir -p '$scratch/nockpt' && cp '$run/config.json' '$scratch/nockpt/' &&
         '$qkv' --threads 1 train translate --resume '$scratch/nockpt'"

# ---- one writer at a time; readers go on reading
busy=$scratch/busy
"$qkv" --threads 1 train translate $tiny --steps 100000 --checkpoint-every 1 --out "$busy" \
  >/dev/null 2>&1 &
pid=$!  # qkv's own pid (not a shell function's subshell): the lock file names it
trap 'kill -9 "$pid" 2>/dev/null' EXIT  # never outlive the test
i=0
while [ ! -e "$busy/trainer_state.json" ] && kill -0 "$pid" 2>/dev/null && [ "$i" -lt 6000 ]; do
  i=$((i + 1))
  sleep 0.01
done
refused "a second training into a running run's folder is refused, naming its pid" 1 \
  "--out: .*/busy is in use by another qkv process \(pid $pid\)" \
  train --steps 3 --overwrite --out "$busy"
refused "--resume of a run that is still going is refused" 1 \
  "--resume: .*/busy is in use by another qkv process \(pid $pid\)" \
  "$qkv" --threads 1 train translate --resume "$busy"
refused "qkv quantize of a run that is still going is refused" 1 \
  "--run: .*/busy is in use by another qkv process \(pid $pid\)" \
  "$qkv" quantize --run "$busy"
evals_ok=0
for n in 1 2 3 4 5; do
  "$qkv" --threads 1 eval --run "$busy" >/dev/null 2>"$scratch/eval.err" && evals_ok=$((evals_ok + 1))
done
if [ "$evals_ok" -eq 5 ]; then
  pass "qkv eval reads the checkpoint of a run that checkpoints every step (5 of 5)"
else
  fail "qkv eval during training: $evals_ok of 5 succeeded; last error:"
  sed 's/^/     | /' "$scratch/eval.err" | head -3
fi
kill -s TERM "$pid"
wait "$pid"
code=$?
[ "$code" -eq 143 ] && pass "the running run stops on SIGTERM (exit 143)" ||
  fail "the running run exited $code on SIGTERM (want 143)"
if train --steps 1 --overwrite --out "$busy" >/dev/null 2>&1; then
  pass "once the run has ended its folder takes a writer again"
else
  fail "the folder stayed locked after its run ended"
fi

finish
