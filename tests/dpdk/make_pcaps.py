#!/usr/bin/python3
"""Writes the small pcaps of the DPDK harness self test (scripts/dpdk-selftest).

gro.pcap: inbound 1500-byte-MTU frames, all within the first 500 us (one
GRO flush tick), IPv4, TCP timestamps on every segment (payload 1448):
  A  90 contiguous segments, DF, constant TSval and ACK: DPDK merges 45 at a
     time (65160 payload bytes, its 64 KB limit), each cut back to 9000-byte
     IP packets: 7 full (8948) + 1 of 2524, twice -> 16 segments, 14 full.
  B  20 segments, DF clear with consecutive IP IDs, PSH on the 10th: 1-9
     merge (13032 -> 8948 + 4084), the PSH segment is not merged and leaves
     first, 11-20 merge (14480 -> 8948 + 5532) -> 5 segments, 2 full.
  C  10 segments whose TSval changes every 2 segments: only pairs merge
     (options must be byte-identical) -> 5 segments of 2896, none full.
  D  4 segments, ECT(0), the 3rd marked CE: DPDK never compares the IP TOS
     byte, so all 4 merge (5792) under the first one's header: the CE mark
     is lost (in_ce_segments 1, out_ce_segments 0).
  P  3 segments without TCP options (1460), then a pure ACK of the same flow
     padded to 60 bytes with the next sequence number: 22.11 trims the
     padding, so the ACK passes and the 3 merge (4380) -> 1 segment. Were
     the 6 padding bytes taken as payload they would merge, and the byte
     check would fail.
  Q  8 contiguous segments whose ACK number changes after the 4th: the ACK
     is part of DPDK's flow key, so 1-4 and 5-8 merge apart -> 2 x 5792.
  V6 3 contiguous IPv6 segments: 22.11 has no TCP/IPv6 GRO -> 3 x 1448.
  a pure ACK from the receiver of A, and one UDP datagram (passed as is).
  Expected GRO data segments out 33, full 16, yield 16/33.

gso.pcap: outbound 9000-byte-MTU frames, IPv4, timestamps:
  E  5 segments of 8948, PSH on the last: each -> 6 x 1448 + 260.
  F  one segment of 3000 -> 2 x 1448 + 104.
  G  one segment of 500 (not segmented), and a pure ACK.
  H  one segment of 8948 with CWR: DPDK clears only PSH and FIN on the
     non-last pieces, so all 7 pieces carry CWR (TSO puts it on the first).
  Expected GSO data segments out 46, full 38, one PSH piece of 260 bytes.
"""
import sys

from scapy.all import Ether, IP, IPv6, TCP, UDP, Raw, Padding, wrpcap  # noqa: E402

MAC_O, MAC_I = "02:00:00:00:00:01", "02:00:00:00:00:02"
OUT_A, IN_A = "198.51.100.10", "203.0.113.20"


def payload(flow, seq, n):
    return bytes(((flow * 131 + seq + i) * 7) & 0xFF for i in range(n))


def seg(src, dst, sport, dport, seq, n, flags="A", tsval=1000, ack=5000, df=True,
        ipid=1, flow=0, tos=0):
    ip = IP(src=src, dst=dst, flags="DF" if df else 0, id=ipid, ttl=64, tos=tos)
    tcp = TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, window=501,
              options=[("NOP", None), ("NOP", None), ("Timestamp", (tsval, 777))])
    p = Ether(src=MAC_O, dst=MAC_I) / ip / tcp
    if n:
        p = p / Raw(payload(flow, seq, n))
    return p


def gro_frames():
    a = [seg(OUT_A, IN_A, 40001, 5201, 1000 + i * 1448, 1448, flow=1) for i in range(90)]
    b = [seg(OUT_A, IN_A, 40002, 5201, 7000 + i * 1448, 1448,
             flags="PA" if i == 9 else "A", df=False, ipid=100 + i, flow=2)
         for i in range(20)]
    c = [seg(OUT_A, IN_A, 40003, 5201, 9000 + i * 1448, 1448, tsval=2000 + i // 2, flow=3)
         for i in range(10)]
    d = [seg(OUT_A, IN_A, 40004, 5201, 3000 + i * 1448, 1448, tos=3 if i == 2 else 2, flow=4)
         for i in range(4)]
    order = []
    ia = ib = ic = 0
    while ia < len(a) or ib < len(b) or ic < len(c):
        for _ in range(4):
            if ia < len(a):
                order.append(a[ia]); ia += 1
        if ib < len(b):
            order.append(b[ib]); ib += 1
        if ic < len(c):
            order.append(c[ic]); ic += 1
        if ia == 40:
            # the receiver of A acknowledges (reverse direction, no payload)
            order.append(seg(IN_A, OUT_A, 5201, 40001, 5000, 0, ack=1000 + 30 * 1448))
            order.append(Ether(src=MAC_O, dst=MAC_I) / IP(src=OUT_A, dst=IN_A) /
                         UDP(sport=4000, dport=4001) / Raw(b"x" * 100))
    pf = [Ether(src=MAC_O, dst=MAC_I) / IP(src=OUT_A, dst=IN_A, flags="DF") /
          TCP(sport=40005, dport=5201, seq=50000 + i * 1460, ack=5000, flags="A", window=501) /
          Raw(payload(5, 50000 + i * 1460, 1460)) for i in range(3)]
    pf.append(Ether(src=MAC_O, dst=MAC_I) / IP(src=OUT_A, dst=IN_A, flags="DF") /
              TCP(sport=40005, dport=5201, seq=50000 + 3 * 1460, ack=5000, flags="A",
                  window=501) / Padding(load=b"\xee" * 6))
    assert len(bytes(pf[-1])) == 60
    order[40:40] = pf
    q = [seg(OUT_A, IN_A, 40006, 5201, 70000 + i * 1448, 1448, ack=5000 if i < 4 else 6448,
             flow=6) for i in range(8)]
    order[50:50] = q
    v6 = [Ether(src=MAC_O, dst=MAC_I) / IPv6(src="2001:db8::10", dst="2001:db8:1::20") /
          TCP(sport=40007, dport=5201, seq=90000 + i * 1448, ack=5000, flags="A", window=501,
              options=[("NOP", None), ("NOP", None), ("Timestamp", (1000, 777))]) /
          Raw(payload(7, 90000 + i * 1448, 1448)) for i in range(3)]
    order[60:60] = v6
    order[10:10] = d[:2]
    order[30:30] = d[2:]
    t0 = 1_700_000_000.0
    for k, p in enumerate(order):
        p.time = t0 + k * 1.2e-6  # 1.2 us apart: ~10 Gbit/s of 1500-byte frames
    return order


def gso_frames():
    e = [seg(IN_A, OUT_A, 5201, 40010, 100 + i * 8948, 8948, flags="PA" if i == 4 else "A",
             flow=5) for i in range(5)]
    f = [seg(IN_A, OUT_A, 5202, 40011, 500, 3000, flow=6)]
    g = [seg(IN_A, OUT_A, 5203, 40012, 900, 500, flow=7),
         seg(OUT_A, IN_A, 40012, 5203, 5000, 0, ack=1400)]
    h = [seg(IN_A, OUT_A, 5204, 40013, 7000, 8948, flags="CA", flow=8)]
    order = e[:2] + f + e[2:4] + g + h + e[4:]
    t0 = 1_700_000_001.0
    for k, p in enumerate(order):
        p.time = t0 + k * 7.2e-6
    return order


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_pcaps.py GRO.pcap GSO.pcap")
    wrpcap(sys.argv[1], gro_frames())
    wrpcap(sys.argv[2], gso_frames())


if __name__ == "__main__":
    main()
