# The training-step table of tests/gpu/run.sh: joins bench_step's and torch_step.py's medians by
# dropout. Arguments: their logs (a file whose name contains torch_step is PyTorch's). Each run
# prints a header line with "dropout <p>" somewhere in it (bench_step's also ends with the
# precision, so the value is found by its key, not by position) and then "ms/step <median> ...".
# Checked without a GPU by tests/gpu/tables_test.sh.
FNR == 1 { side = (FILENAME ~ /torch_step/) ? "torch" : "qkv" }
/ dropout / {
  for (i = 1; i < NF; ++i)
    if ($i == "dropout") d = $(i + 1)
}
/^ms\/step/ {
  ms[side, d] = $2
  if (!(d in seen)) order[++n] = d
  seen[d] = 1
}
END {
  for (i = 1; i <= n; ++i) {
    d = order[i]
    q = ms["qkv", d]
    t = ms["torch", d]
    printf "  dropout %-4s qkv %9s  torch %9s  qkv/torch %s\n", d, (q == "" ? "-" : q),
           (t == "" ? "-" : t), (q != "" && t != "" && t > 0 ? sprintf("%.2fx", q / t) : "-")
  }
}
