#!/usr/bin/python3
"""Writes the pcaps the Wireshark dissector test reads, and what tshark must
extract from them (expectations.json), offline: no packet is sent.

Usage: make_pcaps.py OUTDIR

The bytes are built here independently of the dissector, following
docs/caravan.md and crates/px-caravan/src/lib.rs (records, malformed
reasons) and docs/fpmtud.md and crates/px-pmtud/src/fpmtud/wire.rs
(F-PMTUD layouts); two frames reproduce the Rust unit tests' fixed bytes
exactly (caravan "ab"/"xyz", the extended confirmation probe and report).

expectations.json:
  {"runs": [{"name", "pcap", "tshark_args": [...], "fields": [...],
             "types": {field: "int"|"str"|"bytes"|"bool"},
             "frames": {"N": {"note": "...", field: [value, ...]}}}]}
Every listed field of every listed frame is compared, in order of
occurrence; a field a frame does not name must be absent from it.
"""

import json
import os
import struct
import sys

from scapy.all import IP, UDP, IPv6, Ether, Raw, fragment, wrpcap

DEFAULT_DSCP = 11
FPMTUD_PORT = 9999

MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"
V4_A, V4_B = "198.51.100.1", "203.0.113.2"
V6_A, V6_B = "2001:db8:1::1", "2001:db8:2::2"


# ---------------------------------------------------------------- checksums

def csum_sum(data, acc=0):
    if len(data) % 2:
        data = data + b"\0"
    for i in range(0, len(data), 2):
        acc += (data[i] << 8) | data[i + 1]
    return acc


def fold(acc):
    while acc > 0xFFFF:
        acc = (acc & 0xFFFF) + (acc >> 16)
    return acc


def pseudo(src, dst, length):
    """Pseudo-header bytes for UDP over IPv4 or IPv6 (src/dst are strings)."""
    import ipaddress
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version == 4:
        return s.packed + d.packed + struct.pack("!BBH", 0, 17, length)
    return s.packed + d.packed + struct.pack("!I3xB", length, 17)


def udp_checksum(src, dst, udp_bytes):
    """Checksum of a UDP datagram whose checksum field is zero."""
    c = 0xFFFF - fold(csum_sum(pseudo(src, dst, len(udp_bytes)) + udp_bytes))
    return 0xFFFF if c == 0 else c


# ---------------------------------------------------------------- caravans

def record(sport, dport, payload, src=None, dst=None, csum="compute", length=None):
    """One record: an inner UDP header and payload (px_caravan::write_record).
    csum: "compute" (needs src/dst), "zero", or an int written as is."""
    n = 8 + len(payload) if length is None else length
    head = struct.pack("!HHHH", sport, dport, n, 0)
    if csum == "compute":
        c = udp_checksum(src, dst, head + payload)
    elif csum == "zero":
        c = 0
    else:
        c = csum
    return struct.pack("!HHHH", sport, dport, n, c) + payload, c


def ip_layer(src, dst, dscp, ecn=0, **kw):
    tos = (dscp << 2) | ecn
    if ":" in src:
        return IPv6(src=src, dst=dst, tc=tos, hlim=64, **kw)
    return IP(src=src, dst=dst, tos=tos, ttl=64, flags=kw.pop("flags", "DF"), id=kw.pop("id", 1), **kw)


def caravan_frame(src, dst, sport, dport, payload, dscp=DEFAULT_DSCP, outer_csum=None, ecn=0, **kw):
    """The outer datagram; outer_csum None = correct, else written as is."""
    udp = UDP(sport=sport, dport=dport)
    if outer_csum is not None:
        udp.chksum = outer_csum
    return Ether(src=MAC_A, dst=MAC_B) / ip_layer(src, dst, dscp, ecn, **kw) / udp / Raw(payload)


def rec_expect(recs):
    """Expected per-record fields for well-formed records:
    recs = [(sport, dport, payload, checksum, status)]."""
    e = {k: [] for k in ("pxcaravan.record.srcport", "pxcaravan.record.dstport", "pxcaravan.record.length",
                         "pxcaravan.record.checksum", "pxcaravan.record.checksum.status",
                         "pxcaravan.record.payload_len", "pxcaravan.record.payload", "pxcaravan.record.offset")}
    off = 0
    for sport, dport, payload, c, status in recs:
        e["pxcaravan.record.srcport"].append(sport)
        e["pxcaravan.record.dstport"].append(dport)
        e["pxcaravan.record.length"].append(8 + len(payload))
        e["pxcaravan.record.checksum"].append(c)
        e["pxcaravan.record.checksum.status"].append(status)
        e["pxcaravan.record.payload_len"].append(len(payload))
        e["pxcaravan.record.payload"].append(payload.hex())
        e["pxcaravan.record.offset"].append(off)
        off += 8 + len(payload)
    return e


CARAVAN_FIELDS = [
    "pxcaravan.dscp", "pxcaravan.records", "pxcaravan.malformed", "pxcaravan.checksum.status",
    "pxcaravan.record.offset", "pxcaravan.record.srcport", "pxcaravan.record.dstport", "pxcaravan.record.length",
    "pxcaravan.record.checksum", "pxcaravan.record.checksum.status", "pxcaravan.record.payload_len",
    "pxcaravan.record.payload", "pxcaravan.unparsed", "fpmtud.kind",
]
# Expert infos, compared as a count of occurrences: one per malformed reason
# (named as px_caravan::Malformed::name), and the informational ones.
REASONS = ["empty", "truncated", "bad_length", "overrun", "port_mismatch", "checksum"]
CARAVAN_EXPERTS = ["pxcaravan.malformed." + r for r in REASONS] + [
    "pxcaravan.record.bad_checksum", "pxcaravan.record.zero_checksum_v6", "pxcaravan.single"]
CARAVAN_FIELDS += CARAVAN_EXPERTS
CARAVAN_TYPES = {f: "int" for f in CARAVAN_FIELDS}
CARAVAN_TYPES.update({f: "count" for f in CARAVAN_EXPERTS})
CARAVAN_TYPES.update({"pxcaravan.malformed": "str", "pxcaravan.record.payload": "bytes",
                      "pxcaravan.unparsed": "bytes", "fpmtud.kind": "str"})


def build_caravans():
    frames, exp = [], {}

    def add(pkt, note, **fields):
        frames.append(pkt)
        fields["note"] = note
        exp[str(len(frames))] = fields
        return str(len(frames))

    def good(src, dst, sport, dport, payloads, csum="compute", dscp=DEFAULT_DSCP, ecn=0, note="", **kw):
        raw, recs = b"", []
        for p in payloads:
            r, c = record(sport, dport, p, src, dst, csum)
            raw += r
            status = 3 if c == 0 else 1
            recs.append((sport, dport, p, c, status))
        e = rec_expect(recs)
        e.update({"pxcaravan.dscp": [dscp], "pxcaravan.records": [len(payloads)],
                  "pxcaravan.checksum.status": [1]})
        return add(caravan_frame(src, dst, sport, dport, raw, dscp=dscp, ecn=ecn, **kw), note, **e), raw

    # 1. The documented example (docs/caravan.md, px-caravan's unit test
    # layout_is_the_documented_one): flow 4000 -> 443, "ab" and "xyz", no
    # inner checksum; the payload bytes are checked against the document.
    n, raw = good(V4_A, V4_B, 4000, 443, [b"ab", b"xyz"], csum="zero", note="documented example")
    assert raw == bytes.fromhex("0fa001bb000a00006162" "0fa001bb000b000078797a"), raw.hex()
    # 2. Five records of varied sizes (one empty payload), computed inner checksums.
    n_five, five = good(V4_A, V4_B, 40000, 4433, [b"first", b"", b"x" * 1200, bytes(range(256)), b"last"], note="v4, 5 records")
    # 3. IPv6, three records.
    n_v6, v6three = good(V6_A, V6_B, 50000, 4433, [b"quic-1" * 20, b"quic-2", b"\x00\xff" * 300], note="v6, 3 records")
    # 4. A caravan of one (valid; the gateway never builds one).
    n_single, _ = good(V6_B, V6_A, 4433, 50000, [b"alone"], note="v6, single record")
    exp[n_single]["pxcaravan.single"] = 1
    # 5. ECN set on the caravan (tos = 11 << 2 | CE); the last record is a bare header.
    good(V4_A, V4_B, 40001, 4433, [b"e1", b"e2", b"e3", b""], ecn=3, note="v4, ECN CE, last payload empty")
    # 6. Full at a 9000-byte MTU: 7 x 1200 (builder_stops_at_mtu).
    good(V4_A, V4_B, 1, 2, [bytes([i]) * 1200 for i in range(7)], csum="zero", note="v4, 7 x 1200 jumbo")

    # 7. IPv6 with a zero inner checksum: allowed in the format (the gateway
    # fills it in when the datagram leaves), not malformed.
    raw = record(50000, 4433, b"zero-v6", csum="zero")[0] + record(50000, 4433, b"ok", V6_A, V6_B)[0]
    c2 = record(50000, 4433, b"ok", V6_A, V6_B)[1]
    e = rec_expect([(50000, 4433, b"zero-v6", 0, 3), (50000, 4433, b"ok", c2, 1)])
    e.update({"pxcaravan.dscp": [11], "pxcaravan.records": [2], "pxcaravan.checksum.status": [1],
              "pxcaravan.record.zero_checksum_v6": 1})
    add(caravan_frame(V6_A, V6_B, 50000, 4433, raw), "v6, zero inner checksum", **e)

    # 8. A wrong inner checksum: shown (status 2), not a malformed caravan.
    r1, c1 = record(40000, 4433, b"good", V4_A, V4_B)
    r2, c2 = record(40000, 4433, b"bad!", V4_A, V4_B)
    r2 = r2[:6] + struct.pack("!H", c2 ^ 0x0101) + r2[8:]
    e = rec_expect([(40000, 4433, b"good", c1, 1), (40000, 4433, b"bad!", c2 ^ 0x0101, 2)])
    e.update({"pxcaravan.dscp": [11], "pxcaravan.records": [2], "pxcaravan.checksum.status": [1],
              "pxcaravan.record.bad_checksum": 1})
    add(caravan_frame(V4_A, V4_B, 40000, 4433, r1 + r2), "v4, bad inner checksum", **e)

    # 9. Zero outer checksum over IPv4: allowed (not verified).
    r, c = record(40000, 4433, b"z", V4_A, V4_B)
    r_b, c_b = record(40000, 4433, b"zz", V4_A, V4_B)
    e = rec_expect([(40000, 4433, b"z", c, 1), (40000, 4433, b"zz", c_b, 1)])
    e.update({"pxcaravan.dscp": [11], "pxcaravan.records": [2], "pxcaravan.checksum.status": [3]})
    add(caravan_frame(V4_A, V4_B, 40000, 4433, r + r_b, outer_csum=0), "v4, zero outer checksum", **e)

    # Malformed caravans, one per px_caravan::Malformed reason, built like
    # each_error_is_reported_where_it_is in lib.rs.
    doc = bytes.fromhex("0fa001bb000a00006162" "0fa001bb000b000078797a")
    first = rec_expect([(4000, 443, b"ab", 0, 3)])
    malformed = {}

    def bad(payload, note, reason, nrec, src=V4_A, dst=V4_B, sport=4000, dport=443, extra=None, **kw):
        e = dict(first) if nrec else {}
        e.update({"pxcaravan.dscp": [11], "pxcaravan.records": [nrec], "pxcaravan.malformed": reason,
                  "pxcaravan.checksum.status": [1]})
        e.update({"pxcaravan.malformed." + r: 1 for r in reason})
        e.update(extra or {})
        n = add(caravan_frame(src, dst, sport, dport, payload, **kw), note, **e)
        malformed[n] = e
        return n

    bad(b"", "empty", ["empty"], 0)
    n_trunc = bad(doc[:13], "truncated: 3 bytes at 10", ["truncated"], 1,
                  extra={"pxcaravan.record.offset": [0, 10], "pxcaravan.unparsed": []})
    bl = bytearray(doc)
    bl[15] = 7
    bad(bytes(bl), "bad_length: 7 at 10", ["bad_length"], 1,
        extra={"pxcaravan.record.offset": [0, 10], "pxcaravan.record.srcport": [4000, 4000],
               "pxcaravan.record.dstport": [443, 443], "pxcaravan.record.length": [10, 7],
               "pxcaravan.record.checksum": [0, 0], "pxcaravan.unparsed": ["78797a"]})
    bad(doc[:20], "overrun: 11 > 10 at 10", ["overrun"], 1,
        extra={"pxcaravan.record.offset": [0, 10], "pxcaravan.record.srcport": [4000, 4000],
               "pxcaravan.record.dstport": [443, 443], "pxcaravan.record.length": [10, 11],
               "pxcaravan.record.checksum": [0, 0]})
    # The Rust test's mismatch: records 4000 -> 443 inside a 4000 -> 444 caravan.
    # Both records are of another flow: each is flagged, the reason is once.
    bad(doc, "port_mismatch at 0", ["port_mismatch"], 0, dport=444,
        extra=dict(rec_expect([(4000, 443, b"ab", 0, 3), (4000, 443, b"xyz", 0, 3)]),
                   **{"pxcaravan.malformed.port_mismatch": 2}))
    # A record of another flow in second place.
    other = record(4001, 443, b"xyz", csum="zero")[0]
    bad(doc[:10] + other, "port_mismatch at 10", ["port_mismatch"], 1,
        extra=dict(rec_expect([(4000, 443, b"ab", 0, 3), (4001, 443, b"xyz", 0, 3)])))
    bad(doc, "checksum: wrong outer checksum (v4)", ["checksum"], 2, outer_csum=0x1234,
        extra=dict(rec_expect([(4000, 443, b"ab", 0, 3), (4000, 443, b"xyz", 0, 3)]),
                   **{"pxcaravan.checksum.status": [2]}))
    bad(doc, "checksum: zero outer checksum over IPv6", ["checksum"], 2, src=V6_A, dst=V6_B, outer_csum=0,
        extra=dict(rec_expect([(4000, 443, b"ab", 0, 3), (4000, 443, b"xyz", 0, 3)]),
                   **{"pxcaravan.checksum.status": [3], "pxcaravan.record.zero_checksum_v6": 2}))
    # Both: the gateway checks the checksum first, Caravan::parse then says overrun.
    n_both = bad(doc[:20], "checksum and overrun", ["checksum", "overrun"], 1, outer_csum=0x1234,
                 extra={"pxcaravan.record.offset": [0, 10], "pxcaravan.record.srcport": [4000, 4000],
                        "pxcaravan.record.dstport": [443, 443], "pxcaravan.record.length": [10, 11],
                        "pxcaravan.record.checksum": [0, 0], "pxcaravan.checksum.status": [2]})

    # Records carrying DNS queries (inner dissection by port, a preference).
    from scapy.layers.dns import DNS, DNSQR
    names = ["a.example.", "b.example.", "c.example."]
    raw, recs = b"", []
    for i, q in enumerate(names):
        p = bytes(DNS(id=i + 1, rd=1, qd=DNSQR(qname=q)))
        r, c = record(5353, 53, p, V4_A, V4_B)
        raw += r
        recs.append((5353, 53, p, c, 1))
    e = rec_expect(recs)
    e.update({"pxcaravan.dscp": [11], "pxcaravan.records": [3], "pxcaravan.checksum.status": [1]})
    # UDP tries port 53's DNS dissector before any heuristic: DNS claims the
    # caravan (and fails on it: an exception in DNS, allowed here), and the
    # postdissector adds the caravan.
    e["allow_exception"] = True
    n_dns = add(caravan_frame(V4_A, V4_B, 5353, 53, raw), "v4, 3 DNS queries", **e)

    # Not caravans.
    add(caravan_frame(V4_A, V4_B, 4000, 443, doc, dscp=0), "DSCP 0: plain UDP")
    n_af11 = add(caravan_frame(V4_A, V4_B, 4000, 443, doc, dscp=10), "DSCP 10 (AF11): plain UDP")
    n_dscp12 = add(caravan_frame(V4_A, V4_B, 4000, 443, doc, dscp=12), "DSCP 12: plain UDP by default")
    # An IPv4 fragment carrying the codepoint (MF set): never a caravan.
    add(caravan_frame(V4_A, V4_B, 4000, 443, doc, flags="MF", id=77), "IPv4 first fragment")

    return frames, exp, {"malformed": malformed, "n_dscp12": n_dscp12, "n_af11": n_af11, "doc": doc,
                         "n_trunc": n_trunc, "n_both": n_both, "n_dns": n_dns, "dns_names": names,
                         "n_five": n_five, "five": five, "n_v6": n_v6, "v6three": v6three}


# ---------------------------------------------------------------- F-PMTUD

FPMTUD_FIELDS = [
    "fpmtud.kind", "fpmtud.magic", "fpmtud.marker", "fpmtud.version", "fpmtud.type", "fpmtud.nonce",
    "fpmtud.probe_id", "fpmtud.probe.ip_len", "fpmtud.probe.reserved", "fpmtud.padding_len",
    "fpmtud.report.flags", "fpmtud.report.flags.reassembled", "fpmtud.report.flags.fragmented",
    "fpmtud.report.flags.truncated", "fpmtud.report.flags.confirm", "fpmtud.report.link_mtu",
    "fpmtud.report.probe_ip_len", "fpmtud.report.largest_ip_len", "fpmtud.report.fragment_count",
    "fpmtud.fragment.offset", "fpmtud.fragment.ip_len", "fpmtud.fragment.mf", "fpmtud.trailing",
    "fpmtud.legacy.largest_ip_len", "fpmtud.malformed", "fpmtud.needed", "pxcaravan.records",
]
# Expert infos, one per wire.rs ParseError (snake_case), counted.
FPMTUD_EXPERTS = ["fpmtud.malformed." + r for r in ("too_short", "not_fpmt", "unsupported_version",
                                                     "unexpected_type")] + ["fpmtud.unknown_version_probe"]
FPMTUD_FIELDS += FPMTUD_EXPERTS
FPMTUD_TYPES = {f: "int" for f in FPMTUD_FIELDS}
FPMTUD_TYPES.update({f: "str" for f in ("fpmtud.kind", "fpmtud.magic", "fpmtud.marker", "fpmtud.malformed")})
FPMTUD_TYPES.update({f: "bool" for f in FPMTUD_FIELDS if ".flags." in f or f.endswith(".mf")})
FPMTUD_TYPES["fpmtud.trailing"] = "bytes"
FPMTUD_TYPES.update({f: "count" for f in FPMTUD_EXPERTS})

PROBER, RESPONDER = "192.0.2.1", "198.51.100.2"


def ext_header(ty, nonce, probe_id, version=1):
    return b"FPMT" + b"PX" + bytes([version, ty]) + struct.pack("!QI", nonce, probe_id)


def ext_probe(ty, nonce, probe_id, ip_len, total):
    """ProbeRepr::emit into a buffer of `total` bytes."""
    b = ext_header(ty, nonce, probe_id) + struct.pack("!HH", ip_len, 0)
    return b + bytes(total - len(b))


def report(nonce, probe_id, flags, link_mtu, probe_ip_len, largest, recs, count=None):
    """ReportRepr::emit; recs = [(offset, ip_len, mf)]."""
    n = len(recs) if count is None else count
    b = ext_header(3, nonce, probe_id) + struct.pack("!BBHHHHH", flags, 0, link_mtu, probe_ip_len, largest, n, 0)
    for off, ln, mf in recs:
        b += struct.pack("!HHBB", off, ln, 1 if mf else 0, 0)
    return b


def fpmt_frame(src, dst, sport, dport, payload, df=False):
    if ":" in src:
        ip = IPv6(src=src, dst=dst, hlim=64)
    else:
        ip = IP(src=src, dst=dst, ttl=64, flags="DF" if df else 0, id=0x4242)
    return Ether(src=MAC_A, dst=MAC_B) / ip / UDP(sport=sport, dport=dport) / Raw(payload)


def report_expect(nonce, probe_id, flags, link_mtu, probe_ip_len, largest, recs, trailing=None):
    e = {"fpmtud.kind": ["report"], "fpmtud.magic": ["FPMT"], "fpmtud.marker": ["PX"], "fpmtud.version": [1],
         "fpmtud.type": [3], "fpmtud.nonce": [nonce], "fpmtud.probe_id": [probe_id],
         "fpmtud.report.flags": [flags],
         "fpmtud.report.flags.reassembled": [bool(flags & 1)], "fpmtud.report.flags.fragmented": [bool(flags & 2)],
         "fpmtud.report.flags.truncated": [bool(flags & 4)], "fpmtud.report.flags.confirm": [bool(flags & 8)],
         "fpmtud.report.link_mtu": [link_mtu], "fpmtud.report.probe_ip_len": [probe_ip_len],
         "fpmtud.report.largest_ip_len": [largest], "fpmtud.report.fragment_count": [len(recs)],
         "fpmtud.fragment.offset": [r[0] for r in recs], "fpmtud.fragment.ip_len": [r[1] for r in recs],
         "fpmtud.fragment.mf": [r[2] for r in recs]}
    if trailing is not None:
        e["fpmtud.trailing"] = [trailing.hex()]
    return e


def probe_expect(ty, nonce, probe_id, ip_len, total):
    return {"fpmtud.kind": [{1: "probe", 2: "confirm"}[ty]], "fpmtud.magic": ["FPMT"], "fpmtud.marker": ["PX"],
            "fpmtud.version": [1], "fpmtud.type": [ty], "fpmtud.nonce": [nonce], "fpmtud.probe_id": [probe_id],
            "fpmtud.probe.ip_len": [ip_len], "fpmtud.probe.reserved": [0], "fpmtud.padding_len": [total - 24]}


def build_fpmtud():
    frames, exp = [], {}

    def add(pkts, note, **fields):
        pkts = pkts if isinstance(pkts, list) else [pkts]
        frames.extend(pkts)
        for r in fields.get("fpmtud.malformed", []):
            fields["fpmtud.malformed." + r] = 1
        fields["note"] = note
        exp[str(len(frames))] = fields  # the last frame carries the dissection (reassembly)
        for i in range(len(frames) - len(pkts) + 1, len(frames)):
            exp[str(i)] = {"note": note + " (earlier fragment)"}

    P, R = PROBER, RESPONDER
    # Legacy: probe of IP length 1500 (1472 bytes of payload) and its reply.
    add(fpmt_frame(P, R, 40000, FPMTUD_PORT, b"FPMT" + bytes(1468)), "legacy probe, 1500",
        **{"fpmtud.kind": ["legacy_probe"], "fpmtud.magic": ["FPMT"], "fpmtud.padding_len": [1468]})
    add(fpmt_frame(R, P, FPMTUD_PORT, 40000, struct.pack("!I", 1476)), "legacy reply 1476",
        **{"fpmtud.kind": ["legacy_reply"], "fpmtud.legacy.largest_ip_len": [1476]})
    # wire.rs legacy_probe_and_reply_bytes: the reply of 1476 is 00 00 05 c4.
    assert struct.pack("!I", 1476) == bytes([0, 0, 0x05, 0xC4])
    # The reference tool pads with anything after FPMT.
    add(fpmt_frame(P, R, 40001, FPMTUD_PORT, b"FPMT" + b"reference tool padding" * 3), "legacy probe, text padding",
        **{"fpmtud.kind": ["legacy_probe"], "fpmtud.magic": ["FPMT"], "fpmtud.padding_len": [66]})
    # Minimal legacy probe: exactly FPMT (parse_request accepts it).
    add(fpmt_frame(P, R, 40002, FPMTUD_PORT, b"FPMT"), "legacy probe, 4 bytes",
        **{"fpmtud.kind": ["legacy_probe"], "fpmtud.magic": ["FPMT"], "fpmtud.padding_len": [0]})
    # A big legacy reply value (u32).
    add(fpmt_frame(R, P, FPMTUD_PORT, 40002, struct.pack("!I", 0x00012345)), "legacy reply, > 16 bits",
        **{"fpmtud.kind": ["legacy_reply"], "fpmtud.legacy.largest_ip_len": [0x12345]})

    # Extended probe, round 1 (DF clear), 1500 bytes.
    nonce, pid = 0xDEADBEEFCAFEF00D, 7
    add(fpmt_frame(P, R, 40010, FPMTUD_PORT, ext_probe(1, nonce, pid, 1500, 1472)), "extended probe 1500",
        **probe_expect(1, nonce, pid, 1500, 1472))
    # The same probe fragmented by a 1400-MTU router: reassembled by Wireshark.
    whole = fpmt_frame(P, R, 40011, FPMTUD_PORT, ext_probe(1, nonce, pid + 1, 1500, 1472))
    frags = [Ether(src=MAC_A, dst=MAC_B) / f for f in fragment(whole[IP], fragsize=1376)]
    add(frags, "extended probe 1500, fragmented 1396 + 124", **probe_expect(1, nonce, pid + 1, 1500, 1472))
    # wire.rs extended_probe_fixed_bytes: a confirmation probe of 28 bytes.
    confirm = ext_probe(2, 0x0102030405060708, 0x0A0B0C0D, 1500, 28)
    assert confirm == bytes([0x46, 0x50, 0x4D, 0x54, 0x50, 0x58, 1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0B, 0x0C,
                             0x0D, 0x05, 0xDC, 0, 0, 0, 0, 0, 0])
    add(fpmt_frame(P, R, 40012, FPMTUD_PORT, confirm, df=True), "confirmation probe (wire.rs bytes)",
        **probe_expect(2, 0x0102030405060708, 0x0A0B0C0D, 1500, 28))
    # wire.rs extended_report_fixed_bytes: 44 bytes, two fragment records.
    recs = [(0, 1396, True), (1376, 124, False)]
    rep = report(7, 1, 0x03, 1500, 1500, 1396, recs)
    assert rep[20:32] == bytes([0x03, 0, 0x05, 0xDC, 0x05, 0xDC, 0x05, 0x74, 0, 2, 0, 0])
    assert rep[32:44] == bytes([0, 0, 0x05, 0x74, 1, 0, 0x05, 0x60, 0, 0x7C, 0, 0])
    add(fpmt_frame(R, P, FPMTUD_PORT, 40012, rep), "report (wire.rs bytes)",
        **report_expect(7, 1, 0x03, 1500, 1500, 1396, recs))
    # A report to a confirmation, no records, trailing bytes (ignored).
    rep = report(nonce, 9, 0x09, 9000, 1400, 1400, []) + b"\x01\x02\x03"
    add(fpmt_frame(R, P, FPMTUD_PORT, 40013, rep), "confirm report + trailing",
        **report_expect(nonce, 9, 0x09, 9000, 1400, 1400, [], trailing=b"\x01\x02\x03"))
    # IP_RECVFRAGSIZE responder: FRAGMENTED, n = 0.
    rep = report(1, 2, 0x03, 0, 1500, 1396, [])
    add(fpmt_frame(R, P, FPMTUD_PORT, 40014, rep), "report, fragsize only",
        **report_expect(1, 2, 0x03, 0, 1500, 1396, []))
    # Truncated list, three records, never reassembled; unknown flag bits.
    recs = [(0, 1276, True), (1256, 1276, True), (2512, 48, True)]
    rep = report(2**64 - 1, 2**32 - 1, 0x06 | 0x80, 1280, 4000, 1276, recs)
    e = report_expect(2**64 - 1, 2**32 - 1, 0x86, 1280, 4000, 1276, recs)
    add(fpmt_frame(R, P, FPMTUD_PORT, 40015, rep), "truncated report, max ids", **e)
    # Extended messages on other ports (heuristic on FPMT).
    add(fpmt_frame(P, R, 41000, 7777, ext_probe(1, 5, 6, 576, 548)), "extended probe on port 7777",
        **probe_expect(1, 5, 6, 576, 548))
    rep = report(5, 6, 0x01, 1500, 576, 576, [(0, 576, False)])
    add(fpmt_frame(R, P, 7777, 41000, rep), "report from port 7777",
        **report_expect(5, 6, 0x01, 1500, 576, 576, [(0, 576, False)]))
    add(fpmt_frame(P, R, 41001, 7777, b"FPMT" + bytes(100)), "legacy probe on port 7777",
        **{"fpmtud.kind": ["legacy_probe"], "fpmtud.magic": ["FPMT"], "fpmtud.padding_len": [100]})
    # IPv6: confirmation probes answer DPLPMTUD.
    add(fpmt_frame(V6_A, V6_B, 40020, FPMTUD_PORT, ext_probe(2, 42, 3, 1280, 1232)), "v6 confirmation",
        **probe_expect(2, 42, 3, 1280, 1232))
    add(fpmt_frame(V6_B, V6_A, FPMTUD_PORT, 40020, report(42, 3, 0x09, 1500, 1280, 1280, [])), "v6 report",
        **report_expect(42, 3, 0x09, 1500, 1280, 1280, []))

    # Refused messages, with wire.rs's ParseError names.
    short = b"FPMTPX\x01\x01short"
    add(fpmt_frame(P, R, 40030, FPMTUD_PORT, short), "too_short probe (24, 13)",
        **{"fpmtud.kind": ["probe"], "fpmtud.magic": ["FPMT"], "fpmtud.marker": ["PX"], "fpmtud.version": [1],
           "fpmtud.type": [1], "fpmtud.malformed": ["too_short"], "fpmtud.needed": [24]})
    full = report(7, 1, 0x03, 1500, 1500, 1396, [(0, 1396, True), (1376, 124, False)])
    add(fpmt_frame(R, P, FPMTUD_PORT, 40031, full[:43]), "too_short report (44, 43)",
        **dict(report_expect(7, 1, 0x03, 1500, 1500, 1396, [(0, 1396, True)]),
               **{"fpmtud.report.fragment_count": [2], "fpmtud.malformed": ["too_short"], "fpmtud.needed": [44]}))
    add(fpmt_frame(R, P, FPMTUD_PORT, 40032, b"FPMTPX\x01\x03" + bytes(12)), "too_short report header (32, 20)",
        **{"fpmtud.kind": ["report"], "fpmtud.magic": ["FPMT"], "fpmtud.marker": ["PX"], "fpmtud.version": [1],
           "fpmtud.type": [3], "fpmtud.nonce": [0], "fpmtud.probe_id": [0],
           "fpmtud.malformed": ["too_short"], "fpmtud.needed": [32]})
    add(fpmt_frame(P, R, 40033, FPMTUD_PORT, b"FPMTPX\x01\x05" + bytes(16)), "unexpected_type 5",
        **{"fpmtud.kind": ["unknown"], "fpmtud.magic": ["FPMT"], "fpmtud.marker": ["PX"], "fpmtud.version": [1],
           "fpmtud.type": [5], "fpmtud.nonce": [0], "fpmtud.probe_id": [0], "fpmtud.malformed": ["unexpected_type"]})
    v2 = bytearray(40)
    v2[:8] = b"FPMTPX\x02\x03"
    add(fpmt_frame(R, P, FPMTUD_PORT, 40034, bytes(v2)), "unsupported_version 2 (reply)",
        **{"fpmtud.kind": ["unknown"], "fpmtud.magic": ["FPMT"], "fpmtud.marker": ["PX"], "fpmtud.version": [2],
           "fpmtud.malformed": ["unsupported_version"]})
    add(fpmt_frame(P, R, 40035, FPMTUD_PORT, b"FPMTPX\x09\x01" + bytes(60)), "version 9 probe: legacy",
        **{"fpmtud.kind": ["legacy_probe"], "fpmtud.magic": ["FPMT"], "fpmtud.marker": ["PX"],
           "fpmtud.version": [9], "fpmtud.padding_len": [64], "fpmtud.unknown_version_probe": 1})
    add(fpmt_frame(P, R, 40036, FPMTUD_PORT, b"XPMTxxxx"), "not_fpmt to the port",
        **{"fpmtud.kind": ["unknown"], "fpmtud.malformed": ["not_fpmt"]})
    add(fpmt_frame(R, P, FPMTUD_PORT, 40037, b"FPM"), "too_short reply (20, 3)",
        **{"fpmtud.kind": ["unknown"], "fpmtud.malformed": ["too_short"], "fpmtud.needed": [20]})
    # Not F-PMTUD: other ports, no magic.
    add(fpmt_frame(P, R, 40040, 7777, struct.pack("!I", 1476)), "4 bytes on another port: not F-PMTUD")
    add(fpmt_frame(P, R, 40041, 7777, b"XPMT" + bytes(40)), "no magic on another port: not F-PMTUD")
    return frames, exp


# ---------------------------------------------------------------- random

def caravan_parse(payload, ports):
    """px_caravan::Caravan::parse(payload, ports), re-written from lib.rs
    (ports: (sport, dport) or None): (first error's reason or None, records
    before it, their offsets and the offset of the record in error)."""
    off, count, offsets = 0, 0, []
    while off < len(payload):
        rest = len(payload) - off
        offsets.append(off)
        if rest < 8:
            return "truncated", count, offsets
        rlen = struct.unpack("!H", payload[off + 4:off + 6])[0]
        if rlen < 8:
            return "bad_length", count, offsets
        if rlen > rest:
            return "overrun", count, offsets
        if ports is not None and struct.unpack("!HH", payload[off:off + 4]) != ports:
            return "port_mismatch", count, offsets
        off += rlen
        count += 1
    if count == 0:
        return "empty", 0, offsets
    return None, count, offsets


def build_random(seed=15):
    """Caravan-shaped payloads with random damage, and random bytes after
    FPMT: the reason and record count must be Caravan::parse's; nothing may
    raise a Lua error."""
    import random
    rnd = random.Random(seed)
    frames, exp = [], {}
    for i in range(150):
        sport, dport = rnd.choice([(4000, 443), (40000, 4433), (1, 2)])
        payload = b""
        for _ in range(rnd.randint(0, 6)):
            p = bytes(rnd.getrandbits(8) for _ in range(rnd.choice([0, 1, 7, 8, 30, 200])))
            ports = (sport, dport) if rnd.random() < 0.9 else (sport + 1, dport)
            payload += record(ports[0], ports[1], p, csum=rnd.getrandbits(16))[0]
        damage = rnd.random()
        if payload and damage < 0.2:
            payload = payload[:rnd.randrange(len(payload))]  # cut anywhere
        elif payload and damage < 0.4:
            k = rnd.randrange(len(payload))  # one random byte
            payload = payload[:k] + bytes([rnd.getrandbits(8)]) + payload[k + 1:]
        elif len(payload) >= 8 and damage < 0.5:
            # A length below 8 in the first record, or in the second if there is one.
            at = 0
            first = struct.unpack("!H", payload[4:6])[0]
            if rnd.random() < 0.5 and 8 <= first <= len(payload) - 8:
                at = first
            payload = payload[:at + 4] + struct.pack("!H", rnd.randint(0, 7)) + payload[at + 6:]
        elif damage < 0.6:
            payload += bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 12)))  # junk after
        src, dst = (V4_A, V4_B) if i % 3 else (V6_A, V6_B)
        frames.append(caravan_frame(src, dst, sport, dport, payload))
        reason, count, offsets = caravan_parse(payload, (sport, dport))
        if reason == "port_mismatch":
            # After a mismatch the dissector walks on for display, as
            # Caravan::parse(payload, None) would.
            offsets = caravan_parse(payload, None)[2]
        e = {"note": f"random caravan {i}", "pxcaravan.records": [count],
             "pxcaravan.malformed": [reason] if reason else [], "pxcaravan.record.offset": offsets}
        if sport == 4000:
            # Wireshark's ICQ dissector has port 4000 and may fail on the
            # payload before the postdissector adds the caravan.
            e["allow_exception"] = True
        exp[str(len(frames))] = e
    for i in range(80):
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 60)))
        head = rnd.choice([b"FPMT", b"FPMTPX", b"FPMTPX\x01", b"FPMTPX\x01\x03", b"FPMTPX\x01\x01", b"FPMTPX\x02"])
        if rnd.random() < 0.5:
            frames.append(fpmt_frame(PROBER, RESPONDER, 40000 + i, FPMTUD_PORT, head + body))
        else:
            frames.append(fpmt_frame(RESPONDER, PROBER, FPMTUD_PORT, 40000 + i, head + body))
    return frames, exp


# ---------------------------------------------------------------- main

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    cframes, cexp, cx = build_caravans()
    fframes, fexp = build_fpmtud()
    wrpcap(os.path.join(out, "caravan.pcap"), cframes)
    wrpcap(os.path.join(out, "fpmtud.pcap"), fframes)
    rframes, rexp = build_random()
    wrpcap(os.path.join(out, "random.pcap"), rframes)

    runs = [
        {"name": "caravan (defaults)", "pcap": "caravan.pcap", "tshark_args": [], "frames": cexp},
        {"name": "fpmtud (defaults)", "pcap": "fpmtud.pcap", "tshark_args": [], "frames": fexp},
    ]
    # Preferences.
    d12 = {}
    for n, e in cexp.items():
        d12[n] = {"note": e["note"] + " (not the codepoint any more)"} if e.get("pxcaravan.dscp") == [11] else \
            {"note": e["note"]}
        if e.get("allow_exception"):
            d12[n]["allow_exception"] = True
    doc = rec_expect([(4000, 443, b"ab", 0, 3), (4000, 443, b"xyz", 0, 3)])
    d12[cx["n_dscp12"]] = dict(doc, **{"note": "DSCP 12 is the codepoint", "pxcaravan.dscp": [12],
                                       "pxcaravan.records": [2], "pxcaravan.checksum.status": [1]})
    runs.append({"name": "caravan, pxcaravan.dscp:12", "pcap": "caravan.pcap",
                 "tshark_args": ["-o", "pxcaravan.dscp:12"], "frames": d12})
    strict = {}
    for n, e in cexp.items():
        strict[n] = {"note": e["note"] + " (strict heuristic: not claimed)"} if n in cx["malformed"] else e
    runs.append({"name": "caravan, claim_malformed off", "pcap": "caravan.pcap",
                 "tshark_args": ["-o", "pxcaravan.claim_malformed:FALSE"], "frames": strict})
    runs.append({"name": "caravan, heuristic off", "pcap": "caravan.pcap",
                 "tshark_args": ["-o", "pxcaravan.heuristic:FALSE"],
                 "frames": {n: {"note": e["note"] + " (heuristic off)", "allow_exception": bool(e.get("allow_exception"))}
                            for n, e in cexp.items()}})
    nocheck = {n: dict(e) for n, e in cexp.items()}
    for n, e in nocheck.items():
        if e.get("pxcaravan.checksum.status") == [1]:
            e["pxcaravan.checksum.status"] = [0]
        if e.get("pxcaravan.checksum.status") == [2]:
            e["pxcaravan.checksum.status"] = [0]
            e["pxcaravan.malformed"] = [r for r in e["pxcaravan.malformed"] if r != "checksum"]
            e.pop("pxcaravan.malformed.checksum", None)
    runs.append({"name": "caravan, check_checksum off", "pcap": "caravan.pcap",
                 "tshark_args": ["-o", "pxcaravan.check_checksum:FALSE"], "frames": nocheck})
    # Decode As forces the dissector whatever the DSCP.
    forced = {n: {"note": e["note"]} for n, e in cexp.items()}
    forced[cx["n_af11"]] = dict(doc, **{"note": "DSCP 10 forced by Decode As", "pxcaravan.dscp": [10],
                                        "pxcaravan.records": [2], "pxcaravan.checksum.status": [1]})
    runs.append({"name": "caravan, Decode As udp.port==443", "pcap": "caravan.pcap",
                 "tshark_args": ["-d", "udp.port==443,pxcaravan", "-Y", "ip.dsfield.dscp == 10"],
                 "frame_filter": True, "frames": {cx["n_af11"]: forced[cx["n_af11"]]}})
    # Random damage: reasons and counts as Caravan::parse gives them; the
    # F-PMTUD frames are only checked for dissector errors.
    runs.append({"name": "random caravans vs Caravan::parse", "pcap": "random.pcap", "tshark_args": [],
                 "frame_filter": True, "frames": rexp,
                 "fields_override": ["pxcaravan.records", "pxcaravan.malformed", "pxcaravan.record.offset"]})
    # A capture cut at 100 bytes (editcap -s 100): the walk stops where the
    # captured bytes end, with no verdict; the outer checksum is unverified.
    five_cut = {k: v[:2] for k, v in rec_expect([(40000, 4433, b"first", None, 1), (40000, 4433, b"", None, 1)]).items()}
    five_cut["pxcaravan.record.checksum"] = cexp[cx["n_five"]]["pxcaravan.record.checksum"][:2]
    five_cut.update({"note": "v4, 5 records, cut at 100 bytes: 2 records captured", "pxcaravan.dscp": [11],
                     "pxcaravan.records": [2], "pxcaravan.checksum.status": [0],
                     "pxcaravan.unparsed": [cx["five"][21:100 - 42].hex()]})
    cut = {"1": cexp["1"], cx["n_five"]: five_cut,
           cx["n_v6"]: {"note": "v6, 3 records, cut at 100 bytes: no record captured", "pxcaravan.dscp": [11],
                        "pxcaravan.records": [0], "pxcaravan.checksum.status": [0],
                        "pxcaravan.unparsed": [cx["v6three"][:100 - 62].hex()]}}
    runs.append({"name": "caravan, capture cut at 100 bytes", "pcap": "caravan.pcap", "editcap": ["-s", "100"],
                 "tshark_args": ["-Y", "frame.number <= 3"], "frame_filter": True, "frames": cut})
    # Record payloads handed to the udp.port table (DNS on 53).
    dns = dict(cexp[cx["n_dns"]])
    dns.pop("allow_exception")
    dns["dns.qry.name"] = [q.rstrip(".") for q in cx["dns_names"]]
    dns["dns.id"] = [1, 2, 3]
    runs.append({"name": "caravan, payload by record ports", "pcap": "caravan.pcap",
                 "tshark_args": ["-o", "pxcaravan.payload:By record ports", "-o", "udp.try_heuristic_first:TRUE",
                                 "-Y", "pxcaravan.record.dstport == 53"],
                 "frame_filter": True, "frames": {cx["n_dns"]: dns},
                 "extra_fields": {"dns.qry.name": "str", "dns.id": "int"}})
    # The F-PMTUD port preference.
    runs.append({"name": "fpmtud, fpmtud.port:7777", "pcap": "fpmtud.pcap",
                 "tshark_args": ["-o", "fpmtud.port:7777", "-o", "fpmtud.heuristic:FALSE",
                                 "-Y", "udp.port == 7777"],
                 "frame_filter": True,
                 "frames": {n: e for n, e in fexp.items()
                            if "7777" in e["note"] or "another port" in e["note"]}})

    for r in runs:
        caravan_run = r["pcap"] in ("caravan.pcap", "random.pcap")
        extra = r.pop("extra_fields", {})
        r["fields"] = (CARAVAN_FIELDS if caravan_run else FPMTUD_FIELDS) + list(extra)
        if "fields_override" in r:
            r["fields"] = r.pop("fields_override")
        r["types"] = dict(CARAVAN_TYPES if caravan_run else FPMTUD_TYPES, **extra)
    # With fpmtud on port 7777 and no heuristic, payloads sent to 7777 without
    # the magic are requests the responder refuses: not_fpmt.
    last_run = runs[-1]["frames"]
    for n, e in list(last_run.items()):
        if e["note"].startswith("4 bytes on another port"):
            last_run[n] = {"note": e["note"] + " (port 7777 now: not_fpmt)", "fpmtud.kind": ["unknown"],
                           "fpmtud.malformed": ["not_fpmt"], "fpmtud.malformed.not_fpmt": 1}
        elif e["note"].startswith("no magic on another port"):
            last_run[n] = {"note": e["note"] + " (port 7777 now: not_fpmt)", "fpmtud.kind": ["unknown"],
                           "fpmtud.malformed": ["not_fpmt"], "fpmtud.malformed.not_fpmt": 1}
    with open(os.path.join(out, "expectations.json"), "w") as f:
        json.dump({"runs": runs}, f, indent=1)
    print(f"wrote {len(cframes)} caravan frames, {len(fframes)} F-PMTUD frames, {len(rframes)} random frames, "
          f"{len(runs)} runs to {out}")


if __name__ == "__main__":
    main()
