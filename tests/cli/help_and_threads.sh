#!/bin/sh
# The command line's help and global options: `qkv train <subcommand> --help` shows each option's
# type, range or choices and default, and only the subcommand's own options; --threads works before
# and after the subcommand. Usage: tests/cli/help_and_threads.sh QKV_BINARY SCRATCH_DIR. Run by
# ctest as cli_help_and_threads.
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"

"$qkv" train translate --help >"$scratch/translate.txt" 2>&1 || fail "train translate --help exits 0"
"$qkv" train classify --help >"$scratch/classify.txt" 2>&1 || fail "train classify --help exits 0"
has "translate --help: --steps typed, ranged, with its default" "$scratch/translate.txt" \
  "--steps INT:0\.\.1000000000=0"
has "translate --help: --epochs, the other way to give a run's length" "$scratch/translate.txt" \
  "--epochs INT:0\.\.1000000000=0"
has "translate --help: --lr a float with its default" "$scratch/translate.txt" \
  "--lr FLOAT:\(0, inf\)=0\.001"
has "translate --help: --task lists the translation tasks, default dates" "$scratch/translate.txt" \
  "--task TEXT:\{copy,reverse,sort,dates,numbers,pairs\}=dates"
has "translate --help: --schedule lists its choices" "$scratch/translate.txt" \
  "--schedule TEXT:\{constant,linear,cosine,noam\}=cosine"
for flag in --model --attention --channels --patch-size --pooling; do
  lacks "translate --help: no classifier-only $flag" "$scratch/translate.txt" "^ *$flag[ ,]"
done
has "classify --help: --pooling with its choices" "$scratch/classify.txt" \
  "--pooling TEXT:\{cls,mean\}=cls"
has "classify --help: --task lists the classification tasks, default order" \
  "$scratch/classify.txt" "--task TEXT:\{order,classify,fashion-mnist\}=order"

tiny="--task copy --train-size 100 --valid-size 8 --test-size 8 --min-length 3 --max-length 5
      --d-model 16 --heads 2 --layers 1 --ff-dim 32 --batch-size 16 --max-len 16 --pictures false
      --steps 1"
# shellcheck disable=SC2086
if "$qkv" train translate $tiny --threads 2 --out "$scratch/after" >/dev/null 2>"$scratch/err"; then
  has "--threads after the subcommand reaches the run" "$scratch/after/config.json" '"threads": 2'
else
  fail "--threads after the subcommand: $(cat "$scratch/err")"
fi
# shellcheck disable=SC2086
if "$qkv" --threads 1 train translate $tiny --out "$scratch/before" >/dev/null 2>"$scratch/err"; then
  has "--threads before the subcommand reaches the run" "$scratch/before/config.json" '"threads": 1'
else
  fail "--threads before the subcommand: $(cat "$scratch/err")"
fi
finish
