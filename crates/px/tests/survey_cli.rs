//! `px survey` without the network: the report of a stored output, and the
//! errors a user meets before anything is sent (no root needed; nothing
//! here sends a packet: every case stops before the survey's sockets).

use std::process::Command;

fn px(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_px")).args(args).output().expect("px runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/survey-sample.jsonl");

#[test]
fn report_prints_the_papers_table_from_a_survey_output() {
    // One record of each class and PMTUD verdict from a lab run, and a cut
    // last line (a crash while writing), which the report skips.
    let (ok, out, err) = px(&["survey", "report", SAMPLE]);
    assert!(ok, "{err}");
    for row in ["responded unfragmented", "identical answer", "filtered at the last hop", "99.98 %", "51 %"] {
        assert!(out.contains(row), "no `{row}` in\n{out}");
    }
    let (ok, out, err) = px(&["survey", "report", SAMPLE, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["targets"].as_u64(), Some(10), "{v}");
    assert_eq!(v["filtered_last_hop"].as_u64(), Some(2), "{v}");
    assert_eq!(v["responded_unfragmented"].as_u64(), Some(9), "{v}");
    assert_eq!(v["pmtud_fails"].as_u64(), Some(1), "{v}");
    assert!(v["frag_ok_fraction"].as_f64().is_some() && v["icmp_pmtud_ok_fraction"].as_f64().is_some());
}

#[test]
fn a_bad_target_file_is_named_with_its_line() {
    let dir = std::env::temp_dir().join(format!("px-survey-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let targets = dir.join("targets.txt");
    std::fs::write(&targets, "203.0.113.7 80\nwww.example.org\n").unwrap();
    let out = dir.join("out.jsonl");
    let (ok, _, err) = px(&["survey", targets.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("targets.txt: line 2: `www.example.org` is not an IPv4 address"), "{err}");
    assert!(!out.exists(), "nothing was written");
    let (ok, _, err) = px(&["survey", targets.to_str().unwrap()]);
    assert!(!ok && err.contains("--output"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_says_what_is_sent() {
    let (ok, out, _) = px(&["survey", "--help"]);
    assert!(ok);
    for s in ["IP fragments", "RST", "nftables", "--allow-host-namespace", "resume", "--per-destination-rate"] {
        assert!(out.contains(s), "no `{s}` in --help:\n{out}");
    }
}
