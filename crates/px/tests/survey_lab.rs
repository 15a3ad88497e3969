//! Root test of `px survey` through `px lab survey`: a lab "Internet" of
//! known behaviours (fragment filters at the last hop, in the path and of
//! non-first fragments, ICMP black holes, poor reassembly, a conntrack
//! router, random loss, dead, closed and prohibited servers; routers at
//! Linux's ICMP rate limits, then without); with `px survey`'s defaults the
//! classification must be exact for every target, no probe may leave after
//! its test decided, and a first run interrupted with SIGINT must leave
//! whole lines that a second run resumes.
//!
//! 64 targets on 16 addresses (every behaviour, 4 targets behind each
//! address's queue and hop test): about a minute for both passes. The
//! large runs (2000 targets) are `px lab survey`'s, in docs/survey.md.

use std::process::Command;

use px_lab::require_root_or_skip;

#[test]
fn lab_survey_classifies_every_target_exactly_and_resumes_after_ctrl_c() {
    if !require_root_or_skip("lab_survey_classifies_every_target_exactly_and_resumes_after_ctrl_c") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_px"))
        .args([
            "lab",
            "survey",
            "--json",
            "--targets",
            "64",
            "--addresses",
            "16",
            "--seed",
            "3",
            "--interrupt-after",
            "1500ms",
        ])
        .output()
        .expect("px runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("one JSON object ({e}); status {}; stderr: {stderr}", out.status));
    eprintln!("px lab survey: {v}");
    assert_eq!((v["targets"].as_u64(), v["addresses"].as_u64()), (Some(64), Some(16)));
    assert_eq!(v["exact_classification"].as_bool(), Some(true), "mismatches: {}", v["mismatches"]);
    assert!(out.status.success(), "{stderr}");
    // Every behaviour of the lab was present and seen.
    for k in ["filtered_last_hop", "filtered_in_path", "fragments_lost", "unresponsive", "fragments_ok"] {
        assert!(v["summary"]["classes"][k].as_u64().unwrap_or(0) > 0, "no {k}: {v}");
    }
    assert!(v["summary"]["pmtud_fails"].as_u64().unwrap_or(0) > 0, "{v}");
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k}"));
    assert!(0.5 < f("frag_ok_fraction") && f("frag_ok_fraction") < 1.0);
    assert!(0.5 < f("icmp_pmtud_ok_fraction") && f("icmp_pmtud_ok_fraction") < 1.0);
    assert!(v["last_hop_filters"].as_u64().unwrap_or(0) > 0 && f("targets_per_second") > 0.0);
    assert!(f("targets_per_second_unlimited_routers") > 0.0, "{v}");
    assert_eq!(v["late_probes"].as_u64(), Some(0), "{v}");
    assert!(v["probes_per_target"]["mean"].as_f64().unwrap_or(0.0) > 1.0, "{v}");
    assert!(v["probes_per_target"]["max"].as_u64().unwrap_or(0) < 200, "{v}");
    let i = &v["interrupted_run"];
    assert_eq!(i["exit_code"].as_i64(), Some(130), "interrupted: {i}");
    assert_eq!(i["whole_lines"].as_bool(), Some(true), "{i}");
    let first = i["records"].as_u64().unwrap_or(0);
    assert!(0 < first && first < 64, "the first run wrote {first} of 64 before SIGINT");
}
