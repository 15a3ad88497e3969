//! Root tests of running `px gateway` as a daemon: SIGHUP reload during a
//! sha256-checked transfer, and the pcapng capture read back with tshark.
//! Topology and helpers as in `gateway_lab.rs` (the `common` module); each
//! test skips with a message when not root.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use px_lab::require_root_or_skip;

/// A file in the temp dir, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("px-ops-{}-{name}", std::process::id())))
    }
    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const METRICS: &str = "127.0.0.1:9466";

/// Waits (up to 3 s) until the sample reads `want`.
fn wait_metric(lab: &GwLab, sample: &str, want: f64) {
    let t0 = Instant::now();
    loop {
        let text = metrics(lab, METRICS);
        let v = metric(&text, sample);
        if v == want {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "{sample} = {v}, expected {want}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGHUP mid-transfer, both directions, frame by frame (`--no-gro-gso`,
/// so the engine holds between packets), with 32 MiB socket buffers from
/// the file (`ss` shows them on both packet sockets): a live change (merge
/// timeout, PSH policy) is applied without losing or reordering a byte (SHA-256 at
/// both ends of every flow), the workers' engines run with the new
/// timeout (the metrics say so), and the log names what changed. Then a
/// change of `workers` is refused in the log, the gateway keeps running
/// and forwarding, and the counts of reloads say one applied, one refused.
#[test]
fn sighup_reload_mid_transfer_is_exact_and_refuses_fixed_keys() {
    if !require_root_or_skip("sighup_reload_mid_transfer_is_exact_and_refuses_fixed_keys") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let cfg = TempFile::new("reload.toml");
    let base = format!("metrics = \"{METRICS}\"\nsocket_buffer_bytes = 33554432\n");
    cfg.write(&format!("{base}[engine]\nmerge_timeout_us = 500\n"));
    let gw = Gateway::start(&lab, &["--config", cfg.path(), "--no-gro-gso"]);
    lab.ping_both();
    // The gateway's packet sockets have the configured buffers (`ss`'s rb
    // and tb: the kernel's own accounting): one per port, or, with the
    // kernel fast path's program attached (whenever this build has it),
    // four per port (IPv4, IPv6, other EtherTypes, and one that sends).
    // (DPDK's AF_PACKET driver has rings of its own instead.)
    if !dpdk_datapath() {
        let (_, sockets) = run_in(lab.ns(lab.gw), "ss", &["-0", "-a", "-m", "-n", "-p"]);
        let ours: Vec<&str> = sockets.lines().filter(|l| l.contains(&format!("pid={},", gw.pid))).collect();
        let per_port = if px_runtime::fast_path::FastPath::built() { 4 } else { 1 };
        assert_eq!(ours.len(), 2 * per_port, "{per_port} packet socket(s) per port:\n{sockets}");
        for l in ours {
            assert!(l.contains("rb33554432,") && l.contains("tb33554432,"), "socket_buffer_bytes not applied: {l}");
        }
    }
    wait_metric(&lab, "px_gateway_merge_timeout_seconds{worker=\"0\"}", 0.0005);
    let progress = AtomicU64::new(0);
    let bytes = 16 << 20;
    // ~16 MB/s per flow: the reloads happen while data flows.
    let pace = Pace { chunk: 16 << 10, gap: Duration::from_millis(1) };
    let inbound = BulkSpec {
        server: sock(BNET_V4, 5401),
        flows: 2,
        bytes_per_flow: bytes,
        pace,
        stall_timeout: Duration::from_secs(15),
        sha256: true,
    };
    let outbound = BulkSpec { server: sock(LEGACY_V4, 5402), ..inbound };
    let (ends_in, ends_out) = std::thread::scope(|s| {
        let i = s.spawn(|| transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), inbound, &progress));
        let o = s.spawn(|| transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), outbound, &progress));
        let t0 = Instant::now();
        while progress.load(Ordering::Relaxed) < 8 << 20 {
            assert!(t0.elapsed() < Duration::from_secs(10), "no progress through the gateway");
            std::thread::sleep(Duration::from_millis(5));
        }
        cfg.write(&format!("{base}[engine]\nmerge_timeout_us = 2000\npsh = \"hold\"\n"));
        gw.reload();
        let log = gw.wait_log("px gateway: reloaded the configuration:");
        assert!(log.contains("engine.merge_timeout_us 500 -> 2000"), "{log}");
        assert!(log.contains("engine.psh \"adaptive\" -> \"hold\""), "{log}");
        wait_metric(&lab, "px_gateway_merge_timeout_seconds{worker=\"0\"}", 0.002);
        let at = progress.load(Ordering::Relaxed);
        eprintln!("reloaded after {at} bytes");
        // Then a key that is set up at start.
        cfg.write(&format!("{base}workers = 2\n[engine]\nmerge_timeout_us = 2000\npsh = \"hold\"\n"));
        gw.reload();
        let log = gw.wait_log("px gateway: reload refused:");
        assert!(log.contains("`workers` cannot change while running (1 -> 2)"), "{log}");
        assert!(log.contains("the running configuration stays"), "{log}");
        (i.join().unwrap(), o.join().unwrap())
    });
    assert_exact(&ends_in, bytes);
    assert_exact(&ends_out, bytes);
    let text = metrics(&lab, METRICS);
    assert_eq!(metric(&text, "px_gateway_config_reloads_total{result=\"applied\"}"), 1.0, "{text}");
    assert_eq!(metric(&text, "px_gateway_config_reloads_total{result=\"refused\"}"), 1.0, "{text}");
    assert_eq!(metric(&text, "px_gateway_merge_timeout_seconds{worker=\"0\"}"), 0.002, "still the applied value");
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("{}", exit.stats);
    assert!(exit.counter("merged_out") > 0, "{}", exit.stats);
}

/// A second `px gateway` on the ports one already serves (which would
/// deliver every frame twice) is refused before it touches them, naming
/// a port and the first one's PID; the first goes on alone: pings come
/// back once, a transfer is exact, and it stops cleanly.
#[test]
fn a_second_gateway_on_the_same_ports_is_refused() {
    let Some((_serial, lab, gw)) = lab_with_gateway("a_second_gateway_on_the_same_ports_is_refused") else {
        return;
    };
    let err = match Gateway::start_wrapped(&lab, &[], &[]) {
        Ok(second) => {
            let (ok, out) = run_in(lab.ns(lab.legacy), "ping", &["-n", "-c", "3", "-i", "0.2", BNET_V4]);
            let pid = second.pid;
            let _ = second.stop();
            panic!("a second gateway (PID {pid}) started beside PID {}; ping (ok {ok}): {out}", gw.pid);
        }
        Err(e) => e,
    };
    assert!(err.contains(&format!("port {GW_OUTER}")) || err.contains(&format!("port {GW_INNER}")), "{err}");
    assert!(err.contains(&format!("PID {}", gw.pid)), "{err}");
    let (ok, out) = run_in(lab.ns(lab.legacy), "ping", &["-n", "-c", "3", "-i", "0.2", BNET_V4]);
    assert!(ok && !out.contains("DUP"), "{out}");
    exact_both_ways(&lab, LEGACY_V4, BNET_V4, 5361, 1, 4 << 20);
    let exit = gw.stop();
    assert!(exit.status.success(), "{}", exit.log);
}
