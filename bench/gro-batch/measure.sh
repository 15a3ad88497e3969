#!/usr/bin/env bash
# GRO batch size on a Linux router's ingress veth (issue #28), per setting.
#
#   S (sender side, MTU 1500) --s0|ro-- R (router) --ri|h0-- H (MTU 9000)
#   198.51.100.2/24     198.51.100.1   203.0.113.1      203.0.113.2/24
#
# usage: measure.sh DIR [RUNS] [SECS] [SETTINGS...]
#   DIR = out : bulk S -> H, data enters R on ro (outer, 1448-byte segments)
#         in  : bulk H -> S with the S side at MTU 9000 too, data enters R on
#               ri (inner, 8948-byte segments): what GRO on the inner port sees
#         in1500 : bulk H -> S, S side MTU 1500 (MSS 1460 both ways)
#   SETTINGS = names from setting() below (default: all)
# Prints one line per run (whitespace table) on stdout; needs root.
# Senders' links: TSO and GSO off (frames on the wire are MTU-sized).
# R: GRO on the ingress port (veth: turning GRO on is what gives it NAPI).
set -euo pipefail
DIR=${1:?out|in|in1500}; RUNS=${2:-3}; SECS=${3:-5}; shift $(( $# < 3 ? $# : 3 ))
HERE=$(cd "$(dirname "$0")" && pwd)
SUF=$$
S=px-gro-s-$SUF; R=px-gro-r-$SUF; H=px-gro-h-$SUF
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  for n in $S $R $H; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM HUP
xs() { ip netns exec $S "$@"; }; xr() { ip netns exec $R "$@"; }; xh() { ip netns exec $H "$@"; }

ip netns add $S; ip netns add $R; ip netns add $H
ip -n $S link add s0 type veth peer name ro netns $R
ip -n $R link add ri type veth peer name h0 netns $H
SMTU=1500; [ "$DIR" = in ] && SMTU=9000
ip -n $S link set s0 mtu $SMTU; ip -n $R link set ro mtu $SMTU
ip -n $R link set ri mtu 9000;  ip -n $H link set h0 mtu 9000
for n in $S $R $H; do ip -n $n link set lo up; done
ip -n $S addr add 198.51.100.2/24 dev s0; ip -n $S link set s0 up
ip -n $R addr add 198.51.100.1/24 dev ro; ip -n $R link set ro up
ip -n $R addr add 203.0.113.1/24 dev ri;  ip -n $R link set ri up
ip -n $H addr add 203.0.113.2/24 dev h0;  ip -n $H link set h0 up
ip -n $S route add default via 198.51.100.1
ip -n $H route add default via 203.0.113.1
xr sysctl -qw net.ipv4.ip_forward=1
xs ethtool -K s0 tso off gso off; xh ethtool -K h0 tso off gso off
if [ "$DIR" = out ]; then IN=ro; EG=ri; SND=$S; SDEV=s0; ONE=$SMTU; DST=203.0.113.2; SRVNS=$H; CLINS=$S
else IN=ri; EG=ro; SND=$H; SDEV=h0; ONE=9000; DST=198.51.100.2; SRVNS=$S; CLINS=$H; fi
# super-packet counters: netfilter sees the skb after GRO; meta length = IP length
xr nft -f - <<EOF
table inet pxgro {
  counter c_all {}
  counter c_one {}
  counter c_big {}
  chain c_fwd { type filter hook forward priority 0; policy accept;
    iifname "$IN" meta l4proto tcp counter name c_all
    iifname "$IN" meta l4proto tcp meta length <= $ONE counter name c_one
    iifname "$IN" meta l4proto tcp meta length >= 60000 counter name c_big
  }
}
EOF
ip netns exec $SRVNS iperf3 -s -p 5201 >/dev/null 2>&1 & PIDS+=($!)
ip netns exec $SRVNS python3 "$HERE/rr.py" server 5202 0.0.0.0 >/dev/null 2>&1 & PIDS+=($!)
sleep 0.5

setting() { # name -> apply on R's ingress port (and egress for BIG TCP)
  local ft=0 dh=0 gro=on big=65536
  case $1 in
    gro-off) gro=off;;
    default) ;;
    ft20k-d2) ft=20000 dh=2;;   ft50k-d2) ft=50000 dh=2;;  ft200k-d2) ft=200000 dh=2;;
    ft50k-d10) ft=50000 dh=10;; ft200k-d10) ft=200000 dh=10;;
    big) big=131072;;           big-ft50k-d2) big=131072 ft=50000 dh=2;;
    *) echo "unknown setting $1" >&2; exit 2;;
  esac
  xr ethtool -K $IN gro $gro
  xr sh -c "echo $ft > /sys/class/net/$IN/gro_flush_timeout; echo $dh > /sys/class/net/$IN/napi_defer_hard_irqs"
  # BIG TCP: the size GRO may build on the ingress port, the size GSO may
  # forward on the egress port (IPv4 attrs via netlink: iproute2 6.1 lacks them)
  xr python3 "$HERE/linkattr.py" set $IN 58=$big 64=$big
  xr python3 "$HERE/linkattr.py" set $EG 41=$big 63=$big
}
cpu() { awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, $8}' /proc/stat; }  # busy jiffies, softirq jiffies
ctr() { xr nft -j list counters | jq -r '[.nftables[].counter? | select(.) | {(.name): .packets}] | add | "\(.c_all) \(.c_one) \(.c_big)"'; }
txp() { ip netns exec $SND cat /sys/class/net/$SDEV/statistics/tx_packets; }
drops() { xr cat /sys/class/net/$IN/statistics/rx_dropped; }
HZ=$(getconf CLK_TCK)

SETS=("$@"); [ ${#SETS[@]} -eq 0 ] && SETS=(gro-off default ft20k-d2 ft50k-d2 ft200k-d2 ft50k-d10 ft200k-d10 big big-ft50k-d2)
echo "# dir=$DIR ingress=$IN sender_mtu=$SMTU runs=$RUNS secs=$SECS $(uptime)"
echo "# setting flows run gbps retr wire_frames superpkts batch single_share ge60k_share busy_s_per_GB softirq_s_per_GB rx_drops ping_load_avg_ms"
for st in "${SETS[@]}"; do
  setting $st
  # idle latency: ICMP and TCP request/response through R, no bulk running
  pi=$(ip netns exec $CLINS ping -c 200 -i 0.005 -q $DST | awk -F/ '/rtt/{print $5}')
  rr=$(ip netns exec $CLINS python3 "$HERE/rr.py" client $DST 5202 2000 64)
  echo "# idle $st ping_avg_ms=$pi tcp_rr_us_median_p99=$rr"
  for fl in 1 4; do
    for r in $(seq 1 $RUNS); do
      xr nft reset counters >/dev/null
      w0=$(txp); d0=$(drops); read -r b0 s0 < <(cpu)
      ip netns exec $CLINS ping -i 0.01 -w $SECS -q $DST > /tmp/px-gro-ping.$SUF 2>&1 & pp=$!; PIDS+=($pp)
      j=$(ip netns exec $CLINS iperf3 -c $DST -p 5201 -t $SECS -P $fl -J)
      wait $pp || true
      read -r b1 s1 < <(cpu); w1=$(txp); d1=$(drops)
      read -r all one big < <(ctr)
      bps=$(jq '.end.sum_received.bits_per_second' <<<"$j")
      byt=$(jq '.end.sum_received.bytes' <<<"$j")
      retr=$(jq '.end.sum_sent.retransmits // 0' <<<"$j")
      pl=$(awk -F/ '/rtt/{print $5}' /tmp/px-gro-ping.$SUF); rm -f /tmp/px-gro-ping.$SUF
      awk -v st=$st -v fl=$fl -v r=$r -v bps=$bps -v byt=$byt -v retr=$retr \
          -v w=$((w1-w0)) -v all=$all -v one=$one -v big=$big -v db=$((b1-b0)) -v ds=$((s1-s0)) \
          -v hz=$HZ -v dr=$((d1-d0)) -v pl=${pl:-NA} 'BEGIN{
        printf "%s %d %d %.2f %d %d %d %.2f %.3f %.3f %.2f %.2f %d %s\n", st, fl, r, bps/1e9, retr, w, all,
          (all?w/all:0), (all?one/all:0), (all?big/all:0), db/hz/(byt/1e9), ds/hz/(byt/1e9), dr, pl }'
    done
  done
done
