//! One JSON line per target, and what it means.
//!
//! The output file is the run's state: a line is written (and flushed) when
//! a target is finished, never before, so an interrupted run leaves only
//! whole lines (plus, after a crash, at most one cut line, which
//! [`Resume::read`] drops) and a second run with the same output skips
//! every target already there.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// What identifies an HTTP answer: status, length (the `Content-Length`,
/// or the body bytes up to the close), and a hash of the first body bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub status: u16,
    pub length: u64,
    /// FNV-1a 64 of the first [`HASHED_BYTES`] body bytes, hex.
    pub hash: String,
}

/// Body bytes the fingerprint hashes.
pub const HASHED_BYTES: usize = 1024;

impl Fingerprint {
    /// The fingerprint of an HTTP answer's bytes, or why there is none
    /// (not HTTP, or the headers never ended).
    pub fn of(answer: &[u8]) -> Result<Fingerprint, String> {
        let Some(end) = header_end(answer) else {
            return Err(format!("no complete HTTP header in {} bytes", answer.len()));
        };
        let head = String::from_utf8_lossy(&answer[..end]);
        let status = head
            .lines()
            .next()
            .filter(|l| l.starts_with("HTTP/"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| "not an HTTP status line".to_string())?;
        let body = &answer[end..];
        let length = content_length(&head).unwrap_or(body.len() as u64);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in &body[..body.len().min(HASHED_BYTES)] {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Ok(Fingerprint { status, length, hash: format!("{h:016x}") })
    }
}

/// Where the header of an HTTP answer ends (after the blank line).
pub fn header_end(answer: &[u8]) -> Option<usize> {
    answer.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// The `Content-Length` of a header block, if any.
pub fn content_length(head: &str) -> Option<u64> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
    })
}

/// One HTTP fetch: the answer's fingerprint, or why there was none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FetchResult {
    pub fingerprint: Option<Fingerprint>,
    /// Why no fingerprint (`timeout`, `refused`, `not HTTP ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Connections tried (1 + retries used).
    pub attempts: u32,
    /// Time to the answer (or to giving up) of the last attempt, ms.
    pub ms: f64,
}

impl FetchResult {
    pub fn answered(&self) -> bool {
        self.fingerprint.is_some()
    }
}

/// Where TTL-limited fragments stop, against TTL-limited whole packets.
/// Only what was observed: a router that answered the whole packet and
/// not the fragment train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The last router before the server answers whole packets but not
    /// fragments: it (or its network) filters them.
    LastHop,
    /// A router earlier on the path stops them.
    InPath,
    /// Written by versions before issue 39 when the first fragments
    /// reached every router; never decided now (see [`Stop::Unknown`]):
    /// kept so that their output files still read.
    Destination,
    /// Not observed: a router on the way never answered, or the first
    /// fragments reach every router (then the rest may be dropped by a
    /// filter of non-first fragments anywhere on the path, or at the
    /// server: no probe can tell which).
    Unknown,
}

/// The hop test's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FragmentPath {
    /// Routers on the path to the server (from the TTL of its answers).
    pub routers: u8,
    /// The farthest hop seen answering the fragment train (0: none).
    pub fragments_reach: u8,
    pub stop: Stop,
    /// The hop where fragments stop (`fragments_reach + 1`), if a router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_hop: Option<u8>,
    /// The addresses that answered whole packets, by hop (`*`: not asked,
    /// or no answer).
    pub hops: Vec<String>,
    /// Why the position is unknown, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The target whose hop test this is, when it was another target of
    /// the same address (one test per address: the path is the address's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tested_on: Option<String>,
}

impl FragmentPath {
    /// Decides from the path's length and the farthest hop seen answering
    /// the fragment train, `None` if a router on the way never answered
    /// (then its silence says nothing).
    pub fn decide(routers: u8, fragments_reach: Option<u8>, hops: Vec<String>) -> FragmentPath {
        let unknown = |reach: u8, why: String| (reach, Stop::Unknown, None, Some(why));
        let (fragments_reach, stop, stop_hop, note) = match fragments_reach {
            _ if routers == 0 => unknown(0, "no router between us and the server".into()),
            None => unknown(0, "a router on the path never answered".into()),
            Some(f) if f >= routers => unknown(
                f,
                "the fragments reach every router; where they are lost after that (a filter of non-first \
                 fragments, the server's reassembly) cannot be observed"
                    .into(),
            ),
            Some(f) if f + 1 == routers => (f, Stop::LastHop, Some(routers), None),
            Some(f) => (f, Stop::InPath, Some(f + 1), None),
        };
        FragmentPath { routers, fragments_reach, stop, stop_hop, hops, note, tested_on: None }
    }
}

/// The ICMP PMTUD test (scamper tbit's PMTUD test, simplified).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pmtud {
    /// After "fragmentation needed", the server resent the data in
    /// segments that fit.
    Works,
    /// It kept sending full-sized segments after every "fragmentation
    /// needed" (the message is filtered, or ignored).
    Fails,
    /// The test could not decide (answer too small to need a full-sized
    /// segment, no retransmission, connection failed).
    Inconclusive,
    /// Tested on another target with the same address (`pmtud_target`).
    SameAddress,
    /// Not tested (no answer to the unfragmented request).
    NotTested,
}

/// The target's one-word outcome (the report's rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// No answer to the unfragmented request.
    Unresponsive,
    /// The fragmented request got the same answer.
    FragmentsOk,
    /// The fragmented request got a different answer.
    FragmentsDiffer,
    /// No answer to fragments: the last router before the server stops them.
    FilteredLastHop,
    /// No answer to fragments: a router earlier on the path stops them.
    FilteredInPath,
    /// Written by versions before issue 39 ("lost at the server"); never
    /// decided now: see [`Class::FragmentsLost`].
    DroppedAtDestination,
    /// No answer to fragments, and where they stop was not observed (a
    /// router never answered, or the first fragments reach every router).
    FragmentsLost,
}

impl Class {
    pub const ALL: [Class; 7] = [
        Class::Unresponsive,
        Class::FragmentsOk,
        Class::FragmentsDiffer,
        Class::FilteredLastHop,
        Class::FilteredInPath,
        Class::DroppedAtDestination,
        Class::FragmentsLost,
    ];

    /// The name in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Class::Unresponsive => "unresponsive",
            Class::FragmentsOk => "fragments_ok",
            Class::FragmentsDiffer => "fragments_differ",
            Class::FilteredLastHop => "filtered_last_hop",
            Class::FilteredInPath => "filtered_in_path",
            Class::DroppedAtDestination => "dropped_at_destination",
            Class::FragmentsLost => "fragments_lost",
        }
    }
}

/// Classifies a target from its measurements.
pub fn classify(plain: &FetchResult, fragmented: Option<&FetchResult>, path: Option<&FragmentPath>) -> Class {
    let Some(p) = &plain.fingerprint else { return Class::Unresponsive };
    match fragmented.and_then(|f| f.fingerprint.as_ref()) {
        Some(f) if f == p => Class::FragmentsOk,
        Some(_) => Class::FragmentsDiffer,
        None => match path.map(|p| p.stop) {
            Some(Stop::LastHop) => Class::FilteredLastHop,
            Some(Stop::InPath) => Class::FilteredInPath,
            Some(Stop::Destination) => Class::DroppedAtDestination,
            Some(Stop::Unknown) | None => Class::FragmentsLost,
        },
    }
}

/// One output line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The target's key ([`crate::Target::key`]).
    pub target: String,
    pub addr: Ipv4Addr,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub class: Class,
    pub plain: FetchResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragmented: Option<FetchResult>,
    /// Fragments the request was cut into.
    pub fragments: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identical: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragment_path: Option<FragmentPath>,
    pub icmp_pmtud: Pmtud,
    /// Why the PMTUD test was inconclusive, or which target tested the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmtud_note: Option<String>,
    /// Wall time spent on the target, ms.
    pub ms: f64,
    /// Packets the survey sent for the target (every connection, the hop
    /// test, the PMTUD test).
    #[serde(default)]
    pub probes: u32,
    /// Of them, sent after the test they belong to had decided: 0.
    #[serde(default)]
    pub late_probes: u32,
}

/// Why an output file cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// A whole line that is not a record (not ours, or edited).
    #[error("line {line} is not a survey record ({reason})")]
    BadLine { line: usize, reason: String },
}

/// What a previous run already did.
#[derive(Debug, Default)]
pub struct Resume {
    /// Keys of finished targets.
    pub done: HashSet<String>,
    /// Addresses whose PMTUD test was done (by which target).
    pub pmtud_tested: HashMap<Ipv4Addr, String>,
    /// Addresses whose hop test was done: its result and the target that ran it.
    pub paths: HashMap<Ipv4Addr, (FragmentPath, String)>,
    /// Bytes of whole lines: the file is cut there before appending (a
    /// crash can leave a partial last line).
    pub valid_len: usize,
    /// The records.
    pub records: Vec<Record>,
}

impl Resume {
    /// Reads an output file's text. A last line without its newline is
    /// dropped (it was being written when the run stopped).
    pub fn read(text: &str) -> Result<Resume, ResumeError> {
        let mut r = Resume::default();
        let whole = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        r.valid_len = whole.len();
        for (i, line) in whole.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let rec: Record =
                serde_json::from_str(line).map_err(|e| ResumeError::BadLine { line: i + 1, reason: e.to_string() })?;
            r.done.insert(rec.target.clone());
            if matches!(rec.icmp_pmtud, Pmtud::Works | Pmtud::Fails | Pmtud::Inconclusive) {
                r.pmtud_tested.entry(rec.addr).or_insert_with(|| rec.target.clone());
            }
            if let Some(p) = rec.fragment_path.as_ref().filter(|p| p.tested_on.is_none() && p.stop != Stop::Destination)
            {
                r.paths.entry(rec.addr).or_insert_with(|| (p.clone(), rec.target.clone()));
            }
            r.records.push(rec);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(fp: Option<(u16, u64, &str)>) -> FetchResult {
        FetchResult {
            fingerprint: fp.map(|(status, length, hash)| Fingerprint { status, length, hash: hash.into() }),
            failure: None,
            attempts: 1,
            ms: 1.0,
        }
    }

    #[test]
    fn fingerprints_use_status_length_and_first_bytes() {
        let a = Fingerprint::of(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nDate: x\r\n\r\nhello").unwrap();
        let b = Fingerprint::of(b"HTTP/1.1 200 OK\r\ncontent-length:5\r\nDate: y\r\n\r\nhello").unwrap();
        assert_eq!(a, b, "headers other than the length do not count");
        assert_eq!((a.status, a.length), (200, 5));
        let c = Fingerprint::of(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhellO").unwrap();
        assert_ne!(a.hash, c.hash);
        let d = Fingerprint::of(b"HTTP/1.0 404 Not Found\r\n\r\nnope").unwrap();
        assert_eq!((d.status, d.length), (404, 4), "no Content-Length: the bytes up to the close");
        assert!(Fingerprint::of(b"HTTP/1.1 200 OK\r\nContent-Le").is_err());
        assert!(Fingerprint::of(b"SSH-2.0-x\r\n\r\n").is_err());
    }

    #[test]
    fn the_path_decides_where_fragments_stop() {
        assert_eq!(FragmentPath::decide(3, Some(2), vec![]).stop, Stop::LastHop);
        assert_eq!(FragmentPath::decide(3, Some(2), vec![]).stop_hop, Some(3));
        assert_eq!(FragmentPath::decide(3, Some(1), vec![]).stop, Stop::InPath);
        assert_eq!(FragmentPath::decide(3, Some(1), vec![]).stop_hop, Some(2));
        assert_eq!(FragmentPath::decide(3, Some(0), vec![]).stop_hop, Some(1));
        let every = FragmentPath::decide(3, Some(3), vec![]);
        assert_eq!((every.stop, every.stop_hop, every.fragments_reach), (Stop::Unknown, None, 3), "never a position");
        assert!(every.note.is_some());
        assert_eq!(FragmentPath::decide(3, None, vec![]).stop, Stop::Unknown);
        assert_eq!(FragmentPath::decide(0, Some(0), vec![]).stop, Stop::Unknown);
    }

    #[test]
    fn classification() {
        let ok = fetch(Some((200, 10, "ab")));
        let other = fetch(Some((200, 11, "ab")));
        let none = fetch(None);
        let p = |r, f| FragmentPath::decide(r, Some(f), vec![]);
        assert_eq!(classify(&none, None, None), Class::Unresponsive);
        assert_eq!(classify(&ok, Some(&ok), None), Class::FragmentsOk);
        assert_eq!(classify(&ok, Some(&other), None), Class::FragmentsDiffer);
        assert_eq!(classify(&ok, Some(&none), Some(&p(3, 2))), Class::FilteredLastHop);
        assert_eq!(classify(&ok, Some(&none), Some(&p(3, 1))), Class::FilteredInPath);
        assert_eq!(classify(&ok, Some(&none), Some(&p(3, 3))), Class::FragmentsLost);
        assert_eq!(classify(&ok, Some(&none), Some(&p(0, 0))), Class::FragmentsLost);
        assert_eq!(classify(&ok, Some(&none), None), Class::FragmentsLost);
    }

    #[test]
    fn resume_skips_whole_lines_and_drops_a_cut_one() {
        let rec = Record {
            target: "203.0.113.1:80".into(),
            addr: "203.0.113.1".parse().unwrap(),
            port: 80,
            host: None,
            class: Class::FragmentsOk,
            plain: fetch(Some((200, 1, "00"))),
            fragmented: Some(fetch(Some((200, 1, "00")))),
            fragments: 2,
            identical: Some(true),
            fragment_path: None,
            icmp_pmtud: Pmtud::Works,
            pmtud_note: None,
            ms: 3.0,
            probes: 12,
            late_probes: 0,
        };
        let line = serde_json::to_string(&rec).unwrap();
        let text = format!("{line}\n{}", &line[..line.len() / 2]);
        let r = Resume::read(&text).unwrap();
        assert_eq!(r.records, vec![rec.clone()]);
        assert_eq!(r.valid_len, line.len() + 1);
        assert!(r.done.contains("203.0.113.1:80"));
        assert_eq!(r.pmtud_tested.get(&rec.addr).map(String::as_str), Some("203.0.113.1:80"));
        let e = Resume::read("{\"x\":1}\n").unwrap_err().to_string();
        assert!(e.starts_with("line 1 is not a survey record"), "{e}");
        assert_eq!(Resume::read("").unwrap().valid_len, 0);
    }
}
