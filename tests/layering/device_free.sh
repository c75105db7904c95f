#!/bin/sh
# nn/ and models/ run on every device through engine's Backend: they include no engine/cpu header
# and never ask which device a tensor is on. Lists each offending line and fails when there is one.
# usage: device_free.sh SOURCE_DIR
set -u
root=${1:?usage: device_free.sh SOURCE_DIR}
pattern='#include[[:space:]]*"engine/cpu/|DeviceKind|is_cuda[[:space:]]*\(|is_cpu[[:space:]]*\(|Device::cuda|cpu::'
found=$(cd "$root" && grep -rnE "$pattern" nn models --include='*.h' --include='*.cpp')
if [ -n "$found" ]; then
  echo "nn/ and models/ must not include engine/cpu headers or name a device kind:"
  echo "$found"
  exit 1
fi
echo "nn/ and models/: no engine/cpu include, no device kind named"
