//! Root lab test of `px gateway` against spoofed ICMP (issue 10, item 8):
//! during a sha256-checked outbound transfer (b-network host → legacy
//! host, split to the eMTU by the gateway), an attacker on the legacy side
//! sends ICMP "fragmentation needed" (MTU 576) crafted with scapy from the
//! legacy host's namespace on a raw packet socket, with spoofed router
//! sources: for the live flow's 4-tuple with sequence numbers far outside
//! its window and one at the sequence number just seen, and for random
//! 4-tuples and destinations, and two at the sniffed sequence number whose
//! quoted header has a fragment offset or version 5 (which Linux's
//! `tcp_v4_err` believes all the same). None of it may be believed (RFC 5927):
//! afterwards the live flow's segments on the outer link are still
//! full-sized (an independent observer on the legacy host's link sees
//! 1500-byte frames), the transfer is exact, and the gateway learned no
//! path MTU. None of it reaches the b-network host either (`tcpdump` on
//! its link): errors about TCP are the gateway's own, and a host believes
//! one error inside its window where the gateway waits for a second. Two
//! gateway workers, so errors also reach a worker that does not carry the
//! flow. Skips with a message when not root.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use px_lab::{FrameObserver, require_root_or_skip};

/// Sniffs one data segment of the live flow (b-network host → legacy host,
/// to `dport`) on `iface`, then sends 300 spoofed "fragmentation needed"
/// for its 4-tuple with sequence numbers about 2^31 away from the live one,
/// one at the sniffed sequence number, and 300 for random 4-tuples (some
/// toward the legacy host itself).
const ATTACK: &str = r#"
import random, sys
from scapy.all import Ether, IP, TCP, ICMP, Raw, sendp, sniff, conf, get_if_hwaddr
conf.verb = 0
iface, legacy, bnet, bnet_mac, dport = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
live = sniff(iface=iface, count=1, timeout=10, lfilter=lambda p: IP in p and TCP in p and p[IP].src == bnet
             and p[TCP].dport == dport and len(p[TCP].payload) > 0)
if not live:
    print("no live segment seen")
    sys.exit(2)
sport, seq = live[0][TCP].sport, live[0][TCP].seq
me = get_if_hwaddr(iface)
def ptb(qdst, sp, dp, s):
    router = "198.51.100.%d" % random.randrange(100, 250)
    quoted = bytes(IP(src=bnet, dst=qdst, len=1500, flags="DF", id=random.randrange(65536))
                   / TCP(sport=sp, dport=dp, seq=s, flags="A"))[:28]
    return Ether(src=me, dst=bnet_mac) / IP(src=router, dst=bnet) / ICMP(type=3, code=4, nexthopmtu=576) / Raw(quoted)
def odd(kind, s):
    # What Linux's tcp_v4_err takes all the same (issue 27 item 1): a quoted
    # header with a fragment offset, or another version nibble.
    router = "198.51.100.%d" % random.randrange(100, 250)
    ip = IP(src=bnet, dst=legacy, len=1500, flags="DF", id=random.randrange(65536))
    if kind == 0:
        ip.frag = 185
    q = bytearray(bytes(ip / TCP(sport=sport, dport=dport, seq=s, flags="A"))[:28])
    if kind == 1:
        q[0] = 0x55
    return Ether(src=me, dst=bnet_mac) / IP(src=router, dst=bnet) / ICMP(type=3, code=4, nexthopmtu=552) / Raw(bytes(q))
frames = [ptb(legacy, sport, dport, seq), odd(0, seq), odd(1, seq)]
for i in range(300):
    wrong = (seq + (1 << 31) + random.randrange(-(1 << 29), 1 << 29)) & 0xffffffff
    frames.append(ptb(legacy, sport, dport, wrong))
    qdst = legacy if i % 3 == 0 else "198.51.100.%d" % random.randrange(3, 250)
    frames.append(ptb(qdst, random.randrange(1024, 65536), random.randrange(1, 65536), random.randrange(1 << 32)))
sendp(frames, iface=iface, inter=0.002)
print("live flow port %d seq %d: sent %d spoofed frag-needed" % (sport, seq, len(frames)))
"#;

/// ICMP "fragmentation needed" and ICMPv6 "packet too big" (pcap filter).
const TOO_BIG_FILTER: &str = "(icmp and icmp[icmptype] == 3 and icmp[icmpcode] == 4) or (icmp6 and ip6[40] == 2)";

#[test]
fn spoofed_frag_needed_does_not_shrink_a_live_flow() {
    if !require_root_or_skip("spoofed_frag_needed_does_not_shrink_a_live_flow") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &["--workers", "2"]);
    lab.ping_both();
    let bnet_mac = mac_of(lab.ns(lab.bnet), BNET_DEV);
    let progress = AtomicU64::new(0);
    let bytes: u64 = 64 << 20;
    let port = 5351u16;
    // ~8 MB/s: the transfer outlasts the attack by seconds.
    let out = BulkSpec {
        server: sock(LEGACY_V4, port),
        flows: 1,
        bytes_per_flow: bytes,
        pace: Pace { chunk: 16 << 10, gap: Duration::from_millis(2) },
        stall_timeout: Duration::from_secs(20),
        sha256: true,
    };
    // Every "too big" that reaches the b-network host, by tcpdump on its
    // link (--immediate-mode, -U: written at once, see border_tcp_lab).
    let dir = Scratch::new("icmp-border");
    let pcap = dir.0.join("bnet.pcap");
    let dump = lab
        .ns(lab.bnet)
        .spawn(
            "tcpdump",
            &["-i", BNET_DEV, "-n", "--immediate-mode", "-U", "-w", pcap.to_str().unwrap(), TOO_BIG_FILTER],
        )
        .expect("tcpdump");
    std::thread::sleep(Duration::from_millis(800));
    let (ends, attack, after, left) = std::thread::scope(|s| {
        let t = s.spawn(|| transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), out, &progress));
        let t0 = Instant::now();
        while progress.load(Ordering::Relaxed) < 2 << 20 {
            assert!(t0.elapsed() < Duration::from_secs(20), "no progress through the gateway");
            std::thread::sleep(Duration::from_millis(5));
        }
        let attack = run_in(
            lab.ns(lab.legacy),
            "/usr/bin/python3",
            &["-c", ATTACK, LEGACY_DEV, LEGACY_V4, BNET_V4, &bnet_mac, &port.to_string()],
        );
        // What the live flow looks like on the outer link after the attack.
        let left = bytes - progress.load(Ordering::Relaxed);
        let obs = FrameObserver::start(lab.ns(lab.legacy), LEGACY_DEV).unwrap();
        let ends = t.join().unwrap();
        (ends, attack, obs.stop(), left)
    });
    std::thread::sleep(Duration::from_millis(500));
    drop(dump);
    let (read, reached) = run_in(lab.ns(lab.bnet), "tcpdump", &["-r", pcap.to_str().unwrap(), "-n"]);
    assert!(read, "tcpdump could not read its capture: {reached}");
    eprintln!("attack: {}", attack.1.trim());
    assert!(attack.0, "scapy attack failed: {}", attack.1);
    assert_exact(&ends, bytes);
    eprintln!("after the attack ({left} bytes left): legacy host link {after:?}");
    assert!(left > 4 << 20, "the transfer went on after the attack: {left} bytes");
    assert_eq!(after.rx.max_l3, EMTU as usize, "full-sized segments after the attack: {after:?}");
    // ~1500-byte frames carry what was left (a few smaller ones at most).
    assert!(after.rx.up_to_1500 >= left / 1448 / 2, "{after:?}");
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("{}", exit.stats["counters"]);
    assert_eq!(exit.counter("pmtu_learned"), 0, "{}", exit.stats);
    let judged = exit.counter("pmtu_ignored") + exit.counter("pmtu_passed_on") + exit.counter("pmtu_unconfirmed");
    assert!(judged >= 603, "every spoofed error was seen and judged: {}", exit.stats);
    assert!(exit.counter("pmtu_taken") >= 603, "{}", exit.stats);
    let reached: Vec<&str> = reached.lines().filter(|l| l.contains("ICMP")).collect();
    assert!(
        reached.is_empty(),
        "{} \"too big\" errors reached the b-network host:\n{}",
        reached.len(),
        reached.join("\n")
    );
}
