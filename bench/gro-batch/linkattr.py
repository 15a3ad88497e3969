#!/usr/bin/env python3
"""Set/get IFLA_{GSO,GRO}_IPV4_MAX_SIZE (iproute2 6.1 here cannot).
usage: linkattr.py get IFNAME | linkattr.py set IFNAME ATTR=VALUE ...
ATTR numbers (uapi if_link.h, kernel >= 6.3): 41 gso_max_size, 58 gro_max_size,
63 gso_ipv4_max_size, 64 gro_ipv4_max_size. Runs in the caller's netns."""
import socket, struct, sys
NAMES = {41: "gso_max_size", 58: "gro_max_size", 59: "tso_max_size",
         63: "gso_ipv4_max_size", 64: "gro_ipv4_max_size"}
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLM_F_REQUEST, NLM_F_ACK = 1, 4
def msg(typ, flags, idx, attrs=b""):
    ifi = struct.pack("BxHiII", socket.AF_UNSPEC, 0, idx, 0, 0)
    body = ifi + attrs
    return struct.pack("IHHII", 16 + len(body), typ, flags, 1, 0) + body
def attr(t, v):
    return struct.pack("HHI", 8, t, v)
def main():
    op, dev = sys.argv[1], sys.argv[2]
    idx = socket.if_nametoindex(dev)
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    if op == "set":
        a = b"".join(attr(int(k), int(v)) for k, v in (x.split("=") for x in sys.argv[3:]))
        s.send(msg(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, idx, a))
        r = s.recv(65536)
        err = struct.unpack_from("i", r, 16)[0]
        if err:
            sys.exit(f"netlink error {err}")
        return
    s.send(msg(RTM_GETLINK, NLM_F_REQUEST, idx))
    r = s.recv(65536)
    off = 16 + 16
    out = []
    while off + 4 <= len(r):
        ln, t = struct.unpack_from("HH", r, off)
        if ln < 4: break
        t &= 0x3fff
        if t in NAMES and ln == 8:
            out.append(f"{NAMES[t]} {struct.unpack_from('I', r, off + 4)[0]}")
        off += (ln + 3) & ~3
    print(" ".join(out))
main()
