#!/bin/sh
# Two ranks on two "hosts": two network namespaces of this machine joined by a virtual Ethernet
# pair, each with its own address, and OpenMPI between them over TCP only (no shared memory), the
# way it runs across two machines. mpirun runs in the first namespace and starts the second rank
# through a launch agent that enters the second namespace where a cluster would ssh to the
# second machine; the file system is shared, as on a cluster with a shared home.
#   two_hosts.sh MPIRUN MPIRUN_VERSION_LINE PROGRAM [ARGS...]
# runs PROGRAM with one rank on each host (ctest: the MPI suite; by hand, e.g. bench_allreduce).
# Exits 77 (ctest: skipped) where namespaces cannot be created (no CAP_SYS_ADMIN, no `ip`) or the
# MPI is not OpenMPI (the launch agent and --mca options are OpenMPI's).
mpirun=$1
version=$2
shift 2

case $version in
  *"Open MPI"* | *OpenRTE*) ;;
  *) echo "SKIPPED: the two-host test drives OpenMPI's launcher; this MPI is: $version"; exit 77 ;;
esac
command -v ip >/dev/null || { echo "SKIPPED: no ip command (iproute2)"; exit 77; }

id=qkv$$
ns_a=${id}a ns_b=${id}b
dir=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
if ! error=$(ip netns add "$ns_a" 2>&1); then
  echo "SKIPPED: cannot create a network namespace: $error"
  exit 77
fi
set -e
ip netns add "$ns_b"
ip link add "${id}va" type veth peer name "${id}vb"
ip link set "${id}va" netns "$ns_a"
ip link set "${id}vb" netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev "${id}va"
ip -n "$ns_b" addr add 10.77.0.2/24 dev "${id}vb"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "${id}va" up
ip -n "$ns_b" link set "${id}vb" up

# the hostfile names the two hosts by address; the agent is mpirun's "ssh"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$dir/hosts"
cat > "$dir/agent" <<AGENT
#!/bin/sh
# mpirun calls: agent HOST COMMAND...; the command is meant for the host's shell
host=\$1
shift
case \$host in
  10.77.0.1) ns=$ns_a ;;
  10.77.0.2) ns=$ns_b ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns /bin/sh -c "\$*"
AGENT
chmod +x "$dir/agent"
set +e

echo "two hosts: 10.77.0.1 (namespace $ns_a) and 10.77.0.2 (namespace $ns_b), TCP only"
timeout 240 ip netns exec "$ns_a" "$mpirun" --hostfile "$dir/hosts" -np 2 \
  --mca plm_rsh_agent "$dir/agent" --mca btl tcp,self \
  --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
  -x QKV_MPI_SEPARATE_NETNS=1 "$@"
rc=$?
[ $rc -eq 124 ] && echo "FAIL: the two-host job did not finish within 240 s"
exit $rc
