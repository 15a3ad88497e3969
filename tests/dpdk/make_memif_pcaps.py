#!/usr/bin/python3
"""Small traces for the memif smoke run of bench/dpdk's px_dpdk_fwd and
px_dpdk_gen (scripts/dpdk-selftest).

    make_memif_pcaps.py OUTDIR

writes OUTDIR/{in,out}{,-syn,-synack}.pcap: 16 TCP/IPv4 flows each way
(documentation addresses: 198.51.100.0/24 outside, 203.0.113.0/24 inside),
inbound 1448-byte segments (3000 frames), outbound 8948-byte segments (400
frames), a TSval that ticks every 500 frames, PSH on every 20th segment of
a flow; the SYNs announce MSS 1460 (outside) and 8960 (inside). The frames
are the shape of px-bench's trace, small enough to build in a second.
Deterministic (fixed seed).
"""
import random
import sys

from scapy.all import IP, TCP, Ether, Raw, wrpcap

MAC = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def trace(direction, nflows, seg, nframes, rng):
    data, syn, synack, flows = [], [], [], []
    for i in range(nflows):
        outer, inner = f"198.51.100.{1 + i}", f"203.0.113.{1 + i}"
        src, dst = (outer, inner) if direction == "in" else (inner, outer)
        isn, irs = rng.getrandbits(32), rng.getrandbits(32)
        smss, rmss = (1460, 8960) if direction == "in" else (8960, 1460)
        sport = 10000 + i
        syn.append(Ether(**MAC) / IP(src=src, dst=dst, flags="DF") /
                   TCP(sport=sport, dport=5201, seq=isn, flags="S",
                       options=[("MSS", smss), ("NOP", None), ("NOP", None), ("Timestamp", (1, 0))]))
        synack.append(Ether(**MAC) / IP(src=dst, dst=src, flags="DF") /
                      TCP(sport=5201, dport=sport, seq=irs, ack=isn + 1, flags="SA",
                          options=[("MSS", rmss), ("NOP", None), ("NOP", None), ("Timestamp", (1, 1))]))
        flows.append([src, dst, sport, (isn + 1) & 0xFFFFFFFF, (irs + 1) & 0xFFFFFFFF, 0])
    payload = bytes(rng.getrandbits(8) for _ in range(seg + 4096))
    for k in range(nframes):
        f = flows[(k // 6) % nflows]  # bursts of 6 segments per flow
        f[5] += 1
        flags = "PA" if f[5] % 20 == 0 else "A"
        off = f[3] % 4096
        p = (Ether(**MAC) / IP(src=f[0], dst=f[1], flags="DF") /
             TCP(sport=f[2], dport=5201, seq=f[3], ack=f[4], flags=flags,
                 options=[("NOP", None), ("NOP", None), ("Timestamp", (100 + k // 500, 50))]) /
             Raw(payload[off:off + seg]))
        p.time = k * 1e-6
        f[3] = (f[3] + seg) & 0xFFFFFFFF
        data.append(p)
    for p in syn + synack:
        p.time = 0
    return data, syn, synack


def main():
    out = sys.argv[1]
    rng = random.Random(37)
    for direction, seg, n in (("in", 1448, 3000), ("out", 8948, 400)):
        data, syn, synack = trace(direction, 16, seg, n, rng)
        wrpcap(f"{out}/{direction}.pcap", data)
        wrpcap(f"{out}/{direction}-syn.pcap", syn)
        wrpcap(f"{out}/{direction}-synack.pcap", synack)


if __name__ == "__main__":
    main()
