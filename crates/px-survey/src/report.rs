//! The paper's table (§5.3) from a run's records: responded unfragmented,
//! responded fragmented, identical, filtered at the last hop, ICMP PMTUD
//! works; with counts and percentages.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::record::{Class, Pmtud, Record};

/// The counts behind the table.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub targets: usize,
    pub responded_unfragmented: usize,
    pub responded_fragmented: usize,
    pub identical: usize,
    pub filtered_last_hop: usize,
    pub filtered_in_path: usize,
    /// No answer to fragments, where they stop not observed (and the
    /// "lost at the server" of files written before issue 39).
    pub fragments_lost: usize,
    /// Addresses whose PMTUD test decided (works or fails).
    pub pmtud_tested: usize,
    pub pmtud_works: usize,
    pub pmtud_fails: usize,
    pub pmtud_inconclusive: usize,
    /// Targets by class name.
    pub classes: BTreeMap<String, usize>,
    /// Packets sent per target: mean and most.
    pub probes_per_target: ProbeCounts,
    /// Packets sent after the test they belonged to had decided (all targets).
    pub late_probes: u64,
}

/// Packets sent per target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ProbeCounts {
    pub mean: f64,
    pub max: u32,
}

impl Summary {
    pub fn of(records: &[Record]) -> Summary {
        let mut s = Summary { targets: records.len(), ..Summary::default() };
        for r in records {
            *s.classes.entry(r.class.name().to_string()).or_default() += 1;
            if r.plain.answered() {
                s.responded_unfragmented += 1;
            }
            if r.fragmented.as_ref().is_some_and(|f| f.answered()) {
                s.responded_fragmented += 1;
            }
            match r.class {
                Class::FragmentsOk => s.identical += 1,
                Class::FilteredLastHop => s.filtered_last_hop += 1,
                Class::FilteredInPath => s.filtered_in_path += 1,
                Class::DroppedAtDestination | Class::FragmentsLost => s.fragments_lost += 1,
                Class::Unresponsive | Class::FragmentsDiffer => {}
            }
            match r.icmp_pmtud {
                Pmtud::Works => s.pmtud_works += 1,
                Pmtud::Fails => s.pmtud_fails += 1,
                Pmtud::Inconclusive => s.pmtud_inconclusive += 1,
                Pmtud::SameAddress | Pmtud::NotTested => {}
            }
        }
        s.pmtud_tested = s.pmtud_works + s.pmtud_fails;
        let probes: u64 = records.iter().map(|r| u64::from(r.probes)).sum();
        s.probes_per_target = ProbeCounts {
            mean: ratio(probes as usize, records.len()),
            max: records.iter().map(|r| r.probes).max().unwrap_or(0),
        };
        s.late_probes = records.iter().map(|r| u64::from(r.late_probes)).sum();
        s
    }

    /// Fraction of the servers answering unfragmented that gave the same
    /// answer to fragments (the paper's 99.98 %).
    pub fn frag_ok_fraction(&self) -> f64 {
        ratio(self.identical, self.responded_unfragmented)
    }

    /// Fraction of decided PMTUD tests that worked (the 51 % of 2018).
    pub fn icmp_pmtud_ok_fraction(&self) -> f64 {
        ratio(self.pmtud_works, self.pmtud_tested)
    }

    /// The table as text.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let row = |t: &mut String, name: &str, n: usize, of: usize, paper: &str| {
            let _ = writeln!(t, "  {name:<40} {n:>9} {:>8.2} %   {paper}", 100.0 * ratio(n, of));
        };
        let _ = writeln!(t, "  {:<40} {:>9} {:>10}   paper (389,428 web servers, §5.3)", "", "count", "share");
        row(&mut t, "targets", self.targets, self.targets, "");
        row(&mut t, "responded unfragmented", self.responded_unfragmented, self.targets, "389,428 (by selection)");
        let u = self.responded_unfragmented;
        row(&mut t, "  responded fragmented", self.responded_fragmented, u, "");
        row(&mut t, "  identical answer", self.identical, u, "99.98 %");
        row(&mut t, "  not identical / no answer", u - self.identical, u, "59 servers");
        row(&mut t, "    filtered at the last hop", self.filtered_last_hop, u, "15 servers");
        row(&mut t, "    filtered earlier on the path", self.filtered_in_path, u, "");
        row(&mut t, "    lost, where not observable", self.fragments_lost, u, "");
        let _ = writeln!(t, "  ICMP PMTUD (one test per address):");
        row(&mut t, "  works", self.pmtud_works, self.pmtud_tested, "51 % (Custura et al., 2018)");
        row(&mut t, "  fails", self.pmtud_fails, self.pmtud_tested, "");
        let _ = writeln!(t, "  {:<40} {:>9}", "  inconclusive (not in the share)", self.pmtud_inconclusive);
        let _ = writeln!(
            t,
            "  packets per target: {:.1} on average, {} at most; {} sent after their test decided",
            self.probes_per_target.mean, self.probes_per_target.max, self.late_probes
        );
        t
    }
}

fn ratio(n: usize, of: usize) -> f64 {
    if of == 0 { 0.0 } else { n as f64 / of as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FetchResult, Fingerprint};

    fn rec(class: Class, pmtud: Pmtud) -> Record {
        let fp = Some(Fingerprint { status: 200, length: 1, hash: "0".into() });
        let answered = |yes: bool| FetchResult {
            fingerprint: if yes { fp.clone() } else { None },
            failure: None,
            attempts: 1,
            ms: 0.0,
        };
        Record {
            target: "x".into(),
            addr: "203.0.113.1".parse().unwrap(),
            port: 80,
            host: None,
            class,
            plain: answered(class != Class::Unresponsive),
            fragmented: Some(answered(matches!(class, Class::FragmentsOk | Class::FragmentsDiffer))),
            fragments: 2,
            identical: None,
            fragment_path: None,
            icmp_pmtud: pmtud,
            pmtud_note: None,
            ms: 0.0,
            probes: 0,
            late_probes: 0,
        }
    }

    #[test]
    fn counts_and_fractions() {
        let rs = vec![
            rec(Class::FragmentsOk, Pmtud::Works),
            rec(Class::FragmentsOk, Pmtud::SameAddress),
            rec(Class::FragmentsOk, Pmtud::Fails),
            rec(Class::FilteredLastHop, Pmtud::Works),
            rec(Class::Unresponsive, Pmtud::NotTested),
            rec(Class::FragmentsDiffer, Pmtud::Inconclusive),
        ];
        let mut rs = rs;
        rs[0].probes = 10;
        rs[1].probes = 2;
        let s = Summary::of(&rs);
        assert_eq!((s.probes_per_target.mean, s.probes_per_target.max, s.late_probes), (2.0, 10, 0));
        assert_eq!((s.targets, s.responded_unfragmented, s.responded_fragmented, s.identical), (6, 5, 4, 3));
        assert_eq!((s.filtered_last_hop, s.pmtud_tested, s.pmtud_works, s.pmtud_inconclusive), (1, 3, 2, 1));
        assert!((s.frag_ok_fraction() - 0.6).abs() < 1e-12);
        assert!((s.icmp_pmtud_ok_fraction() - 2.0 / 3.0).abs() < 1e-12);
        let t = s.table();
        assert!(t.contains("identical answer") && t.contains("60.00 %") && t.contains("99.98 %"), "{t}");
        assert_eq!(Summary::of(&[]).frag_ok_fraction(), 0.0);
    }
}
