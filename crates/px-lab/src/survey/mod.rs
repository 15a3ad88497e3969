//! The lab "Internet" of `px lab survey`: a client, four routers and four
//! server namespaces answering for hundreds of addresses, each address
//! with a known behaviour; `px survey` runs in the client namespace with
//! its default settings against thousands of targets (address × port), and
//! its classification is compared, target by target, with the ground
//! truth.
//!
//! Behaviours, by destination address ([`Truth`]; nftables sets in the
//! routers, see `internet.rs` for the topology):
//! - `ok`: plain path.
//! - `lossy`: r1 drops a share of packets each way at random (`numgen random`).
//! - `icmp_blackhole`: r2 drops ICMP destination-unreachable toward it (PMTUD fails).
//! - `frag_filter_last_hop`: r3 drops fragments toward it before routing.
//! - `frag_filter_in_path`: r2 does.
//! - `frag_filter_non_first`: r3 drops fragments with a non-zero offset
//!   (iptables `-f`): invisible to a first-fragment probe.
//! - `poor_reassembly`: served by `poor`, whose fragment memory
//!   (`ipfrag_high_thresh`) holds less than one fragment.
//! - `nat_poor_reassembly`, `nat_ok`: behind a fourth router with
//!   connection tracking (it holds a lone first fragment); the first
//!   server's reassembly never completes, the second's does.
//! - `dead`: r3 drops everything toward it.
//! - `closed`: no server listens on its ports (RST).
//! - `prohibited`: r3 answers each SYN with ICMP "administratively prohibited".
//!
//! Many targets share an address (6 ports each), the routers rate-limit
//! their ICMP at Linux's defaults, and the lossy paths lose packets: the
//! conditions of issue 39. `targets_per_second` is measured with those
//! rate limits and, in a second pass, without them.

mod internet;
mod servers;
mod truth;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use px_survey::record::{Record, Resume};
use px_survey::report::{ProbeCounts, Summary};
use serde::Serialize;

use crate::RunError;
use px_netns::TempFile;

pub use servers::{BODY, body_for};
pub use truth::{Mismatch, PORTS, Truth, addresses, assign, compare, targets};

/// Which router ICMP rate limits a run measures with
/// (`--router-rate-limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RouterLimits {
    /// Linux's defaults: one ICMP "time exceeded" a second after a burst of six.
    Linux,
    /// None: the routers answer every expiry.
    Off,
    /// Linux's defaults, then a second pass without (both checked; both
    /// throughputs reported).
    Both,
}

/// The lab's options (`px lab survey`'s flags).
#[derive(Clone, Debug, clap::Args)]
pub struct SurveyLabOptions {
    /// The `px` binary (runs `px survey` in the client namespace).
    #[arg(skip)]
    pub exe: PathBuf,
    /// Targets (address × port; the lab has 380 addresses and 6 ports).
    #[arg(long, default_value_t = 2000, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u64).range(8..=2280), |v| v as usize))]
    pub targets: usize,
    /// Spread the targets over this many addresses (default: one per
    /// target, up to 380; then several ports of each). Fewer addresses put
    /// more targets behind each address's queue and hop test.
    #[arg(long, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u64).range(1..=380), |v| v as usize))]
    pub addresses: Option<usize>,
    /// Seed of which address gets which behaviour.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Percent of packets dropped each way toward the `lossy` addresses.
    #[arg(long = "loss", value_name = "LOSS", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=20))]
    pub loss_percent: u32,
    /// Keep the survey's JSON lines in this file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Interrupt a first run with SIGINT after this long (e.g. 2s), then
    /// resume it: checks that Ctrl-C leaves a valid, resumable output.
    #[arg(long, value_parser = px_units::duration)]
    pub interrupt_after: Option<Duration>,
    /// The routers' ICMP rate limits.
    #[arg(long = "router-rate-limits", value_name = "ROUTER_RATE_LIMITS", value_enum, default_value = "both")]
    pub router_limits: RouterLimits,
    /// Run `px survey` with the fast settings of earlier rounds (short
    /// timers, high rates) instead of its defaults.
    #[arg(long)]
    pub fast: bool,
}

/// The interrupted first run of [`SurveyLabOptions::interrupt_after`].
#[derive(Clone, Debug, Serialize)]
pub struct InterruptedRun {
    /// `px survey`'s exit status (130: interrupted).
    pub exit_code: Option<i32>,
    /// Records in the output after it.
    pub records: usize,
    /// The output ended with a whole line.
    pub whole_lines: bool,
}

/// The result of `px lab survey`.
#[derive(Clone, Debug, Serialize)]
pub struct SurveyLabResult {
    pub targets: usize,
    pub addresses: usize,
    pub truth: BTreeMap<String, usize>,
    /// Every target right, in every pass.
    pub exact_classification: bool,
    pub mismatches: Vec<Mismatch>,
    pub frag_ok_fraction: f64,
    pub icmp_pmtud_ok_fraction: f64,
    pub last_hop_filters: usize,
    /// Packets `px survey` sent per target (mean, most).
    pub probes_per_target: ProbeCounts,
    /// Packets sent after the test they belonged to had decided.
    pub late_probes: u64,
    /// Targets per second of the first pass (routers at Linux's ICMP rate
    /// limits, unless `router_limits` is `off`).
    pub targets_per_second: f64,
    /// Targets per second without router rate limits (the second pass of
    /// `both`, or the only one of `off`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets_per_second_unlimited_routers: Option<f64>,
    /// The router ICMP rate limits of the first pass.
    pub router_rate_limits: &'static str,
    /// `px survey`'s settings: its defaults, or the fast ones.
    pub survey_settings: &'static str,
    /// Seconds of the first pass.
    pub seconds: f64,
    pub loss_percent: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_run: Option<InterruptedRun>,
    pub summary: Summary,
    #[serde(skip)]
    pub table: String,
}

impl SurveyLabResult {
    /// The run as `px lab survey` prints it: what was run, the probes per
    /// target, the ground truth and how the classification compared with
    /// it (the first mismatches), then the paper's table beside the run's.
    pub fn report(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "px lab survey — {} targets on {} addresses, {:.1} s ({:.1} targets/s), {} % loss on the lossy paths\n",
            self.targets, self.addresses, self.seconds, self.targets_per_second, self.loss_percent
        );
        let _ = writeln!(
            s,
            "  px survey: {}; routers' ICMP rate limits: {}",
            self.survey_settings, self.router_rate_limits
        );
        if let Some(u) = self.targets_per_second_unlimited_routers {
            let _ = writeln!(s, "  without router rate limits: {u:.1} targets/s");
        }
        let _ = writeln!(
            s,
            "  packets per target: {:.1} on average, {} at most; {} sent after their test decided",
            self.probes_per_target.mean, self.probes_per_target.max, self.late_probes
        );
        let truth: Vec<String> = self.truth.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "  ground truth: {}", truth.join(", "));
        let classification = if self.exact_classification {
            "exact for every target".to_string()
        } else {
            format!("{} mismatches", self.mismatches.len())
        };
        let _ = writeln!(s, "  classification: {classification}\n");
        if let Some(i) = &self.interrupted_run {
            let _ = writeln!(
                s,
                "  interrupted first run: exit {:?}, {} records, {}; the second run resumed from them\n",
                i.exit_code,
                i.records,
                if i.whole_lines { "whole lines only" } else { "a CUT LINE" }
            );
        }
        for m in self.mismatches.iter().take(10) {
            let _ = writeln!(s, "    {} ({:?}): {}", m.target, m.truth, m.got);
        }
        s.push_str(&self.table);
        s.push_str(
            "\n  A lab, not the Internet: the shares above are the mix the lab was built with; what the run\n  \
             shows is that the survey recovers each target's behaviour exactly. The paper's figures are from\n  \
             389,428 real web servers (§5.3); ICMP PMTUD's 51 % is Custura et al.'s 2018 figure.\n",
        );
        s
    }
}

/// The flags of the fast settings ([`SurveyLabOptions::fast`]).
const FAST: [&str; 16] = [
    "--concurrency",
    "128",
    "--rate",
    "20000",
    "--per-destination-rate",
    "1000",
    "--timeout",
    "3s",
    "--rto",
    "250ms",
    "--retries",
    "2",
    "--max-hops",
    "6",
    "--hop-wait",
    "300ms",
];

/// One pass: the lab built, `px survey` run in it, its records.
struct Pass {
    records: Vec<Record>,
    seconds: f64,
    interrupted: Option<InterruptedRun>,
}

/// The addresses with their behaviours and the targets of a run of
/// `targets` targets on `addresses` addresses (default: as many as
/// targets, up to the lab's).
fn plan(targets_n: usize, addresses_n: Option<usize>, seed: u64) -> Result<AssignedTargets, String> {
    let all = addresses();
    let n = addresses_n.unwrap_or(targets_n).min(all.len());
    if n == 0 {
        return Err("at least one address".into());
    }
    let assigned = assign(&all[..n], seed);
    let list = targets(&assigned, targets_n);
    if list.len() < targets_n {
        return Err(format!("at most {} targets on {n} addresses ({n} × {} ports)", n * PORTS.len(), PORTS.len()));
    }
    Ok((assigned, list))
}

/// What [`plan`] gives.
type AssignedTargets = (Vec<(std::net::Ipv4Addr, Truth)>, Vec<(std::net::Ipv4Addr, u16, Truth)>);

/// Builds the lab, runs `px survey` in its client namespace, compares.
pub fn run(o: &SurveyLabOptions, say: &dyn Fn(&str)) -> Result<SurveyLabResult, RunError> {
    crate::exp::check_prerequisites("px lab survey", &["nft", "ip"])?;
    let (assigned, list) = plan(o.targets, o.addresses, o.seed).map_err(RunError::Step)?;
    let text: String = list.iter().map(|(a, p, _)| format!("{a} {p}\n")).collect();
    let targets_file = TempFile::write("px-lab-survey-targets", "txt", &text)?;
    let truth: HashMap<String, Truth> = list.iter().map(|(a, p, t)| (format!("{a}:{p}"), *t)).collect();
    let first_limited = o.router_limits != RouterLimits::Off;
    say(&format!(
        "px lab survey: {} targets on {} addresses; routers {}; building the lab…",
        list.len(),
        assigned.len(),
        if first_limited { "at Linux's ICMP rate limits" } else { "without ICMP rate limits" }
    ));
    let first = pass(o, &assigned, &targets_file, first_limited, o.interrupt_after, say)?;
    let mut mismatches = compare(&first.records, &truth);
    let mut unlimited = (!first_limited).then_some(first.records.len() as f64 / first.seconds);
    if o.router_limits == RouterLimits::Both {
        say("px lab survey: again, the routers without ICMP rate limits…");
        let second = pass(&SurveyLabOptions { output: None, ..o.clone() }, &assigned, &targets_file, false, None, say)?;
        for mut m in compare(&second.records, &truth) {
            m.got = format!("(routers without rate limits) {}", m.got);
            mismatches.push(m);
        }
        unlimited = Some(second.records.len() as f64 / second.seconds);
    }
    let summary = Summary::of(&first.records);
    let mut by_truth = BTreeMap::new();
    for (_, _, t) in &list {
        *by_truth
            .entry(serde_json::to_value(t).map_or_else(|_| String::new(), |v| v.as_str().unwrap_or("").to_string()))
            .or_default() += 1;
    }
    Ok(SurveyLabResult {
        targets: list.len(),
        addresses: assigned.len(),
        truth: by_truth,
        exact_classification: mismatches.is_empty(),
        mismatches,
        frag_ok_fraction: summary.frag_ok_fraction(),
        icmp_pmtud_ok_fraction: summary.icmp_pmtud_ok_fraction(),
        last_hop_filters: summary.filtered_last_hop,
        probes_per_target: summary.probes_per_target,
        late_probes: summary.late_probes,
        targets_per_second: first.records.len() as f64 / first.seconds,
        targets_per_second_unlimited_routers: unlimited,
        router_rate_limits: if first_limited { "linux defaults (icmp_ratelimit 1000 ms, burst 6)" } else { "none" },
        survey_settings: if o.fast { "fast" } else { "px survey defaults" },
        seconds: first.seconds,
        loss_percent: o.loss_percent,
        interrupted_run: first.interrupted,
        table: summary.table(),
        summary,
    })
}

/// Builds the lab (routers `limited` or not), runs `px survey` (first
/// interrupted after `interrupt_after`, if given, then resumed), reads
/// its records and removes the lab.
fn pass(
    o: &SurveyLabOptions,
    assigned: &[(std::net::Ipv4Addr, Truth)],
    targets_file: &TempFile,
    limited: bool,
    interrupt_after: Option<Duration>,
    say: &dyn Fn(&str),
) -> Result<Pass, RunError> {
    let lab = internet::build(assigned, o.loss_percent, limited)?;
    let tmp_out;
    let out_path = match &o.output {
        Some(p) => {
            let _ = std::fs::remove_file(p);
            p.clone()
        }
        None => {
            tmp_out = TempFile::write("px-lab-survey-out", "jsonl", "")?;
            tmp_out.0.clone()
        }
    };
    let exe = o.exe.to_string_lossy().to_string();
    let survey = || {
        let mut c = lab.client.command(&exe);
        c.args(["survey", &targets_file.0.to_string_lossy(), "-o", &out_path.to_string_lossy()]);
        if o.fast {
            c.args(FAST);
        }
        c.args(["--quiet", "--json"]);
        c
    };
    let t0 = Instant::now();
    let mut interrupted = None;
    if let Some(after) = interrupt_after {
        say(&format!("px lab survey: a first run, interrupted after {after:?}…"));
        let mut c = survey();
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let child = px_netns::LabChild::spawn(&mut c)?;
        std::thread::sleep(after);
        // `ip netns exec` execs px: the child's pid is px's.
        let pid = child.id().ok_or("the survey process is gone")? as i32;
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let status = child.wait_with_output()?.status;
        let text = std::fs::read_to_string(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
        let records = Resume::read(&text).map_err(|e| format!("after the interrupt: {e}"))?.records.len();
        interrupted = Some(InterruptedRun {
            exit_code: status.code(),
            records,
            whole_lines: text.is_empty() || text.ends_with('\n'),
        });
    }
    say("px lab survey: running px survey in the client namespace…");
    let out = survey().output().map_err(|e| format!("{exe} survey: {e}"))?;
    let seconds = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!("px survey failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)).into());
    }
    let text = std::fs::read_to_string(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let records = Resume::read(&text).map_err(|e| format!("{}: {e}", out_path.display()))?.records;
    drop(lab);
    Ok(Pass { records, seconds, interrupted })
}

#[cfg(test)]
mod tests {
    use super::*;
    use px_survey::record::{Class, Pmtud};

    #[test]
    fn every_behaviour_gets_addresses_and_targets_are_unique() {
        let a = assign(&addresses(), 7);
        assert_eq!(a.len(), 380);
        for (t, pct) in Truth::MIX {
            let n = a.iter().filter(|(_, x)| *x == t).count();
            assert_eq!(n, (380 * pct as usize).div_ceil(100), "{t:?}");
        }
        assert_ne!(assign(&addresses(), 7), assign(&addresses(), 8), "the seed matters");
        let ts = targets(&a, 2280);
        assert_eq!(ts.len(), 2280);
        let keys: std::collections::HashSet<_> = ts.iter().map(|(a, p, _)| (*a, *p)).collect();
        assert_eq!(keys.len(), 2280);
        assert_eq!(targets(&a, 5000).len(), 2280, "no more than address × port");
        let small = assign(&addresses()[..20], 1);
        assert!(Truth::MIX.iter().all(|(t, _)| small.iter().any(|(_, x)| x == t)), "each behaviour at least once");
    }

    #[test]
    fn targets_spread_over_the_addresses_asked_for() {
        let (a, ts) = plan(64, Some(16), 3).unwrap();
        assert_eq!((a.len(), ts.len()), (16, 64));
        for (addr, _) in &a {
            assert_eq!(ts.iter().filter(|(x, _, _)| x == addr).count(), 4, "4 targets on {addr}");
        }
        assert!(Truth::MIX.iter().all(|(t, _)| a.iter().any(|(_, x)| x == t)), "each behaviour at least once");
        let (a, ts) = plan(240, None, 3).unwrap();
        assert_eq!((a.len(), ts.len()), (240, 240), "one address per target by default");
        assert_eq!(plan(2000, None, 1).unwrap().0.len(), 380);
        let e = plan(100, Some(16), 3).unwrap_err();
        assert!(e.contains("at most 96 targets on 16 addresses"), "{e}");
        assert!(plan(8, Some(0), 3).is_err());
    }

    #[test]
    fn the_comparison_catches_a_wrong_class_and_a_missing_pmtud_test() {
        use px_survey::record::{FetchResult, Fingerprint};
        let fp = Some(Fingerprint { status: 200, length: 1, hash: "0".into() });
        let ok = FetchResult { fingerprint: fp, failure: None, attempts: 1, ms: 0.0 };
        let rec = |target: &str, class, pmtud| Record {
            target: target.into(),
            addr: target.split(':').next().unwrap().parse().unwrap(),
            port: 80,
            host: None,
            class,
            plain: ok.clone(),
            fragmented: Some(ok.clone()),
            fragments: 2,
            identical: Some(true),
            fragment_path: None,
            icmp_pmtud: pmtud,
            pmtud_note: None,
            ms: 0.0,
            probes: 10,
            late_probes: 0,
        };
        let truth: HashMap<String, Truth> =
            [("203.0.113.1:80".to_string(), Truth::Ok), ("203.0.113.1:8080".to_string(), Truth::Ok)].into();
        let good = [
            rec("203.0.113.1:80", Class::FragmentsOk, Pmtud::Works),
            rec("203.0.113.1:8080", Class::FragmentsOk, Pmtud::SameAddress),
        ];
        assert!(compare(&good, &truth).is_empty());
        let wrong = [
            rec("203.0.113.1:80", Class::FragmentsOk, Pmtud::Works),
            rec("203.0.113.1:8080", Class::FilteredInPath, Pmtud::SameAddress),
        ];
        assert_eq!(compare(&wrong, &truth).len(), 1);
        let untested = [
            rec("203.0.113.1:80", Class::FragmentsOk, Pmtud::SameAddress),
            rec("203.0.113.1:8080", Class::FragmentsOk, Pmtud::SameAddress),
        ];
        assert_eq!(compare(&untested, &truth).len(), 2, "no PMTUD test for the address");
        assert_eq!(compare(&good[..1], &truth).len(), 1, "a missing record");
    }

    #[test]
    fn the_comparison_wants_no_unobserved_position_no_late_probe_and_no_retried_refusal() {
        use px_survey::record::{FetchResult, FragmentPath};
        let none = FetchResult { fingerprint: None, failure: Some("timeout".into()), attempts: 1, ms: 0.0 };
        let base = Record {
            target: "203.0.113.2:80".into(),
            addr: "203.0.113.2".parse().unwrap(),
            port: 80,
            host: None,
            class: Class::FragmentsLost,
            plain: FetchResult {
                fingerprint: Some(px_survey::Fingerprint { status: 200, length: 1, hash: "0".into() }),
                ..none.clone()
            },
            fragmented: Some(none.clone()),
            fragments: 2,
            identical: Some(false),
            fragment_path: Some(FragmentPath::decide(3, Some(3), vec![])),
            icmp_pmtud: Pmtud::Works,
            pmtud_note: None,
            ms: 0.0,
            probes: 30,
            late_probes: 0,
        };
        let truth: HashMap<String, Truth> = [("203.0.113.2:80".to_string(), Truth::FragFilterNonFirst)].into();
        assert!(compare(std::slice::from_ref(&base), &truth).is_empty());
        let claimed = Record { fragment_path: Some(FragmentPath::decide(3, Some(2), vec![])), ..base.clone() };
        assert!(!compare(&[claimed], &truth).is_empty(), "a position that was not observed");
        let late = Record { late_probes: 1, ..base.clone() };
        assert!(!compare(&[late], &truth).is_empty(), "a late probe");
        let truth: HashMap<String, Truth> = [("203.0.113.2:80".to_string(), Truth::Prohibited)].into();
        let refused = Record {
            class: Class::Unresponsive,
            plain: FetchResult { attempts: 3, ..none },
            fragmented: None,
            fragment_path: None,
            icmp_pmtud: Pmtud::NotTested,
            ..base
        };
        assert_eq!(compare(std::slice::from_ref(&refused), &truth).len(), 1, "a refusal retried");
        let once = Record { plain: FetchResult { attempts: 1, ..refused.plain.clone() }, ..refused };
        assert!(compare(&[once], &truth).is_empty());
    }

    #[test]
    fn bodies_name_their_target() {
        let b = body_for("203.0.113.5:8080".parse().unwrap());
        assert_eq!(b.len(), BODY);
        assert!(b.starts_with(b"px lab survey: this is 203.0.113.5:8080\n"));
    }
}
