#!/bin/bash
# Least-privilege check of UDP mode: two `hirt udp` instances in namespaces lpS / lpC, each as
# user nobody with CAP_NET_ADMIN as its only capability (ambient, bounding set of one, as the
# systemd unit dist/systemd/hirt-udp@.service grants), a ping through the tunnel, the running
# server's uid and capabilities, and its control socket's mode. Run as root after
# `cargo build --release -p hirt-cli`; HIRT=path picks another binary. Where /dev/net/tun is
# not usable by other users (mode 0600), a private copy of the node owned by nobody is
# bind-mounted over it in a private mount namespace, as a udev rule or the unit's DeviceAllow
# would grant it.
H=$(realpath "${HIRT:-./target/release/hirt}")
set -u
ip netns del lpS 2>/dev/null; ip netns del lpC 2>/dev/null
ip netns add lpS; ip netns add lpC
ip link add lva netns lpS type veth peer name lvb netns lpC
ip -n lpS addr add 192.168.91.1/24 dev lva; ip -n lpS link set lva up; ip -n lpS link set lo up
ip -n lpC addr add 192.168.91.2/24 dev lvb; ip -n lpC link set lvb up; ip -n lpC link set lo up
TUN=$(mktemp -u /tmp/hirt-lp-tun.XXXXXX); mknod $TUN c 10 200; chown nobody $TUN; chmod 600 $TUN
WRAP=$(mktemp /tmp/hirt-lp-wrap.XXXXXX); chmod 755 $WRAP
printf '#!/bin/sh\nmount --bind %s /dev/net/tun && exec "$@"\n' $TUN >$WRAP
K=$(mktemp -d); chmod 755 $K; umask 077
$H genkey > $K/s; $H genkey > $K/c; chown nobody $K/s $K/c
SP=$($H pubkey < $K/s); CP=$($H pubkey < $K/c)
D=$(mktemp -d); chown nobody $D
drop="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all,+net_admin --ambient-caps=-all,+net_admin --bounding-set=-all,+net_admin"
unshare -m --propagation private $WRAP ip netns exec lpS $drop $H udp -s -l 192.168.91.1:4096 --private-key-file $K/s --peer-public-key $CP --control $D/s.sock --dev lp0 >$D/s.log 2>&1 &
S=$!
unshare -m --propagation private $WRAP ip netns exec lpC $drop $H udp -c -r 192.168.91.1:4096 --private-key-file $K/c --peer-public-key $SP --control $D/c.sock --dev lp0 >$D/c.log 2>&1 &
C=$!
sleep 2
ip netns exec lpC ping -c 5 -i 0.2 -W 1 10.77.0.1 | tail -2
echo "server process: $(grep -E '^(Uid|CapEff|CapAmb)' /proc/$(pgrep -P $S -n || echo $S)/status 2>/dev/null | tr '\n' ' ')"
ls -l $D/s.sock
$H status --control $D/s.sock 2>&1 | head -c 300; echo
kill $S $C; sleep 0.5
echo "--- logs"; cat $D/s.log $D/c.log | head -10
ip netns del lpS; ip netns del lpC; rm -rf $TUN $WRAP $K $D
