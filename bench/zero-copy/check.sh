#!/usr/bin/env bash
# Whether a user-space gateway on veth can send or receive without the
# kernel copying every byte (issue 13: the gateway's CPU per GB against
# Linux forwarding). Two checks, in two fresh px- namespaces joined by a veth:
#
# 1. PACKET_TX_RING: datagrams are sent from a TX ring; once the kernel
#    hands every slot back, the slots are rewritten; the receiver then shows
#    whether it got the original bytes (the kernel copied them) or the
#    rewritten ones (the skb still pointed into the ring). With perf, a
#    profile of a flood through the ring shows where the copy is.
# 2. AF_XDP: a socket is bound to the veth in zero-copy mode, then in copy
#    mode.
#
# Root only; removes its namespaces on every exit. Exit 0 when both checks
# ran (whatever they found), 1 when one could not run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PY=/usr/bin/python3
if [ "$(id -u)" -ne 0 ]; then
	echo "zero-copy check: needs root (network namespaces, packet sockets)" >&2
	exit 1
fi
A=px-zc-a
B=px-zc-b
remove_namespaces() {
	ip netns del "$A" 2>/dev/null || true
	ip netns del "$B" 2>/dev/null || true
}
tmp="$(mktemp -d)"
trap 'remove_namespaces; rm -rf "$tmp"' EXIT
remove_namespaces # left by a run that was killed
ip netns add "$A"
ip netns add "$B"
ip link add zca netns "$A" type veth peer name zcb netns "$B"
ip -n "$A" link set zca mtu 9000 up
ip -n "$B" link set zcb mtu 9000 up
ip -n "$A" addr add 198.51.100.1/24 dev zca
ip -n "$B" addr add 198.51.100.2/24 dev zcb
mac_a=$(ip -n "$A" -br link show zca | awk '{print $3}')
mac_b=$(ip -n "$B" -br link show zcb | awk '{print $3}')
uname -r | sed 's/^/kernel /'

echo "== 1. PACKET_TX_RING on veth: slots rewritten once the kernel hands them back"
coproc RX { ip netns exec "$B" "$PY" -u "$here/tx_ring.py" recv 198.51.100.2 9999; }
# Bash unsets RX and RX_PID once the coprocess has ended: keep copies.
rx_pid=$RX_PID
exec {rx_out}<&"${RX[0]}" {rx_in}>&"${RX[1]}"
read -r line <&"$rx_out"
[ "$line" = ready ] || { echo "receiver did not start: $line" >&2; exit 1; }
ip netns exec "$A" "$PY" "$here/tx_ring.py" send zca "$mac_b" "$mac_a" 198.51.100.1 198.51.100.2 9999 4
echo go >&"$rx_in"
rewritten=0
while read -r line <&"$rx_out"; do
	echo "receiver: $line"
	case "$line" in *", 0 of b'A',"*) rewritten=$((rewritten + 1)) ;; esac
done
wait "$rx_pid" || true
if [ "$rewritten" -gt 0 ]; then
	echo "result: $rewritten datagram(s) carried the rewritten bytes: the ring was still in use (corruption)"
else
	echo "result: the receiver got the bytes as sent: the kernel copied each frame before handing its slot back"
fi
if command -v perf >/dev/null; then
	echo "   where the copy is (perf, 2 s flood through the ring on CPU 0):"
	ip netns exec "$B" nft add table inet px_zc
	ip netns exec "$B" nft add chain inet px_zc in '{ type filter hook prerouting priority 0; udp dport 9999 drop; }'
	taskset -c 0 ip netns exec "$A" "$PY" "$here/tx_ring.py" flood zca "$mac_b" "$mac_a" 198.51.100.1 198.51.100.2 9999 3 &
	flood=$!
	sleep 0.5
	perf record -q -o "$tmp/perf.data" -C 0 -g -- sleep 2 >/dev/null 2>&1 || true
	wait "$flood"
	perf report -i "$tmp/perf.data" --no-children --stdio -S skb_copy_ubufs -G 2>/dev/null |
		grep -E '^ +[0-9.]+%|skb_copy_ubufs|veth_xmit|__dev_forward_skb|packet_sendmsg' | sed 's/^/   /' | head -12 || true
	perf report -i "$tmp/perf.data" --no-children --stdio --sort sym 2>/dev/null |
		grep -E '^ +[0-9.]+% .*(memcpy|skb_copy_ubufs|packet_sendmsg)' | sed 's/^/   /' | head -4 || true
else
	echo "   (perf not installed: no profile)"
fi

echo "== 2. AF_XDP on veth"
ip netns exec "$A" "$PY" "$here/xsk_bind.py" zca
