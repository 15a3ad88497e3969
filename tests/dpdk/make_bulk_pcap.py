#!/usr/bin/python3
"""A larger inbound trace for the DPDK harness, without scapy: bulk IPv4 TCP
flows in the manner of crates/px-bench/src/trace.rs (1448-byte segments with
timestamps, bursts of about 1 ms of the flow's data at most 64 KB sent back
to back at the wire speed, TSval on a 1 ms clock, TSecr changing once a
millisecond, PSH at the end of each 128 KiB write, DF set, constant ACK).
Not the benchmark's trace (px bench engine writes that one); a scale check
of the harness and a look at DPDK's behaviour on such traffic.

usage: make_bulk_pcap.py OUT.pcap [--flows N] [--ms D] [--gbps R]
                                  [--const-ts] [--no-psh] [--seed S]
"""
import argparse
import array
import heapq
import random
import struct
import sys


def csum(data):
    if len(data) % 2:
        data += b"\0"
    a = array.array("H", data)
    if sys.byteorder == "little":
        a.byteswap()
    s = sum(a)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def frame(src, dst, sport, dport, seq, ack, ident, tsval, tsecr, psh, payload):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 8 << 4,
                      0x18 if psh else 0x10, 501, 0, 0)
    tcp += struct.pack("!BBBBII", 1, 1, 8, 10, tsval, tsecr)
    tot = 20 + len(tcp) + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, tot, ident, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", ~csum(ip) & 0xFFFF) + ip[12:]
    ph = src + dst + struct.pack("!BBH", 0, 6, len(tcp) + len(payload))
    c = ~csum(ph + tcp + payload) & 0xFFFF
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    eth = b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00"
    return eth + ip + tcp + payload


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--flows", type=int, default=64)
    ap.add_argument("--ms", type=float, default=10.0)
    ap.add_argument("--gbps", type=float, default=1.5, help="mean rate per flow")
    ap.add_argument("--wire-gbps", type=float, default=100.0)
    ap.add_argument("--const-ts", action="store_true", help="TSval/TSecr never change")
    ap.add_argument("--no-psh", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    seg = 1448
    wire_ns = (seg + 52 + 14 + 24) * 8 / a.wire_gbps  # frame + preamble/IFG
    pay = bytes(rng.randrange(256) for _ in range(65536 + seg))
    flows = []
    for i in range(a.flows):
        rate = rng.uniform(a.gbps * 2 / 3, a.gbps * 4 / 3)
        flows.append(dict(
            src=bytes([198, 51, 100, 1 + i % 200]), dst=bytes([203, 0, 113, 1 + i // 200]),
            sport=10000 + i, seq=rng.randrange(1 << 32), ack=rng.randrange(1 << 32),
            ident=rng.randrange(1 << 16), ts0=rng.randrange(1 << 31), rate=rate,
            write_left=128 * 1024))
    # events: (time_ns, flow) for the start of each flow's next burst
    ev = [(rng.uniform(0, 1e6), i) for i in range(a.flows)]
    heapq.heapify(ev)
    end = a.ms * 1e6
    frames = []
    while ev:
        t, i = heapq.heappop(ev)
        if t >= end:
            continue
        f = flows[i]
        burst = min(65536, int(f["rate"] * 1e6 / 8))  # ~1 ms of data
        n = max(1, burst // seg)
        for k in range(n):
            tt = t + k * wire_ns
            ms = 0 if a.const_ts else int(tt // 1e6)
            f["write_left"] -= seg
            psh = f["write_left"] <= 0 and not a.no_psh
            if f["write_left"] <= 0:
                f["write_left"] += 128 * 1024
            off = f["seq"] % 65536
            fr = frame(f["src"], f["dst"], f["sport"], 5201, f["seq"], f["ack"],
                       f["ident"], (f["ts0"] + ms) & 0xFFFFFFFF, (777 + ms) & 0xFFFFFFFF,
                       psh, pay[off:off + seg])
            frames.append((tt, fr))
            f["seq"] = (f["seq"] + seg) & 0xFFFFFFFF
            f["ident"] = (f["ident"] + 1) & 0xFFFF
        heapq.heappush(ev, (t + n * seg * 8 / f["rate"], i))
    frames.sort(key=lambda x: x[0])
    # frames of different flows may not overlap on one wire: serialise them
    with open(a.out, "wb") as o:
        o.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        last = -1.0
        for t, fr in frames:
            t = max(t, last + wire_ns)
            last = t
            ns = int(t) + 1_700_000_000 * 10**9
            o.write(struct.pack("<IIII", ns // 10**9, ns % 10**9, len(fr), len(fr)))
            o.write(fr)
    print(f"{a.out}: {len(frames)} frames, {a.flows} flows, {a.ms} ms", file=sys.stderr)


if __name__ == "__main__":
    main()
