#!/bin/bash
# udp-iperf.sh T [extra hirt args]: namespaces S/C, veth, hirt udp --threads T, iperf3 -P ${P:-8} -t ${DUR:-8}
# Run as root from the repository root after `cargo build --release -p hirt-cli`; HIRT=path picks another binary.
# prints goodput and the CPU seconds both hirt processes used during the transfer
T=$1; shift
H=${HIRT:-./target/release/hirt}
ip netns del S 2>/dev/null; ip netns del C 2>/dev/null
ip netns add S; ip netns add C
ip link add va netns S type veth peer name vb netns C
ip -n S addr add 192.168.90.1/24 dev va; ip -n S link set va up; ip -n S link set lo up
ip -n C addr add 192.168.90.2/24 dev vb; ip -n C link set vb up; ip -n C link set lo up
umask 077; K=$(mktemp -d); $H genkey >$K/s; $H genkey >$K/c
SPUB=$($H pubkey <$K/s); CPUB=$($H pubkey <$K/c)
ip netns exec S $H udp -s -l 192.168.90.1:4096 --private-key-file $K/s --peer-public-key $CPUB --threads $T --control /tmp/S.sock "$@" >/tmp/S.log 2>&1 &
SP=$!
ip netns exec C $H udp -c -r 192.168.90.1:4096 --private-key-file $K/c --peer-public-key $SPUB --threads $T --control /tmp/C.sock "$@" >/tmp/C.log 2>&1 &
CP=$!
sleep 2; ip netns exec S iperf3 -s -1 -B 10.77.0.1 >/dev/null 2>&1 &
sleep 0.5
cpu() { awk '{print $14+$15}' /proc/$SP/stat /proc/$CP/stat | paste -sd+ | bc; }
c0=$(cpu)
ip netns exec C iperf3 -c 10.77.0.1 -P ${P:-8} -t ${DUR:-8} -J > /tmp/iperf.json
c1=$(cpu)
python3 - $c0 $c1 ${DUR:-8} <<'PY'
import json,sys
d=json.load(open('/tmp/iperf.json')); bps=d["end"]["sum_received"]["bits_per_second"]
c0,c1,dur=int(sys.argv[1]),int(sys.argv[2]),float(sys.argv[3])
cores=(c1-c0)/100/dur
print(f"Mbit/s {bps/1e6:.0f}  hirt cores {cores:.2f}  Gbit/s per hirt core {bps/1e9/cores:.2f}")
PY
kill $SP $CP 2>/dev/null; sleep 0.5
ip netns del S; ip netns del C
