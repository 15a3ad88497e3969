//! The process metrics every Prometheus client library exports
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …, the
//! names node_exporter users know), read from `/proc/self` at each scrape,
//! and what `px_build_info` labels.

/// One reading of the process' own state. Fields that could not be read
/// are `None` and their samples are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub threads: Option<u64>,
}

/// The `px` version the gateway runs (`px_build_info{version}`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

impl ProcessStats {
    /// Reads `/proc/self`.
    pub fn read() -> ProcessStats {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok()));
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
        // SAFETY: sysconf has no preconditions.
        let (tick, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
        Self::parse(&stat, boot, &limits, open_fds, tick as f64, page as u64)
    }

    /// From the text of `/proc/self/stat` and `/proc/self/limits`, the
    /// boot time, the open descriptors, clock ticks per second and the
    /// page size.
    fn parse(stat: &str, boot: Option<f64>, limits: &str, open_fds: Option<u64>, tick: f64, page: u64) -> ProcessStats {
        // Fields after the command name, which is in parentheses and may
        // hold spaces: field 3 (state) is index 0 here.
        let rest: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
        let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        let ticks = |v: Option<u64>| v.filter(|_| tick > 0.0).map(|t| t as f64 / tick);
        let cpu = match (field(14), field(15)) {
            (Some(u), Some(s)) => ticks(Some(u + s)),
            _ => None,
        };
        let max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok());
        ProcessStats {
            cpu_seconds: cpu,
            resident_bytes: field(24).map(|p| p * page),
            virtual_bytes: field(23),
            start_time_seconds: boot.zip(ticks(field(22))).map(|(b, s)| b + s),
            open_fds,
            max_fds,
            threads: field(20),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_and_limits() {
        let stat = "4242 (px gw (x)) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0 1000 123456789 2048 \
                    18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let p = ProcessStats::parse(stat, Some(1_700_000_000.0), limits, Some(9), 100.0, 4096);
        assert_eq!(p.cpu_seconds, Some(3.0));
        assert_eq!(p.threads, Some(3));
        assert_eq!(p.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(p.virtual_bytes, Some(123_456_789));
        assert_eq!(p.resident_bytes, Some(2048 * 4096));
        assert_eq!((p.open_fds, p.max_fds), (Some(9), Some(1024)));
        assert_eq!(ProcessStats::parse("", None, "", None, 100.0, 4096), ProcessStats::default());
        // This process: something plausible.
        let me = ProcessStats::read();
        assert!(me.resident_bytes.unwrap() > 0 && me.open_fds.unwrap() > 0 && me.start_time_seconds.unwrap() > 1e9);
    }
}
