# The "qkv against PyTorch" table of tests/gpu/run.sh: joins the "RESULT | name | shape | ..."
# lines of bench_cuda (train/bench/cuda_bench.cpp) and tests/gpu/torch_reference.py by name and
# shape. Arguments: bench.log then torch.log (a file whose name ends in torch.log is PyTorch's).
# Checked without a GPU by tests/gpu/tables_test.sh.
BEGIN { FS = "|" }
function trim(x) {
  gsub(/^ +| +$/, "", x)
  return x
}
FNR == 1 { side = (FILENAME ~ /torch\.log$/) ? "torch" : "qkv" }
/^RESULT/ {
  key = trim($2) " | " trim($3)
  split(trim($4), f, " ")  # "qkv 1.234 ms ..." or "torch 1.234 ms ..."
  ms[side, key] = f[2]
  if (side == "qkv") order[++n] = key
}
END {
  for (i = 1; i <= n; ++i) {
    k = order[i]
    if (("torch", k) in ms && ms["qkv", k] > 0)
      printf "  %-46s qkv %9.3f ms  torch %9.3f ms  %.2fx\n", k, ms["qkv", k], ms["torch", k],
             ms["torch", k] / ms["qkv", k]
  }
}
