#!/bin/sh
# `qkv train ... --profile N`: N steps after --profile-warmup steps (2) are profiled; the per-op table is
# printed and logged, and the run folder gets trace.json (a Chrome trace) and trace.png. The
# trace's events, summed per phase and op, give the table's calls and ms/step. Usage:
# tests/cli/profile.sh QKV_BINARY SCRATCH_DIR. Run by ctest as cli_profile.
set -u
# shellcheck source=tests/cli/common.sh
. "$(dirname "$0")/common.sh"

run=$scratch/run
# shellcheck disable=SC2086
if "$qkv" --threads 2 train translate $tiny --steps 4 --profile 2 --out "$run" \
  >"$scratch/out" 2>&1; then
  pass "a profiled run trains"
else
  fail "a profiled run trains: $(tail -3 "$scratch/out")"
fi
has "the table is printed, naming the profiled steps (after two warm-up steps)" "$scratch/out" \
  "profile of steps 3\.\.4"
has "the table has forward and backward rows" "$scratch/out" "^backward +[a-z_]+ +[0-9]"
has "the MFU line is printed against the measured peak" "$scratch/out" \
  "^step .* GFLOP/s +MFU +[0-9.]+%"
has "the memory line is printed against the measured bandwidth" "$scratch/out" \
  "^memory .* GB/step +[0-9.]+ GB/s +[0-9.]+% of [0-9.]*[1-9][0-9.]* GB/s \(memory bandwidth, 2 threads\)"
has "the table is logged" "$run/log.txt" "^forward +[a-z_]+ +[0-9]"
if [ -s "$run/trace.png" ]; then pass "trace.png written"; else fail "trace.png written"; fi

# The trace parsed: per (phase, op) of the issuing thread's ops, calls and ms per step equal the
# table's (to its printed precision).
if python3 - "$run/trace.json" "$scratch/out" 2 <<'PY'; then
import json, re, sys
trace, table, steps = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), int(sys.argv[3])
ops = {}
for e in trace["traceEvents"]:
    if e["ph"] != "X" or e["tid"] != 0 or e["args"].get("scope"):
        continue
    calls, us = ops.get((e["cat"], e["name"]), (0, 0.0))
    ops[(e["cat"], e["name"])] = (calls + 1, us + e["dur"])
rows = re.findall(r"^(forward|backward|optimizer|other) +(\S+) +(\d+) +([0-9.]+) ", table, re.M)
assert len(rows) == len(ops) and len(rows) > 10, (len(rows), len(ops))
phases = {phase for phase, _ in ops}
assert {"forward", "backward", "optimizer"} <= phases, phases  # clip_grad_norm_ and Adam: optimizer
scopes = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["args"].get("scope")}
assert {"step", "forward", "backward", "optimizer", "clip_grad_norm"} <= scopes, scopes
for phase, op, calls, ms in rows:
    want_calls, us = ops[(phase, op)]
    assert round(want_calls / steps) == int(calls), (phase, op, calls, want_calls)
    assert abs(us / 1000 / steps - float(ms)) <= 0.0011, (phase, op, ms, us / 1000 / steps)
threads = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
assert threads == {0, 1}, threads  # the issuing thread and the pool's worker
PY
  pass "trace.json parses and its op totals match the table"
else
  fail "trace.json parses and its op totals match the table"
fi

# The allocator line: the order task's batches have several lengths, so steps 2..3 meet sizes the
# one warm-up step did not (new memory, their page faults in the times), and after ten warm-up
# steps none (one thread: the same allocations in the same order every run).
order="--threads 1 train classify --task order --pictures false"
# shellcheck disable=SC2086
"$qkv" $order --steps 4 --profile-warmup 1 --profile 2 --out "$scratch/cold" \
  >"$scratch/cold.out" 2>&1
has "profiled steps that got new memory say so" "$scratch/cold.out" \
  "^allocator: [1-9][0-9]* of the profiled steps' [0-9]+ requests got new memory, .*raise --profile-warmup \(now 1\)"
# shellcheck disable=SC2086
"$qkv" $order --steps 12 --profile-warmup 10 --profile 2 --out "$scratch/warm" \
  >"$scratch/warm.out" 2>&1
has "--profile-warmup moves the profiled steps" "$scratch/warm.out" "profile of steps 11\.\.12"
has "the second half of the warm-up steps is timed without the profiler" "$scratch/warm.out" \
  "^wall time per step, median: [0-9.]+ ms without the profiler \(warm-up steps 6\.\.10\), [0-9.]+ ms under it \([-+][0-9.]+%\)"
has "one warm-up step leaves none to time" "$scratch/cold.out" "^steps without the profiler: none timed"
has "after enough warm-up steps every request is a cache hit" "$scratch/warm.out" \
  "^allocator: all [0-9]+ requests of the profiled steps served from its cache"

# The yardsticks the lines are read against: the FMA peak and the memory bandwidth, measured.
"$qkv" --threads 1 bench peak >"$scratch/peak.out" 2>&1
has "bench peak measures the FMA peak" "$scratch/peak.out" "^512 bit +1 +[0-9.]*[1-9]|^256 bit +1 +[0-9.]*[1-9]"
has "bench peak measures the memory bandwidth" "$scratch/peak.out" "^ +1 +[0-9.]*[1-9][0-9.]*$"
has "bench peak times the GEMM's tile against the FMA peak" "$scratch/peak.out" \
  "^ +1 +[0-9.]*[1-9][0-9.]* +[0-9.]*[1-9][0-9.]*%$"
lacks "one thread has no second to hand data to" "$scratch/peak.out" "handing data"
"$qkv" --threads 2 bench peak --json >"$scratch/peak2.out" 2>&1
has "bench peak's json names the tile's kernel and depth" "$scratch/peak2.out" \
  '^\{"measure":"tile","kernel":"[a-z0-9]+ [0-9]+x[0-9]+","depth":[0-9]+,"threads":2,"gflops":[0-9.]*[1-9]'
has "bench peak times a cache line's round trip and reads of the other thread's writes" \
  "$scratch/peak2.out" \
  '^\{"measure":"handoff","round_trip_ns":[0-9.]*[1-9][0-9.]*,"read_kib":256,"own_gbs":[0-9.]*[1-9][0-9.]*,"other_gbs":[0-9.]*[1-9][0-9.]*,"gelu_issuing_us":[0-9.]*[1-9][0-9.]*,"gelu_worker_us":[0-9.]*[1-9]'

# shellcheck disable=SC2086
refused "--profile longer than the run is refused" 1 \
  "--profile: 4 profiled steps after 2 warm-up steps end at step 6, .* --steps" \
  "$qkv" train translate $tiny --steps 4 --profile 4 --out "$scratch/long"
finish
