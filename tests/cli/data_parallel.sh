#!/bin/sh
# Data-parallel training and gradient accumulation give the model one process computes.
#
# 1. --accumulate 2 (micro-batches, loss over the global token count) follows the unsplit batch's
#    loss curve within 1e-5 relative, without dropout and with dropout 0.1 (an example's masks do
#    not depend on the micro-batch it is in), and two runs of it end in the same
#    model.safetensors bytes.
# 2. With MPI (MPIRUN given): `mpirun -np N` ends in the model.safetensors bytes and the
#    metrics.jsonl records (timings left out) of one process with --accumulate N, N = 2 and 3,
#    for translation and classification, with dropout on; also with a batch of 2 over 3 ranks.
#    `mpirun -np 2` with dropout 0.1 follows the unsplit batch's loss curve within 1e-5 relative.
# 3. A run of 2 ranks resumed by 2 ranks ends where an uninterrupted one does; one process
#    resuming it is refused, naming the world size.
# 4. Rank 1 killed by SIGKILL mid-run ends the job within 20 s with a line naming rank 1, and the
#    run's last checkpoint resumes.
# 5. SIGTERM to mpirun stops every rank after the same step with one checkpoint, which resumes,
#    also when rank 0 has blocked writing progress to an mpirun no longer reading it.
# 6. The ranks agree on what stops or bounds a step, as one process with --accumulate 2 does:
#    clipping (the same bytes and metrics), early stopping (the same last step, before --steps),
#    and a non-finite loss (the job fails naming the step one process names).
# Usage: tests/cli/data_parallel.sh QKV_BINARY SCRATCH_DIR [MPIRUN ARGS...]. ctest: cli_data_parallel.
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"
shift 2

translate="--threads 1 train translate --task reverse --train-size 96 --valid-size 8 --test-size 8
           --d-model 16 --heads 2 --layers 1 --ff-dim 32 --batch-size 16 --pictures false
           --log-every 1 --seed 5 --schedule constant --warmup 0"
resumable="$translate --eval-every 6 --checkpoint-every 3"
early="$translate --eval-every 2 --patience 1 --steps 40"
killable="$translate --eval-every 5000 --checkpoint-every 1"
translate="$translate --eval-every 6 --steps 12"
classify="--threads 1 train classify --task order --train-size 96 --valid-size 8 --test-size 8
          --min-length 8 --max-length 16 --d-model 16 --heads 2 --layers 1 --ff-dim 32
          --dropout 0.1 --batch-size 16 --pictures false --steps 12 --eval-every 6 --log-every 1
          --seed 5"

# train NAME ARGS...: one process, quiet; fails the test when it fails
train() {
  name=$1
  shift
  "$qkv" "$@" --out "$scratch/$name" >"$scratch/$name.log" 2>&1 || fail "$name: exit $? ($(tail -1 "$scratch/$name.log"))"
}
same_bytes() {
  cmp -s "$scratch/$1/model.safetensors" "$scratch/$2/model.safetensors" ||
    fail "$1 and $2: model.safetensors differ"
}
# same_metrics A B: metrics.jsonl equal but for the keys that measure time
same_metrics() {
  for r in "$1" "$2"; do
    sed -E 's/"(tokens_per_second|examples_per_second|train_seconds)":[^,}]*,?//g' \
      "$scratch/$r/metrics.jsonl" >"$scratch/$r.metrics"
  done
  cmp -s "$scratch/$1.metrics" "$scratch/$2.metrics" || fail "$1 and $2: metrics.jsonl differ"
}
# losses RUN: the training losses, one a line
losses() { grep -o '"loss":[^,}]*' "$scratch/$1/metrics.jsonl" | cut -d: -f2; }
# close_losses A B: the 12 training losses of B within 1e-5 relative of A's
close_losses() {
  losses "$1" >"$scratch/$1.loss"
  losses "$2" >"$scratch/$2.loss"
  [ "$(wc -l <"$scratch/$1.loss")" -eq 12 ] || fail "$1: expected 12 loss records"
  paste "$scratch/$1.loss" "$scratch/$2.loss" | awk -v what="$2 vs $1" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    END { printf "%s: largest relative loss difference %.3g\n", what, worst;
          exit !(NR == 12 && worst <= 1e-5) }' || fail "$2 leaves the loss curve of $1"
}

# ---- 1. accumulation on one process
train unsplit $translate --dropout 0
train acc2 $translate --dropout 0 --accumulate 2
train acc2_again $translate --dropout 0 --accumulate 2
same_bytes acc2 acc2_again
close_losses unsplit acc2
cmp -s "$scratch/unsplit.loss" "$scratch/acc2.loss" &&
  echo "note: accumulate 2 and unsplit losses print the same digits"
train unsplit_dropout $translate --dropout 0.1
train acc2_dropout $translate --dropout 0.1 --accumulate 2
close_losses unsplit_dropout acc2_dropout

# ---- 2. ranks against accumulation
if [ $# -gt 0 ]; then
  mpirun="$*"
  for np in 2 3; do
    for kind in translate classify; do
      eval "args=\$$kind"
      train "${kind}_acc$np" $args --accumulate $np
      $mpirun -np $np "$qkv" $args --out "$scratch/${kind}_np$np" >"$scratch/${kind}_np$np.log" 2>&1 ||
        fail "${kind}_np$np: exit $? ($(tail -1 "$scratch/${kind}_np$np.log"))"
      same_bytes "${kind}_acc$np" "${kind}_np$np"
      same_metrics "${kind}_acc$np" "${kind}_np$np"
    done
  done
  $mpirun -np 2 "$qkv" $translate --dropout 0.1 --out "$scratch/np2_dropout" \
    >"$scratch/np2_dropout.log" 2>&1 || fail "np2_dropout: exit $?"
  close_losses unsplit_dropout np2_dropout
  # a batch of 2 over 3 ranks: rank 2's share is empty and it still takes part in the reduction
  tiny_batches="--threads 1 train translate --task reverse --train-size 40 --valid-size 8
                --test-size 8 --d-model 16 --heads 2 --layers 1 --ff-dim 32 --batch-size 2
                --pictures false --steps 6 --eval-every 6 --log-every 1 --seed 2"
  train tiny_acc3 $tiny_batches --accumulate 3
  $mpirun -np 3 "$qkv" $tiny_batches --out "$scratch/tiny_np3" >"$scratch/tiny_np3.log" 2>&1 ||
    fail "tiny_np3: exit $? ($(tail -1 "$scratch/tiny_np3.log"))"
  same_bytes tiny_acc3 tiny_np3

  # ---- 3. resume with the same world size; another one refused
  $mpirun -np 2 "$qkv" $resumable --steps 12 --out "$scratch/whole" >"$scratch/whole.log" 2>&1 || fail "whole: exit $?"
  $mpirun -np 2 "$qkv" $resumable --steps 6 --out "$scratch/halves" >"$scratch/halves.log" 2>&1 ||
    fail "halves (first): exit $?"
  if "$qkv" $resumable --steps 12 --resume "$scratch/halves" >"$scratch/refused.log" 2>&1; then
    fail "one process resumed a run of 2 ranks"
  else
    grep -q "was trained by 2 processes (mpirun -np 2)" "$scratch/refused.log" ||
      fail "the refusal does not name the world size: $(tail -1 "$scratch/refused.log")"
  fi
  $mpirun -np 2 "$qkv" $resumable --steps 12 --resume "$scratch/halves" >>"$scratch/halves.log" 2>&1 ||
    fail "halves (resumed): exit $? ($(tail -1 "$scratch/halves.log"))"
  same_bytes whole halves

  # ---- 4. a rank killed mid-run ends the job within seconds, naming the rank; the last
  # checkpoint stays resumable
  $mpirun -np 2 "$qkv" $killable --steps 5000 \
    --out "$scratch/killed" >"$scratch/killed.log" 2>&1 &
  job=$!
  i=0
  while [ ! -e "$scratch/killed/trainer_state.json" ] && [ "$i" -lt 600 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  # rank 1's scratch folder is named after its pid (train/trainer/rank_run_dir.h)
  rank1=$(ls -dt "${TMPDIR:-/tmp}"/qkv-rank1-* 2>/dev/null | head -1 | sed 's/.*-//')
  if [ -z "$rank1" ]; then
    fail "killed: no checkpoint or no rank 1 after 60 s"
    kill "$job"
  else
    kill -9 "$rank1"
    rm -rf "${TMPDIR:-/tmp}/qkv-rank1-$rank1"  # a killed rank cannot remove its scratch folder
    start=$(date +%s)
    wait "$job"
    rc=$?
    took=$(($(date +%s) - start))
    echo "rank 1 killed: the job ended after ${took} s with exit $rc"
    [ "$rc" -ne 0 ] || fail "killed: the job exited 0"
    [ "$took" -le 20 ] || fail "killed: the job took ${took} s to end"
    grep -q "rank 1" "$scratch/killed.log" || fail "killed: no line names rank 1: $(tail -3 "$scratch/killed.log")"
    step=$(grep -o '"step": *[0-9]*' "$scratch/killed/trainer_state.json" | grep -o '[0-9]*$')
    $mpirun -np 2 "$qkv" $killable --steps $((step + 2)) \
      --resume "$scratch/killed" >"$scratch/killed_resumed.log" 2>&1 ||
      fail "killed: the checkpoint of step $step does not resume: $(tail -1 "$scratch/killed_resumed.log")"
  fi

  # ---- 5. SIGTERM to mpirun: every rank stops after the same step, one checkpoint, resumable.
  # Open MPI's mpirun stops reading the ranks' output at once, passes SIGTERM on
  # odls_base_sigkill_timeout seconds later and SIGKILL as long after that (1 s by default,
  # which a step and its checkpoint can outlast on a busy machine). At 25 s rank 0's progress
  # lines fill the undrained pipe first (here after about 200 steps, 15 s): the signal must free
  # the blocked write (interrupt.cpp) and the trainer print nothing more before its checkpoint.
  # Other MPIs ignore the variable.
  OMPI_MCA_odls_base_sigkill_timeout=25 $mpirun -np 2 "$qkv" $killable --steps 50000 --out "$scratch/stopped" >"$scratch/stopped.log" 2>&1 &
  job=$!
  i=0
  while [ ! -e "$scratch/stopped/trainer_state.json" ] && [ "$i" -lt 600 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -TERM "$job"
  wait "$job"
  n=$(grep -c "interrupted by SIGTERM" "$scratch/stopped/log.txt")
  [ "$n" -eq 1 ] || fail "stopped: log.txt has $n interruption lines, want 1"
  step=$(grep -o '"step": *[0-9]*' "$scratch/stopped/trainer_state.json" | grep -o '[0-9]*$')
  grep -q "the checkpoint of step $step is in" "$scratch/stopped/log.txt" ||
    fail "stopped: the checkpoint (step $step) is not the one the interruption names"
  $mpirun -np 2 "$qkv" $killable --steps $((step + 2)) --resume "$scratch/stopped" \
    >"$scratch/stopped_resumed.log" 2>&1 ||
    fail "stopped: step $step does not resume: $(tail -1 "$scratch/stopped_resumed.log")"

  # ---- 6. clipping, early stopping and the non-finite check agree with one process
  train clip_acc2 $translate --clip 0.05 --accumulate 2
  $mpirun -np 2 "$qkv" $translate --clip 0.05 --out "$scratch/clip_np2" >"$scratch/clip_np2.log" 2>&1 ||
    fail "clip_np2: exit $?"
  same_bytes clip_acc2 clip_np2
  same_metrics clip_acc2 clip_np2
  train early_acc2 $early --accumulate 2
  $mpirun -np 2 "$qkv" $early --out "$scratch/early_np2" >"$scratch/early_np2.log" 2>&1 ||
    fail "early_np2: exit $?"
  same_metrics early_acc2 early_np2
  last_step=$(grep -o '"step":[0-9]*' "$scratch/early_np2/metrics.jsonl" | tail -1 | cut -d: -f2)
  [ "${last_step:-40}" -lt 40 ] || fail "early_np2: did not stop early (last step ${last_step:-none})"
  "$qkv" $translate --lr 1e30 --accumulate 2 --out "$scratch/nan_acc2" >"$scratch/nan_acc2.log" 2>&1 &&
    fail "nan_acc2: a loss of lr 1e30 trained to the end"
  $mpirun -np 2 "$qkv" $translate --lr 1e30 --out "$scratch/nan_np2" >"$scratch/nan_np2.log" 2>&1 &&
    fail "nan_np2: a loss of lr 1e30 trained to the end"
  want=$(grep -o 'non-finite at step [0-9]*' "$scratch/nan_acc2.log" | head -1)
  [ -n "$want" ] || fail "nan_acc2: no non-finite line: $(tail -1 "$scratch/nan_acc2.log")"
  grep -q "$want" "$scratch/nan_np2.log" ||
    fail "nan_np2: does not stop at '$want': $(grep non-finite "$scratch/nan_np2.log" | head -2)"
fi

[ "$failures" -eq 0 ] && echo "data_parallel: all passed"
exit "$failures"
