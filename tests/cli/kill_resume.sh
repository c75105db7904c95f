#!/bin/sh
# A run killed at any moment resumes to the model an uninterrupted run ends in.
#
# A short translation run that checkpoints after every step is trained once without interruption
# (the reference); then 10 runs of it are killed with `kill -9` at random moments (delays from a
# fixed seed, spread over the reference run's training), each is resumed with --resume to its end,
# and each must end in the reference's model.safetensors byte for byte, with no temporary file and
# no checkpoint folder but the current one left in the run folder. Then SIGTERM, SIGHUP and
# SIGINT mid-run: each exits with 128 + the signal and one line on stderr, and its checkpoint
# resumes to the same bytes. Whatever moments the kills land on, the verdict is the same.
# Usage: tests/cli/kill_resume.sh QKV_BINARY SCRATCH_DIR. Run by ctest as cli_kill_resume.
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"

steps=40
train="--threads 1 train translate --task dates --train-size 200 --valid-size 8 --test-size 8
       --d-model 16 --heads 2 --layers 1 --ff-dim 32 --batch-size 16 --pictures false
       --steps $steps --checkpoint-every 1 --eval-every 10 --seed 3"

now() { date +%s.%N; }
# wait_for_checkpoint RUN PID: until RUN has a checkpoint (its trainer_state.json link resolves);
# fails if PID ends first or 60 s pass.
wait_for_checkpoint() {
  i=0
  while [ ! -e "$1/trainer_state.json" ]; do
    kill -0 "$2" 2>/dev/null || return 1
    i=$((i + 1))
    [ "$i" -gt 6000 ] && return 1
    sleep 0.01
  done
}

# check_folder NAME RUN: RUN ends in the reference's weights and holds no leftovers.
check_folder() {
  if ! cmp -s "$scratch/reference/model.safetensors" "$2/model.safetensors"; then
    fail "$1: model.safetensors differs from the uninterrupted run's"
    return
  fi
  leftovers=$(find "$2" -name '*.tmp*' | wc -l)
  folders=$(find "$2" -maxdepth 1 -name 'checkpoint.*' | wc -l)
  if [ "$leftovers" -ne 0 ] || [ "$folders" -ne 1 ]; then
    fail "$1: $leftovers temporary file(s) and $folders checkpoint folder(s) left (want 0 and 1):"
    ls -la "$2" | sed 's/^/     | /'
    return
  fi
  echo "ok   $1"
}

# ---- the uninterrupted reference
start=$(now)
if ! "$qkv" $train --out "$scratch/reference" >"$scratch/reference.log" 2>&1; then
  echo "FAIL the reference run failed:"
  tail -5 "$scratch/reference.log"
  exit 1
fi
seconds=$(echo "$start $(now)" | awk '{ print $2 - $1 }')
echo "reference run: $steps steps in $seconds s"

# ---- 10 kill -9 at random moments, each resumed
delays=$(awk -v s="$seconds" 'BEGIN { srand(19); for (i = 0; i < 10; i++) printf "%.3f ", rand() * 0.8 * s }')
landed=0
trial=0
for delay in $delays; do
  trial=$((trial + 1))
  run=$scratch/killed$trial
  "$qkv" $train --out "$run" >"$run.log" 2>&1 &
  pid=$!
  wait_for_checkpoint "$run" "$pid"
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null
  { wait "$pid"; } 2>/dev/null  # (the shell's own "Killed")
  code=$?
  [ "$code" -eq 137 ] && landed=$((landed + 1))
  step=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$run/trainer_state.json" 2>/dev/null)
  if ! "$qkv" --threads 1 train translate --resume "$run" >>"$run.log" 2>&1; then
    fail "kill -9 after ${delay}s (checkpoint of step ${step:-none}): --resume failed:"
    tail -3 "$run.log" | sed 's/^/     | /'
    continue
  fi
  check_folder "kill -9 after ${delay}s (exit $code, checkpoint of step ${step:-none}), resumed" "$run"
done
echo "$landed of 10 kills landed before the run ended"

# ---- SIGTERM, SIGHUP, SIGINT: a checkpoint, one line, exit 128 + signal, and it resumes
for signal in TERM:143 HUP:129 INT:130; do
  name=${signal%:*} expected=${signal#*:}
  run=$scratch/sig$name
  "$qkv" $train --out "$run" >"$run.out" 2>"$run.err" &
  pid=$!
  wait_for_checkpoint "$run" "$pid"
  kill -s "$name" "$pid"
  wait "$pid"
  code=$?
  lines=$(wc -l <"$run.err")
  if [ "$code" -ne "$expected" ] || [ "$lines" -ne 1 ] ||
    ! grep -Eq "^qkv: interrupted by SIG$name.*: the checkpoint of step [0-9]+ is in .*; continue with --resume" "$run.err"; then
    fail "SIG$name mid-run: exit $code (want $expected), $lines stderr lines (want 1):"
    sed 's/^/     | /' "$run.err" | head -5
    continue
  fi
  if ! "$qkv" --threads 1 train translate --resume "$run" >"$run.resumed" 2>&1; then
    fail "SIG$name: --resume failed:"
    tail -3 "$run.resumed" | sed 's/^/     | /'
    continue
  fi
  check_folder "SIG$name mid-run: exit $expected, one line, resumed" "$run"
done
finish
