#!/bin/sh
# The data-parallel comparison of docs/DISTRIBUTED.md ("Measured: one process against two
# ranks"): bench_dp's training step on one process at 1 and 2 threads, on 2 ranks of 1 thread
# with the reduction overlapping backward (one 4 MiB bucket and 256 KiB buckets) and after it, then the allreduce bandwidth of the MPI
# library beside memcpy's (bench_allreduce, up to 16 MiB). A benchmark, not a test: it prints.
# Usage: sh tests/bench/mpi/bench_dp.sh [BUILD_DIR, build] [STEPS, 20]
build=${1:-build}
steps=${2:-20}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun="mpirun --oversubscribe --bind-to none"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench_dp" 1 "$steps" 0.1 on || exit 1
"$build/bench_dp" 2 "$steps" 0.1 on | tail -2 || exit 1
$mpirun -np 2 "$build/bench_dp" 1 "$steps" 0.1 on | tail -2 || exit 1
$mpirun -np 2 "$build/bench_dp" 1 "$steps" 0.1 on 256 | tail -2 || exit 1
$mpirun -np 2 "$build/bench_dp" 1 "$steps" 0.1 off | tail -2 || exit 1
$mpirun -np 2 "$build/bench_allreduce" 16 || exit 1
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
