#!/bin/sh
# A rank that dies (SIGKILL) or fails (an exception) ends the whole 3-rank job, which exits
# non-zero with a line naming that rank (MPICH's launcher names its PID) - and does not hang: `timeout` gives the job 60 s, where
# it takes a few seconds, so a hang fails the test (exit 124) instead of stalling ctest.
#   peer_failure.sh MPI_PEER_FAILURE NUMPROC_FLAG MPIRUN [MPIRUN_FLAGS...]
binary=$1
np_flag=$2
shift 2
status=0

for mode in kill throw; do
  out=$(timeout 60 "$@" "$np_flag" 3 "$binary" "$mode" 1 2>&1)
  rc=$?
  if [ "$rc" -eq 124 ]; then
    echo "FAIL ($mode): the job still ran after 60 s: a dead rank left the others waiting"
    status=1
  elif [ "$rc" -eq 0 ]; then
    echo "FAIL ($mode): the job exited 0 although rank 1 failed"
    status=1
  fi
  case $mode in
    kill)
      # OpenMPI names the rank; MPICH names the PID, which the ranks printed at start
      pattern='rank 1 with PID [0-9]+ on node .* exited on signal 9'
      pid=$(printf '%s\n' "$out" | sed -n 's/^= *PID \([0-9]*\) RUNNING AT.*/\1/p' | head -1)
      if [ -n "$pid" ] && printf '%s\n' "$out" | grep -q "^mpi_peer_failure: rank 1 of 3 is pid $pid\$"; then
        pattern="PID $pid RUNNING AT"
      fi
      ;;
    throw) pattern='^qkv: rank 1 of 3: mpi_peer_failure: gave up on purpose at step 5$' ;;
  esac
  if ! printf '%s\n' "$out" | grep -Eq "$pattern"; then
    echo "FAIL ($mode): no line matching /$pattern/ in the job's output:"
    printf '%s\n' "$out" | sed 's/^/  | /'
    status=1
  else
    echo "ok ($mode, exit $rc): $(printf '%s\n' "$out" | grep -E "$pattern" | head -1)"
  fi
done
exit $status
