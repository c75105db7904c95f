#!/bin/sh
# The command line's bad-input catalogue: each case must exit with the stated code and print
# exactly one line on stderr ("qkv: error: ..." naming what was wrong), never a stack dump.
# Usage: tests/cli/bad_input.sh QKV_BINARY SCRATCH_DIR. Prints one line per case; exits 1 if any
# case failed. Run by ctest as cli_bad_input.
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"

# Every case here is a refusal (common.sh).
check() { refused "$@"; }

# ---- options and configs
check "mistyped flag: the closest one" 2 "unknown option --stpes \(did you mean '--steps'\?\)" \
  "$qkv" train translate --stpes 100
check "mistyped command: the closest one" 2 "unknown command 'trian' \(did you mean 'train'\?\)" \
  "$qkv" trian
check "mistyped subcommand: the closest one" 2 \
  "unknown command 'clasify' \(did you mean 'classify'\?\)" "$qkv" train clasify
check "classify: only classification tasks" 2 \
  "--task: must be one of order, classify, fashion-mnist, got \"reverse\"" \
  "$qkv" train classify --task reverse
check "translate has no classifier-only flag" 2 "unknown option --pooling" \
  "$qkv" train translate --pooling mean
check "unknown flag exits 2" 2 "no-such-option" "$qkv" eval --run "$scratch" --no-such-option
check "bench: second GPU" 1 "benchmarks run on cpu or cuda \(device 0\), got 'cuda:1'" \
  "$qkv" bench attention --device cuda:1
check "target_value beyond a fraction" 1 "target_value: 1.5 is beyond exact_match, a fraction from 0 to 1" \
  "$qkv" train translate --target-value 1.5 --out "$scratch/x"
check "missing required option exits 2" 2 "--run is required" "$qkv" eval
check "gradcheck: --filter matching no case" 1 "gradcheck: --filter 'no_such_op' matches no case" \
  "$qkv" gradcheck --filter no_such_op
printf '{"d_model": 16, "stepz": 4}' >"$scratch/unknown.json"
check "config: unknown key" 1 "unknown key 'stepz' \(did you mean 'steps'\?\)" \
  "$qkv" train translate --config "$scratch/unknown.json" --out "$scratch/x"
printf '{"d_model": "16"}' >"$scratch/mistyped.json"
check "config: mistyped value" 1 "'d_model' must be an integer" \
  "$qkv" train translate --config "$scratch/mistyped.json" --out "$scratch/x"
printf '{"d_model": 16,' >"$scratch/broken.json"
check "config: not JSON" 1 "broken.json: not valid JSON" \
  "$qkv" train translate --config "$scratch/broken.json" --out "$scratch/x"
check "config: missing file" 1 "--config: cannot read .*nothere.json" \
  "$qkv" train translate --config "$scratch/nothere.json" --out "$scratch/x"
check "flag: not an integer names the flag, exits 2" 2 \
  "--steps: must be an integer, got string \"abc\"" \
  "$qkv" train translate --steps abc --out "$scratch/x"

# Values that would otherwise be ignored, misread or fatal are refused
check "flag: log-every 0 (not a SIGFPE)" 2 "--log-every: must be in 1\.\.1000000000, got 0" \
  "$qkv" train translate --log-every 0 --out "$scratch/log0"
printf '{"log_every": 0}' >"$scratch/log0.json"
check "config: log_every 0" 1 "log0.json: key 'log_every' must be in 1\.\.1000000000" \
  "$qkv" train translate --config "$scratch/log0.json" --out "$scratch/log0"
check "flag: negative validation split" 2 "--valid-size: must be in 0\.\.100000000, got -1" \
  "$qkv" train translate --valid-size=-1 --out "$scratch/valid0"
check "flag: negative test split" 2 "--test-size: must be in 0\.\.100000000, got -1" \
  "$qkv" train translate --test-size=-1 --out "$scratch/test0"
check "flags: --steps and --epochs together" 2 "--steps excludes --epochs" \
  "$qkv" train translate --steps 100 --epochs 2 --out "$scratch/both"
printf '{"steps": 100, "epochs": 2}' >"$scratch/both.json"
check "config: steps and epochs together" 1 \
  "keys 'steps' \(100\) and 'epochs' \(2\) are both set: give one of them" \
  "$qkv" train translate --config "$scratch/both.json" --out "$scratch/both"
check "flag: beta1 1.0" 2 "--beta1: must be in \[0, 1\), got 1.0" \
  "$qkv" train translate --beta1 1.0 --out "$scratch/beta"
check "flag: weight decay -1" 2 "--weight-decay: must be in \[0, 100\], got -1" \
  "$qkv" train translate --weight-decay=-1 --out "$scratch/wd"
printf '{"threads": 100000}' >"$scratch/threads.json"
check "config: threads 100000" 1 "'threads' must be in 0\.\.1024, got 100000" \
  "$qkv" train translate --config "$scratch/threads.json" --out "$scratch/threads"
printf '{"lr": 0.1, "lr": 0.2}' >"$scratch/twice.json"
check "config: a key given twice" 1 "twice.json: key 'lr' appears twice" \
  "$qkv" train translate --config "$scratch/twice.json" --out "$scratch/twice"
check "train: device cuda: (not a stoi error)" 1 "'device' must be cpu, cuda or cuda:N .*got \"cuda:\"" \
  "$qkv" train translate $tiny --steps 1 --device cuda: --out "$scratch/dev"
check "eval: device cuda:1x (not read as cuda:1)" 1 "--device: expected cpu, cuda or cuda:N .*'cuda:1x'" \
  "$qkv" eval --run "$scratch/nowhere" --device cuda:1x
for n in abc 2x -3 0 1000000; do
  check "QKV_NUM_THREADS=$n" 1 "QKV_NUM_THREADS: expected a whole number in 1\.\.1024, got '$n'" \
    env QKV_NUM_THREADS=$n "$qkv" info
done
check "QKV_CPU_AVX512_BF16=yes" 1 \
  "QKV_CPU_AVX512_BF16: expected 0 \(off\) or 1 \(on without measuring\), got 'yes'" \
  env QKV_CPU_AMX=0 QKV_CPU_AVX512_BF16=yes "$qkv" info

# A start that fails leaves no run folder behind.
check_absent() {
  if [ -e "$2" ]; then
    echo "FAIL $1: $2 was created"
    failures=$((failures + 1))
  else
    echo "ok   $1"
  fi
}
check "unknown task: only the command's tasks, the closest first" 2 \
  "--task: must be one of copy, reverse, sort, dates, numbers, pairs, got \"revrse\" \(did you mean 'reverse'\?\)" \
  "$qkv" train translate --task revrse --out "$scratch/typo"
check_absent "failed start: unknown task leaves no folder" "$scratch/typo"
check "failed start: missing data" 1 "nothere.tsv: cannot open" \
  "$qkv" train translate --task pairs --data "$scratch/nothere.tsv" --out "$scratch/nodata"
check_absent "failed start: missing data leaves no folder" "$scratch/nodata"

# ---- TSV corpora that could be read as other data than they hold
printf 'abc\tcba\nthank you\tmerci\tbeaucoup\n' >"$scratch/three.tsv"
check "data: a third column" 1 "three.tsv:2: more than two columns" \
  "$qkv" train translate --task pairs --data "$scratch/three.tsv" --out "$scratch/three"
printf 'abc\tcba\nxyz\t  \n' >"$scratch/blank.tsv"
check "data: a target of spaces" 1 "blank.tsv:2: empty target \(only spaces\)" \
  "$qkv" train translate --task pairs --data "$scratch/blank.tsv" --out "$scratch/blank"
printf 'abc\tcba\rxyz\tzyx\rdef\tfed\r' >"$scratch/mac.tsv"
check "data: CR-only line ends (not '1 examples are too few')" 1 "mac.tsv:1: .*end in CR alone" \
  "$qkv" train translate --task pairs --data "$scratch/mac.tsv" --out "$scratch/mac"

# ---- files the run needs or writes
check "data: missing TSV" 1 "nothere.tsv: cannot open" \
  "$qkv" train translate --task pairs --data "$scratch/nothere.tsv" --out "$scratch/x"
check "data: missing Fashion-MNIST" 1 "train-images-idx3-ubyte.gz not found" \
  "$qkv" train classify --task fashion-mnist --data "$scratch/nothere" --out "$scratch/x"
: >"$scratch/a_file"
# (a folder inside a plain file: unwritable even for root, unlike chmod)
check "output folder cannot be created" 1 "--out: cannot create run folder" \
  "$qkv" train translate $tiny --steps 1 --out "$scratch/a_file/run"
check "device: QKV_CUDA_LIBRARY names no file" 1 \
  "cuda:0 is not available: QKV_CUDA_LIBRARY=/no/such.so does not exist" \
  env QKV_CUDA_LIBRARY=/no/such.so "$qkv" train translate $tiny --steps 1 --device cuda --out "$scratch/x"
if ! "$qkv" info 2>/dev/null | grep -q "^cuda: .*compute capability"; then
  check "device: no CUDA backend" 1 "cuda:0 is not available" \
    "$qkv" train translate $tiny --steps 1 --device cuda --out "$scratch/x"
  check "bench: no CUDA" 1 "--device cuda: no CUDA backend \\(unavailable: " \
    "$qkv" bench gemm --device cuda
fi

# ---- a non-finite loss names the op and keeps the checkpoint
check "non-finite loss names the op" 1 \
  "non-finite at step [0-9]+ \(op '[a-z_0-9]+' produced (NaN|Inf) in its (forward|backward)" \
  "$qkv" --threads 1 train translate $tiny --steps 5 --lr 1e30 --warmup 0 --checkpoint-every 1 \
  --out "$scratch/nan"

# ---- a trained run, then damaged copies of it
run=$scratch/run
if ! "$qkv" --threads 1 train translate $tiny --steps 2 --out "$run" >/dev/null 2>&1; then
  echo "FAIL could not train the run the remaining cases need"
  exit 1
fi
check "translate: warns of characters outside the vocabulary" 0 \
  "warning: text 1 has 2 characters outside the vocabulary \('z', 'Q'\); they read as <unk>" \
  "$qkv" translate --run "$run" "abzQ"
check "translate: empty text" 1 "translate: text 1 is empty" "$qkv" translate --run "$run" ""
check "translate: text over max_len" 1 "text 1 has 17 tokens, more than the model's max_len of 16" \
  "$qkv" translate --run "$run" "aaaaaaaaaaaaaaaaa"
check "attention: empty text" 1 "attention: text 1 is empty" \
  "$qkv" attention --run "$run" "" --out "$scratch/attn"
check "eval: int8 is CPU only" 1 "--int8: int8 Linear layers run on the CPU only" \
  "$qkv" eval --run "$run" --int8 --device cuda
check "eval: unknown precision exits 2" 2 "--precision: fp16 not in" \
  "$qkv" eval --run "$run" --precision fp16
if ! "$qkv" info 2>/dev/null | grep -q "^cuda: .*compute capability"; then
  check "eval: no CUDA backend" 1 "cuda:0 is not available" "$qkv" eval --run "$run" --device cuda
  check "translate: no CUDA backend" 1 "cuda:0 is not available" \
    "$qkv" translate --run "$run" --device cuda "abc"
fi
check "eval: no run folder" 1 "no run folder" "$qkv" eval --run "$scratch/nowhere"

cp -r "$run" "$scratch/truncated"
head -c 3000 "$run/model.safetensors" >"$scratch/truncated/model.safetensors"
check "eval --last: truncated checkpoint" 1 "model.safetensors.*truncated" \
  "$qkv" eval --last --run "$scratch/truncated"
cp -r "$run" "$scratch/truncated_best"
head -c 3000 "$run/best.safetensors" >"$scratch/truncated_best/best.safetensors"
check "eval: truncated best model" 1 "best.safetensors.*truncated" \
  "$qkv" eval --run "$scratch/truncated_best"
cp -r "$run" "$scratch/int8_best" &&
  "$qkv" quantize --run "$scratch/int8_best" --latency-examples 1 >/dev/null
check "eval --int8 --last of a model quantized from the best" 1 \
  "quantized from best.safetensors, not model.safetensors; evaluate it without --last" \
  "$qkv" eval --int8 --last --run "$scratch/int8_best"
cp -r "$run" "$scratch/nomodel" && rm "$scratch/nomodel/model.safetensors"
check "eval --last: checkpoint missing" 1 "has no model.safetensors" \
  "$qkv" eval --last --run "$scratch/nomodel"
cp -r "$run" "$scratch/vocab"
printf '{"tokenizer": "char", "tokens": ["<pad>", "<s>", "</s>", "<unk>", "x"]}' \
  >"$scratch/vocab/source_vocab.json"
check "eval: vocabulary does not match the checkpoint" 1 "vocabularies .* do not match the model" \
  "$qkv" eval --run "$scratch/vocab"
cp -r "$run" "$scratch/inflated"  # model.json edited to a far wider model than its weights
sed 's/"d_model": *16/"d_model":4096/' "$run/model.json" >"$scratch/inflated/model.json"
check "eval: model.json far larger than its weights" 1 "do not belong together" \
  "$qkv" eval --run "$scratch/inflated"
cp -r "$run" "$scratch/heads"  # model.json edited to other heads: the same tensors fit
sed 's/"num_heads": *2/"num_heads": 1/' "$run/model.json" >"$scratch/heads/model.json"
check "eval: model.json edited to other heads" 1 "num_heads 1 \(config.json gives 2\)" \
  "$qkv" eval --run "$scratch/heads"
cp -r "$run" "$scratch/folder" && rm "$scratch/folder/model.safetensors" &&
  mkdir "$scratch/folder/model.safetensors"
check "eval --last: model.safetensors is a folder" 1 "folder/model.safetensors\): is a folder" \
  "$qkv" eval --last --run "$scratch/folder"
check "resume: other heads" 1 "--resume: cannot change heads \(2 -> 4\) of the run in" \
  "$qkv" train translate --resume "$run" --heads 4
check "resume: other width, in one short line" 1 \
  "--resume: cannot change d_model \(16 -> 64\) of the run in [^ ]*: they fix .{0,160}$" \
  "$qkv" train translate --resume "$run" --d-model 64
check "resume: other seed (not blamed on the vocabulary)" 1 "cannot change seed \(1 -> 7\)" \
  "$qkv" train translate --resume "$run" --seed 7
check "resume: fewer steps than trained" 1 "--steps: 1 is fewer than the 2 steps" \
  "$qkv" train translate --resume "$run" --steps 1
check "resume: not a run folder" 1 "--resume: .*nowhere is not a run folder" \
  "$qkv" train translate --resume "$scratch/nowhere"
check "resume on other data" 1 "--resume: cannot change task \(\"copy\" -> \"dates\"\)" \
  "$qkv" train translate --resume "$run" --task dates --steps 4
finish
