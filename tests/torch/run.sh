#!/usr/bin/env bash
# tests/torch/run.sh [DRIVER]: the PyTorch parity suite (docs/TESTING.md). Runs every
# tests/torch/test_*.py with Debian's /usr/bin/python3 (QKV_TORCH_PYTHON overrides it) against the
# driver (default build/torch_parity_driver). Each file prints a PASS or FAIL line per case with
# its worst relative error; this script ends with "torch-parity: N passed, M failed" and exits
# non-zero if anything failed. Without torch and numpy every file is reported skipped, never
# passed, and the script exits 0.
set -u
here=$(cd "$(dirname "$0")" && pwd)
driver=${1:-$here/../../build/torch_parity_driver}
python=${QKV_TORCH_PYTHON:-/usr/bin/python3}
files=("$here"/test_*.py)

if ! "$python" -c 'import torch, numpy' >/dev/null 2>&1; then
  echo "torch-parity: skipped: $python cannot import torch and numpy (make deps TORCH=1 installs them)"
  echo "torch-parity: 0 passed, 0 failed, ${#files[@]} skipped"
  exit 0
fi
if [ ! -x "$driver" ]; then
  echo "torch-parity: no driver at $driver (cmake --build build --target torch_parity_driver)"
  echo "torch-parity: 0 passed, 1 failed"
  exit 1
fi

passed=0 failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for f in "${files[@]}"; do
  QKV_PARITY_DRIVER=$driver QKV_BUILD_DIR=$(dirname "$driver") "$python" "$f" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(grep -c '^PASS ' "$log")
  x=$(grep -c '^FAIL ' "$log")
  # A file that dies before reporting its failures (an import error, a crash) still fails.
  if [ "$rc" -ne 0 ] && [ "$x" -eq 0 ]; then
    echo "FAIL $(basename "$f"): exited $rc without a FAIL line"
    x=1
  fi
  passed=$((passed + p))
  failed=$((failed + x))
done
echo "torch-parity: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
