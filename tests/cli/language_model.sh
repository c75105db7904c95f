#!/bin/sh
# `qkv train lm`, `qkv sample`, `qkv eval` and `qkv attention` on a tiny corpus (seconds on one
# thread): what the run folder holds, a resumed run ending in an uninterrupted run's weights byte
# for byte, SIGTERM's checkpoint, sampling through the KV cache giving the tokens of recomputing
# the whole prefix, eval --last reproducing the training's last validation loss, best.safetensors
# holding the lowest one (which eval, sample and attention use), the attention pictures,
# and the bad inputs (one line each, naming the option or file).
# With MPI (an MPIRUN command given), `mpirun -np 2` ends in the bytes of one process with
# --accumulate 2.
# Usage: tests/cli/language_model.sh QKV_BINARY SCRATCH_DIR [MPIRUN...]. Run by ctest as
# cli_language_model.
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"
shift 2

# A corpus of sentences from a small set, in a fixed pseudo-random order (lowercase only).
corpus=$scratch/corpus.txt
awk 'BEGIN { srand(7); split("the cat sat on the mat. |a dog ran in the park. |we like green tea. |my hat is red. ", s, "|");
             for (i = 0; i < 700; i++) printf "%s", s[int(rand() * 4) + 1] }' >"$corpus"

tiny="--data $corpus --context 16 --d-model 32 --heads 2 --layers 2 --ff-dim 64 --dropout 0.1
      --batch-size 8 --valid-size 1000 --log-every 5 --pictures false --seed 5"
train() { "$qkv" --threads 1 train lm $tiny "$@"; }
trained() { "$qkv" --threads 1 train lm "$@"; }  # without the tiny options

# ---- a run, and what its folder holds
run=$scratch/run
if ! train --steps 30 --eval-every 10 --out "$run" >"$scratch/run.log" 2>&1; then
  echo "FAIL could not train the run the cases need:"
  tail -5 "$scratch/run.log"
  exit 1
fi
missing=""
for f in config.json log.txt metrics.jsonl model.json tokenizer.json model.safetensors \
  optimizer.safetensors trainer_state.json; do
  [ -e "$run/$f" ] || missing="$missing $f"
done
evals=$(grep -c '"valid_loss"' "$run/metrics.jsonl")
bits=$(grep -c '"bits_per_character".*"perplexity"' "$run/metrics.jsonl")
speed=$(grep -c '"tokens_per_second"' "$run/metrics.jsonl")
if [ -z "$missing" ] && [ "$evals" -eq 3 ] && [ "$bits" -eq 3 ] && [ "$speed" -gt 0 ] &&
  grep -q '"architecture": "GPT"' "$run/model.json" && grep -q '"task": "lm"' "$run/config.json"; then
  pass "the run folder holds its files, and metrics.jsonl 3 evaluations with bits per character"
else
  fail "run folder: missing [$missing], $evals evaluations, $bits with bits per character, $speed speeds"
fi

# ---- --profile: the shared loop's profiler, on the language model's step too
if train --steps 4 --eval-every 4 --profile 2 --out "$scratch/profiled" >"$scratch/profiled.log" 2>&1 &&
  [ -s "$scratch/profiled/trace.json" ] && grep -q "MFU" "$scratch/profiled.log" &&
  grep -q "efficient_attention\|linear" "$scratch/profiled.log"; then
  pass "--profile 2: the per-op table with its MFU lines, and trace.json"
else
  fail "--profile 2: $(tail -3 "$scratch/profiled.log")"
fi

# ---- --target-value on a loss is reached from above: with a target just over the run's second
# validation loss, the same run stops at the first evaluation at or below it, before step 30.
target=$(grep '"valid_loss"' "$run/metrics.jsonl" | sed -n 2p |
  sed 's/.*"valid_loss":\([0-9.e-]*\).*/\1/' | awk '{ printf "%.4f", $1 + 1e-4 }')
first=$(grep '"valid_loss"' "$run/metrics.jsonl" |
  sed 's/.*"step":\([0-9]*\),.*"valid_loss":\([0-9.e-]*\).*/\1 \2/' |
  awk -v t="$target" '$2 <= t { print $1; exit }')
train --steps 30 --eval-every 10 --target-value "$target" --out "$scratch/target" \
  >"$scratch/target.log" 2>&1
stopped=$(sed -n 's/.*"step":\([0-9]*\),.*"valid_loss".*/\1/p' "$scratch/target/metrics.jsonl" | tail -1)
if [ -n "$first" ] && [ "$first" -lt 30 ] && [ "$stopped" = "$first" ] &&
  grep -q "target valid_loss $target reached" "$scratch/target.log"; then
  pass "--target-value $target on valid_loss: stopped at step $stopped, the first evaluation at or below it"
else
  fail "--target-value $target: stopped at '$stopped', first at or below '$first'; $(tail -2 "$scratch/target.log")"
fi

refused "a run in --out is refused" 1 "--out: .* already holds files of a run" \
  train --steps 30 --out "$run"
if train --steps 2 --eval-every 2 --out "$run" --overwrite >/dev/null 2>&1 &&
  grep -q '"step": 2' "$run/trainer_state.json"; then
  pass "--overwrite replaces it"
else
  fail "--overwrite did not replace the run"
fi

# ---- --resume ends in the uninterrupted run's weights (a constant learning rate after warm-up,
# so the 15-step run's schedule is the first 15 steps of the 30-step one's)
resumable="--schedule constant --warmup 3 --eval-every 5"
train --steps 30 $resumable --out "$scratch/straight" >/dev/null 2>&1
train --steps 15 $resumable --out "$scratch/resumed" >/dev/null 2>&1
"$qkv" --threads 1 train lm --resume "$scratch/resumed" --steps 30 >"$scratch/resume.log" 2>&1
if cmp -s "$scratch/straight/model.safetensors" "$scratch/resumed/model.safetensors"; then
  pass "15 steps resumed to 30 end in the 30-step run's model.safetensors, byte for byte"
else
  fail "the resumed run's weights differ from the uninterrupted run's"
  tail -3 "$scratch/resume.log" | sed 's/^/     | /'
fi
refused "--resume refuses a changed model shape" 1 "--resume: cannot change d_model \(32 -> 48\)" \
  "$qkv" --threads 1 train lm --resume "$scratch/resumed" --d-model 48 --steps 40

# ---- SIGTERM: a checkpoint, one line, exit 143, and it resumes to the same bytes
long="--steps 400 $resumable --checkpoint-every 1"
train $long --out "$scratch/reference" >/dev/null 2>&1
"$qkv" --threads 1 train lm $tiny $long --out "$scratch/term" >"$scratch/term.out" 2>"$scratch/term.err" &
pid=$!
i=0
while [ ! -e "$scratch/term/trainer_state.json" ] && [ "$i" -lt 6000 ]; do
  i=$((i + 1))
  sleep 0.01
done
kill -s TERM "$pid"
wait "$pid"
code=$?
step=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$scratch/term/trainer_state.json")
if [ "$code" -eq 143 ] && [ "$(wc -l <"$scratch/term.err")" -eq 1 ] &&
  grep -q "^qkv: interrupted by SIGTERM: the checkpoint of step $step is in" "$scratch/term.err" &&
  "$qkv" --threads 1 train lm --resume "$scratch/term" >/dev/null 2>&1 &&
  cmp -s "$scratch/reference/model.safetensors" "$scratch/term/model.safetensors"; then
  pass "SIGTERM at step $step: exit 143, one line, resumed to the uninterrupted run's weights"
else
  fail "SIGTERM: exit $code (want 143), checkpoint of step $step:"
  sed 's/^/     | /' "$scratch/term.err" | head -3
fi

# ---- sampling: the KV cache gives the tokens of recomputing the prefix (40 tokens: past the
# context of 16, where both recompute the last 16)
run=$scratch/straight
same=0
for options in "--temperature 1" "--temperature 0.8 --top-k 5" "--temperature 1.2 --top-p 0.9" \
  "--temperature 0"; do
  "$qkv" --threads 1 sample --run "$run" --prompt "the " --tokens 40 --seed 3 $options >"$scratch/cached.txt"
  "$qkv" --threads 1 sample --run "$run" --prompt "the " --tokens 40 --seed 3 $options --no-cache >"$scratch/recomputed.txt"
  if cmp -s "$scratch/cached.txt" "$scratch/recomputed.txt" && [ "$(wc -c <"$scratch/cached.txt")" -gt 40 ]; then
    same=$((same + 1))
  else
    fail "sample $options: the KV cache and recomputing the prefix differ:"
    cat "$scratch/cached.txt" "$scratch/recomputed.txt" | sed 's/^/     | /'
  fi
done
[ "$same" -eq 4 ] && pass "sample: the KV cache and recomputing the prefix give the same text (4 settings)"
"$qkv" --threads 1 sample --run "$run" --prompt "the " --tokens 40 --seed 4 >"$scratch/seed4.txt"
if ! cmp -s "$scratch/seed4.txt" "$scratch/cached.txt" && grep -q "^the " "$scratch/seed4.txt"; then
  pass "sample: another --seed draws another text after the prompt"
else
  fail "sample: seeds 3 and 4 gave the same text, or the prompt is not its start"
fi
refused "sample: a prompt with characters outside the vocabulary names them" 1 \
  "--prompt: has characters that the training text of .* never held: 'T' \(U\+0054\), 'Z' \(U\+005A\)$" \
  "$qkv" sample --run "$run" --prompt "The Zt" --tokens 5
refused "sample: an empty prompt" 1 "--prompt: must hold at least one character" \
  "$qkv" sample --run "$run" --prompt "" --tokens 5
refused "sample: a negative temperature" 1 "--temperature" \
  "$qkv" sample --run "$run" --temperature -1
refused "sample: top-p above 1" 1 "--top-p" "$qkv" sample --run "$run" --top-p 1.5

# ---- eval --last: the validation split scores the loss the training's last evaluation wrote
# (every window of it: --valid-size 1000 exceeds them)
logged=$(grep '"valid_loss"' "$run/metrics.jsonl" | tail -1 | sed 's/.*"valid_loss":\([0-9.e-]*\).*/\1/')
scored=$("$qkv" --threads 1 eval --run "$run" --last | sed -n 's/^loss \([0-9.]*\) nats per token, \([0-9.]*\) bits per character.*validation split.*/\1 \2/p')
if [ -n "$scored" ] && echo "$logged $scored" |
  awk '{ d = $1 - $2; if (d < 0) d = -d; b = $2 / log(2) - $3; if (b < 0) b = -b; exit !(d < 1e-4 && b < 1e-3) }'; then
  pass "eval: the validation split's loss is the last logged valid_loss ($logged), bits = loss / ln 2"
else
  fail "eval: '$scored' against the logged $logged"
fi
# ---- best.safetensors: the lowest validation loss. Trained on one sentence and validated on
# another, the model first learns what they share, then the training sentence alone: the
# validation loss bottoms out well before the last step.
awk 'BEGIN { for (i = 0; i < 90; i++) printf "the cat sat on the mat. "; for (i = 0; i < 10; i++) printf "a dog ran in the park. " }' >"$scratch/overfit.txt"
if trained --data "$scratch/overfit.txt" --context 16 --d-model 32 --heads 2 --layers 2 \
  --ff-dim 64 --dropout 0 --batch-size 8 --valid-size 1000 --pictures false --seed 5 \
  --steps 150 --eval-every 10 --out "$scratch/overfit" >"$scratch/overfit.log" 2>&1; then
  # "STEP LOSS" of the lowest valid_loss, then of the last one
  lowest=$(grep '"valid_loss"' "$scratch/overfit/metrics.jsonl" |
    sed 's/.*"step":\([0-9]*\),.*"valid_loss":\([0-9.e-]*\).*/\1 \2/' | sort -g -k2 | head -1)
  last=$(grep '"valid_loss"' "$scratch/overfit/metrics.jsonl" | tail -1 |
    sed 's/.*"step":\([0-9]*\),.*"valid_loss":\([0-9.e-]*\).*/\1 \2/')
  best_line=$("$qkv" --threads 1 eval --run "$scratch/overfit" 2>/dev/null)
  last_line=$("$qkv" --threads 1 eval --run "$scratch/overfit" --last 2>/dev/null)
  best_scored=$(echo "$best_line" | sed -n 's/^loss \([0-9.]*\) nats.*best.safetensors (valid_loss [0-9.]* at step \([0-9]*\)).*/\2 \1/p')
  last_scored=$(echo "$last_line" | sed -n 's/^loss \([0-9.]*\) nats.*model.safetensors (the last checkpoint).*/\1/p')
  if [ -n "$best_scored" ] && [ -n "$last_scored" ] &&
    echo "$lowest $last $best_scored $last_scored" | awk '{ d = $2 - $6; e = $4 - $7
      if (d < 0) d = -d; if (e < 0) e = -e
      exit !($1 < $3 && $4 > $2 + 0.05 && $5 == $1 && d < 1e-4 && e < 1e-4) }'; then
    pass "best.safetensors: step and valid_loss $lowest (the lowest), eval --last: the last $last"
  else
    fail "best.safetensors: lowest '$lowest', last '$last'; eval: '$best_line'; --last: '$last_line'"
  fi
  # sample and attention load the weights eval does: the best and the last give other outputs
  o=$scratch/overfit
  "$qkv" --threads 1 sample --run "$o" --prompt "the " --tokens 60 --seed 2 >"$o.best.txt" 2>/dev/null
  "$qkv" --threads 1 sample --run "$o" --prompt "the " --tokens 60 --seed 2 --last >"$o.last.txt" 2>/dev/null
  "$qkv" --threads 1 attention --run "$o" "the cat" --out "$o.best_maps" >/dev/null 2>&1
  "$qkv" --threads 1 attention --run "$o" "the cat" --out "$o.last_maps" --last >/dev/null 2>&1
  if [ -s "$o.best.txt" ] && [ -s "$o.last.txt" ] && ! cmp -s "$o.best.txt" "$o.last.txt" &&
    [ -s "$o.best_maps/block.0.self.png" ] &&
    ! cmp -s "$o.best_maps/block.0.self.png" "$o.last_maps/block.0.self.png"; then
    pass "sample and attention: best.safetensors, and with --last the last checkpoint"
  else
    fail "sample or attention: the same output with and without --last"
  fi
else
  fail "could not train the overfitting run:"
  tail -5 "$scratch/overfit.log"
fi
awk 'BEGIN { for (i = 0; i < 20; i++) printf "zzzz qqqq " }' >"$scratch/odd.txt"
other=$("$qkv" --threads 1 eval --run "$run" --data "$corpus" 2>/dev/null | sed -n 's/^loss \([0-9.]*\) .*/\1/p')
odd=$("$qkv" --threads 1 eval --run "$run" --data "$scratch/odd.txt" 2>/dev/null | sed -n 's/^loss \([0-9.]*\) .*/\1/p')
if [ -n "$other" ] && [ -n "$odd" ] && echo "$other $odd" | awk '{ exit !($2 > $1 + 0.3) }'; then
  pass "eval --data: the training text scores $other nats per token, unlike text $odd"
else
  fail "eval --data: corpus '$other', unlike text '$odd'"
fi
refused "eval --data: a missing file" 1 "--data: .*missing.txt" \
  "$qkv" eval --run "$run" --data "$scratch/missing.txt"

# ---- attention: one picture per block, of a causal map
rm -rf "$scratch/attention"
"$qkv" --threads 1 attention --run "$run" "the cat sat" --out "$scratch/attention" >"$scratch/attention.txt"
pictures=$(ls "$scratch/attention" 2>/dev/null | tr '\n' ' ')
if [ "$pictures" = "block.0.self.png block.1.self.png " ] &&
  [ "$(head -c 4 "$scratch/attention/block.0.self.png" | tail -c 3)" = "PNG" ]; then
  pass "attention: block.0.self.png and block.1.self.png"
else
  fail "attention wrote: $pictures"
fi
refused "attention: a text longer than the context" 1 "attention: the text has 20 tokens, more than the model's context of 16" \
  "$qkv" attention --run "$run" "the cat sat on the m" --out "$scratch/attention"

# ---- BPE: bits per byte
if train --steps 4 --eval-every 4 --tokenizer bpe --vocab-size 300 --out "$scratch/bpe" >/dev/null 2>&1 &&
  grep -q '"bits_per_byte"' "$scratch/bpe/metrics.jsonl" &&
  "$qkv" --threads 1 sample --run "$scratch/bpe" --prompt "Any Text" --tokens 5 >/dev/null; then
  pass "--tokenizer bpe: metrics in bits per byte; any prompt samples"
else
  fail "the BPE run"
fi

# ---- --precision bf16: products in bfloat16, the loss within 0.02 of float32's after 60 steps
last_valid() { grep '"valid_loss"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"valid_loss":\([0-9.e-]*\).*/\1/'; }
for p in fp32 bf16; do
  train --steps 60 --eval-every 60 --precision $p --out "$scratch/$p" >/dev/null 2>&1
done
f32=$(last_valid "$scratch/fp32") b16=$(last_valid "$scratch/bf16")
if [ -n "$f32" ] && [ -n "$b16" ] && grep -q '"precision": "bf16"' "$scratch/bf16/config.json" &&
  echo "$f32 $b16" | awk '{ d = $1 - $2; if (d < 0) d = -d; exit !(d < 0.02) }'; then
  pass "--precision bf16: valid loss $b16 beside float32's $f32"
else
  fail "--precision bf16: valid loss '$b16' against float32's '$f32'"
fi

# ---- a diverging run stops at the step that went non-finite, naming the op
refused "a non-finite step names the op (anomaly mode)" 1 \
  "train: the (loss|gradient norm) became non-finite at step [0-9]+ \(op '[a-z_]+' produced (NaN|Inf)" \
  train --steps 50 --eval-every 50 --lr 1e12 --warmup 0 --out "$scratch/diverged"

# ---- data parallelism: 2 ranks, each half of every batch, end in --accumulate 2's bytes
if [ $# -gt 0 ]; then
  train --steps 12 --eval-every 6 --accumulate 2 --out "$scratch/acc2" >/dev/null 2>&1
  "$@" -np 2 "$qkv" --threads 1 train lm $tiny --steps 12 --eval-every 6 --out "$scratch/np2" \
    >"$scratch/np2.log" 2>&1
  if cmp -s "$scratch/acc2/model.safetensors" "$scratch/np2/model.safetensors"; then
    pass "mpirun -np 2 ends in the model.safetensors of --accumulate 2 (dropout on)"
  else
    fail "mpirun -np 2 and --accumulate 2 end in different weights:"
    tail -3 "$scratch/np2.log" | sed 's/^/     | /'
  fi
else
  echo "skip mpirun -np 2 (no MPIRUN given: a build without MPI)"
fi

# ---- --help: each subcommand lists the options its models read
lm_help=$("$qkv" train lm --help) translate_help=$("$qkv" train translate --help)
if echo "$lm_help" | grep -q -- "--context INT:1..65536=64" &&
  echo "$lm_help" | grep -q -- "--positional TEXT:{learned,rope}=learned" &&
  echo "$lm_help" | grep -q -- "--patience " && echo "$lm_help" | grep -q -- "--target-value," &&
  ! echo "$lm_help" | grep -Eq -- "--(task|beam|test-size|target-metric) " &&
  ! echo "$translate_help" | grep -Eq -- "--(context|valid-fraction|vocab-size)"; then
  pass "--help: lm has --context, learned|rope positions and early stopping, no --task or --beam; translate has no --context"
else
  fail "--help lists another subcommand's options"
fi

# ---- bad options, each one line naming the option or the file
refused "a missing --data file" 1 "nothing.txt: no such file" \
  trained --data "$scratch/nothing.txt" --out "$scratch/x"
refused "no --data" 1 "--data: qkv train lm needs a UTF-8 text file" \
  "$qkv" train lm --out "$scratch/x"
refused "--positional sinusoidal" 2 "--positional: must be one of learned, rope" \
  train --positional sinusoidal --out "$scratch/x"
refused "--tokenizer whitespace" 2 "--tokenizer: must be one of char, bpe" \
  train --tokenizer whitespace --out "$scratch/x"
refused "--vocab-size below the 256 bytes" 2 "--vocab-size: must be in 256..1048576" \
  train --vocab-size 100 --out "$scratch/x"
refused "--valid-fraction 1" 2 "--valid-fraction: must be in \(0, 1\)" \
  train --valid-fraction 1 --out "$scratch/x"
refused "--context longer than the training text" 1 "training split has .* tokens, fewer than one window of --context \+ 1" \
  trained --data "$corpus" --context 60000 --out "$scratch/x"
refused "a config file's positional" 1 "key 'positional' must be learned or rope for a language model" \
  sh -c "echo '{\"positional\": \"alibi\"}' >'$scratch/bad.json' && '$qkv' train lm --config '$scratch/bad.json' --data '$corpus' --out '$scratch/x'"
refused "bpe on a translation task" 2 "--tokenizer: must be one of char, whitespace" \
  "$qkv" train translate --tokenizer bpe --out "$scratch/x"
refused "qkv sample on a translation run" 1 "--run: .* holds a Seq2SeqTransformer, not a language model" \
  sh -c "'$qkv' --threads 1 train translate --task copy --train-size 50 --valid-size 5 --test-size 5 --d-model 16 --heads 2 --layers 1 --ff-dim 32 --steps 1 --pictures false --out '$scratch/translation' >/dev/null 2>&1; '$qkv' sample --run '$scratch/translation'"
refused "qkv eval --data on a translation run" 1 "--data: only a language-model run is scored on a text" \
  "$qkv" eval --run "$scratch/translation" --data "$corpus"
[ -e "$scratch/x" ] && fail "a refused start left $scratch/x behind"

finish
