//! `px lab quic` briefly (root and namespaces; skips otherwise): one run,
//! 5 connections × 4 MB, a 200 KB short fetch. Checks the JSON's structure,
//! that larger packets are not slower than 1252 by more than noise, that
//! both PMTUD starts reach full size, and that no namespace is left.

use px_quic::{QuicOptions, run};
use serde_json::Value;

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or_else(|| panic!("`{key}` missing or not a number in {v}"))
}

#[test]
fn lab_quic_briefly() {
    if !px_netns::require_root_or_skip("lab_quic_briefly") {
        return;
    }
    let o = QuicOptions { bytes: 4_000_000, runs: 1, short_bytes: 200_000, ..QuicOptions::new() };
    let res = run(&o, &|line| eprintln!("{line}")).expect("px lab quic");
    eprintln!("{}", res.table());
    let json = res.json();

    let payloads = json["payloads"].as_array().expect("payloads array");
    let sizes: Vec<f64> = payloads.iter().map(|p| num(p, "payload")).collect();
    assert_eq!(sizes, [1252.0, 1472.0, 4096.0, 8952.0]);
    let base = num(&payloads[0], "seconds");
    assert!(base > 0.0);
    assert_eq!(num(&payloads[0], "faster_than_1252_pct"), 0.0);
    for p in payloads {
        let (s, lo, hi) = (num(p, "seconds"), num(p, "seconds_min"), num(p, "seconds_max"));
        assert!(lo > 0.0 && lo <= s && s <= hi, "{p}");
        let pct = num(p, "faster_than_1252_pct");
        assert!((pct - (base - s) / base * 100.0).abs() < 1e-6, "{p}");
        // One short run on a shared machine: allow half again plus 200 ms.
        assert!(s <= base * 1.5 + 0.2, "payload {} took {s} s against {base} s at 1252", num(p, "payload"));
        // Every datagram the server sent arrived (a clean path, no GSO batch lost).
        assert_eq!(p["lost_packets"], 0, "{p}");
    }

    let starts = json["pmtud_start"].as_array().expect("pmtud_start");
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[0]["start"], "quinn");
    assert_eq!(num(&starts[0], "initial_payload"), 1200.0);
    assert_eq!(starts[1]["start"], "fpmtud");
    // One F-PMTUD probe over a 9000-byte path: 9000 - 28.
    assert_eq!(num(&starts[1], "initial_payload"), 8972.0);
    assert!(num(&starts[1], "probe_ms") > 0.0);
    for s in starts {
        assert!(num(s, "to_full_ms") > 0.0, "{s}");
        assert!(num(s, "final_payload") > 8952.0, "{s}");
    }

    let ours = format!("-{}-", std::process::id());
    let left: Vec<String> = px_netns::list_px_namespaces().unwrap().into_iter().filter(|n| n.contains(&ours)).collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}
