//! Root test of `px gateway --capture`: a short sha256-checked transfer
//! through a capturing gateway, the pcapng files read back with tshark and
//! capinfos (Debian's `tshark` package, installed by scripts/lib.sh; the
//! test skips with a message without them or without root).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use common::*;
use px_lab::require_root_or_skip;

/// The capture files, removed on drop.
struct CaptureFiles(PathBuf);

impl CaptureFiles {
    fn nth(&self, n: u32) -> PathBuf {
        if n == 0 { self.0.clone() } else { PathBuf::from(format!("{}.{n}", self.0.display())) }
    }
}

impl Drop for CaptureFiles {
    fn drop(&mut self) {
        for n in 0..8 {
            let _ = std::fs::remove_file(self.nth(n));
        }
    }
}

fn have(tool: &str) -> bool {
    std::process::Command::new(tool).arg("-v").output().is_ok()
}

/// Frame by frame (GRO off on the gateway's ports, `--no-gro-gso` so the
/// gateway leaves it off): the outer port receives at most 1514-byte
/// frames, the inner port sends merged 9014-byte ones. Files of
/// at most 1 MiB, three kept: 12 MB of traffic rotates them, each stays
/// under the bound and opens on its own (capinfos), and the newest shows
/// both ports in both directions with the right sizes (tshark reads the
/// interface names and the EPB direction flags).
#[test]
fn capture_writes_ports_and_directions_and_rotates_within_bounds() {
    if !require_root_or_skip("capture_writes_ports_and_directions_and_rotates_within_bounds") {
        return;
    }
    if !have("tshark") || !have("capinfos") {
        eprintln!("SKIP capture_writes_ports_and_directions_and_rotates_within_bounds: tshark/capinfos not installed");
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let off = px_lab::Offloads { gro: Some(false), ..Default::default() };
    for dev in [GW_OUTER, GW_INNER] {
        lab.ns(lab.gw).set_offloads(dev, off).unwrap();
    }
    let files = CaptureFiles(std::env::temp_dir().join(format!("px-capture-lab-{}.pcapng", std::process::id())));
    let max = 1 << 20;
    let path = files.0.to_str().unwrap().to_string();
    let gw = Gateway::start(
        &lab,
        &["--no-gro-gso", "--capture", &path, "--capture-max-bytes", &max.to_string(), "--capture-files", "3"],
    );
    lab.ping_both();
    let progress = AtomicU64::new(0);
    let bytes = 6 << 20;
    let t = BulkSpec {
        server: sock(BNET_V4, 5411),
        flows: 1,
        bytes_per_flow: bytes,
        pace: Pace::FULL,
        stall_timeout: Duration::from_secs(10),
        sha256: true,
    };
    let ends = transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), t, &progress);
    assert_exact(&ends, bytes);
    let exit = gw.stop();
    exit.assert_clean();
    assert!(exit.log.contains("px gateway: capturing to"), "{}", exit.log);
    assert!(exit.log.contains("px gateway: capture: "), "{}", exit.log);
    eprintln!("{}", exit.log.lines().find(|l| l.contains("capture: ")).unwrap_or_default());
    // Rotated and bounded: FILE, FILE.1, FILE.2, nothing older.
    for n in 0..3 {
        let p = files.nth(n);
        let len = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).len();
        assert!(len <= max, "{}: {len} bytes", p.display());
        let out = std::process::Command::new("capinfos").arg("-c").arg(&p).output().unwrap();
        assert!(out.status.success(), "capinfos {}: {out:?}", p.display());
    }
    assert!(!files.nth(3).exists(), "only three files kept");
    // All kept files (each opens on its own): (interface, direction) ->
    // (frames, largest frame). Not the newest file alone: where the last
    // rotation falls is arbitrary, so it may hold only the transfer's tail.
    let mut seen: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for n in 0..3 {
        let out = std::process::Command::new("tshark")
            .arg("-r")
            .arg(files.nth(n))
            .args(["-T", "fields", "-E", "separator=,"])
            .args(["-e", "frame.interface_name", "-e", "frame.packet_flags_direction", "-e", "frame.len"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = line.split(',').collect();
            let e = seen.entry((f[0].to_string(), f[1].to_string())).or_default();
            e.0 += 1;
            e.1 = e.1.max(f[2].parse().unwrap());
        }
    }
    eprintln!("{seen:?}");
    let get = |dev: &str, dir: &str| seen.get(&(dev.to_string(), dir.to_string())).copied().unwrap_or_default();
    let (inbound, outbound) = ("0x00000001", "0x00000002");
    // Data: legacy host -> outer port (in) -> inner port (out), merged.
    let (n, largest) = get(GW_OUTER, inbound);
    assert!(n > 100 && largest <= 1514, "outer in: {n} frames, largest {largest}");
    let (n, largest) = get(GW_INNER, outbound);
    assert!(n > 10 && largest == 9014, "inner out: {n} frames, largest {largest}");
    // ACKs the other way (few: the b-network host acks 9000-byte segments).
    assert!(get(GW_INNER, inbound).0 >= 1 && get(GW_OUTER, outbound).0 >= 1, "{seen:?}");
    assert_eq!(seen.len(), 4, "two ports, two directions: {seen:?}");
}
