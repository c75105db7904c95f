#!/usr/bin/env bash
# Runs each libFuzzer target of a QKV_FUZZ=ON build for a while, one after another (they share the
# machine's cores with everything else), each on a scratch copy of its committed corpus so that
# the inputs libFuzzer adds never land in the repository. Prints one summary line per target.
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS LOADER...      (make fuzz calls it)
#
# A crash, leak, timeout (-timeout=10 s per input) or an input needing over 2 GiB fails the run;
# the input that did it is kept under BUILD_DIR/fuzz-artifacts/<loader>/ to become a regression.
set -uo pipefail
build=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/qkv-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
status=0
summary=()
for loader in "$@"; do
  mkdir -p "$scratch/$loader" "$build/fuzz-artifacts/$loader"
  cp -r "$here/corpus/$loader/." "$scratch/$loader/"
  dict=()
  [ -f "$here/dict/$loader.dict" ] && dict=(-dict="$here/dict/$loader.dict")
  log="$build/fuzz-artifacts/$loader/log.txt"
  echo "== fuzz_$loader for ${seconds}s (log: $log)"
  "$build/fuzz_$loader" "$scratch/$loader" "${dict[@]}" -max_total_time="$seconds" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/$loader/" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  line=$(printf '%-12s %s  executions=%s  per_second=%s  %s' "$loader" \
    "$([ $rc = 0 ] && echo ok || echo FAILED)" "${execs:-?}" "${rate:-?}" "$cov")
  echo "$line"
  summary+=("$line")
  if [ $rc != 0 ]; then
    status=1
    grep -E 'ERROR|SUMMARY|FUZZ_CHECK|what\(\)|does not name|artifact' "$log" | head -20
  fi
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
