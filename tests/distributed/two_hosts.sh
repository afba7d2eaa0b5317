#!/usr/bin/env bash
# Two ranks on two "machines": two network namespaces of this test's own making, joined by a
# virtual Ethernet pair, so the ranks share no loopback and every byte between them crosses
# a real (virtual) network: Open MPI's TCP transport, launched from a hostfile as on a
# cluster, with the namespaces standing in for the hosts (plm_rsh_agent, usually ssh, is a
# script that enters the host's namespace instead of logging in to it).
#
#   two_hosts.sh train TESSERA            trains 1 epoch on 2 ranks; the test accuracy must
#                                         be one process's within 0.01, and the all-reduce traffic
#                                         must have crossed the link
#   two_hosts.sh kill RANK_FAULT          rank 1 dies mid-epoch: mpirun must end non-zero,
#                                         naming it, within the test's timeout
#
# Needs root and `ip` (iproute2, from scripts/setup); exits 77 (CTest: skipped) where network
# namespaces cannot be made, e.g. in a container without CAP_SYS_ADMIN.
set -euo pipefail
mode=$1
program=$2

skip() { echo "two_hosts: skipped: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip command (iproute2)"

# Names unique to this run: ctest may run the two modes at once.
tag="ts$$"
ns_a="${tag}a" ns_b="${tag}b"
net="10.$(( ($$ >> 8) % 200 + 20 )).$(( $$ % 250 )).0"  # a /24 unlikely to be in use
host_a="${net%.0}.1" host_b="${net%.0}.2"
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true  # deleting a namespace deletes its end of the pair
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns_a" 2>/dev/null || skip "cannot make a network namespace here"
ip netns add "$ns_b"
ip link add "${tag}va" type veth peer name "${tag}vb"
ip link set "${tag}va" netns "$ns_a"
ip link set "${tag}vb" netns "$ns_b"
ip -n "$ns_a" addr add "$host_a/24" dev "${tag}va"
ip -n "$ns_b" addr add "$host_b/24" dev "${tag}vb"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "${tag}va" up
ip -n "$ns_b" link set "${tag}vb" up

# The launcher Open MPI calls as it would call ssh: [options] host command...
cat > "$work/enter_host" <<EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
case "\$1" in
  $host_a) ns=$ns_a ;;
  $host_b) ns=$ns_b ;;
  *) echo "enter_host: unknown host \$1" >&2; exit 1 ;;
esac
shift
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$work/enter_host"
printf '%s slots=1\n%s slots=1\n' "$host_a" "$host_b" > "$work/hostfile"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One rank per host; TCP only (no shared memory between the "machines"), on the pair alone.
mpirun_two_hosts() {
  ip netns exec "$ns_a" mpirun --hostfile "$work/hostfile" -np 2 --map-by node \
    --mca plm_rsh_agent "$work/enter_host" --mca btl tcp,self \
    --mca btl_tcp_if_include "$net/24" --mca oob_tcp_if_include "$net/24" \
    -x OMP_NUM_THREADS=1 -x TESSERA_CPU_DEVICES=0 "$@"
}
sent_bytes() { ip netns exec "$ns_a" cat "/sys/class/net/${tag}va/statistics/tx_bytes"; }

case "$mode" in
  train)
    accuracy() { sed -n 's/^test loss [0-9.]*, test accuracy \([0-9.]*\)$/\1/p'; }
    one=$(OMP_NUM_THREADS=1 TESSERA_CPU_DEVICES=0 "$program" train --model mlp --epochs 1 \
          --quiet --device cpu | accuracy)
    before=$(sent_bytes)
    two=$(mpirun_two_hosts "$program" train --model mlp --epochs 1 --quiet --device cpu | accuracy)
    sent=$(( $(sent_bytes) - before ))
    echo "two_hosts: test accuracy $two on 2 hosts, $one in one process; $sent bytes sent over the link"
    # Within 0.01 (the sums run in another order: equal in a Release build, 1e-4 apart in Debug).
    [[ -n "$one" && -n "$two" ]] && awk -v a="$one" -v b="$two" 'BEGIN { exit !((a - b) ^ 2 <= 1e-4) }' ||
      { echo "two_hosts: FAILED: the accuracies differ by more than 0.01"; exit 1; }
    # 235 steps each all-reduce 0.8 MB of gradients: far more than 50 MB must have crossed.
    (( sent > 50000000 )) || { echo "two_hosts: FAILED: the ranks did not talk over the link"; exit 1; }
    ;;
  kill)
    start=$SECONDS
    if mpirun_two_hosts "$program" kill; then
      echo "two_hosts: FAILED: mpirun exited 0 though rank 1 was killed"; exit 1
    fi
    echo "two_hosts: mpirun ended non-zero $(( SECONDS - start )) s after the start"
    ;;
  *) echo "two_hosts: unknown mode '$mode' (train or kill)" >&2; exit 2 ;;
esac
