//! A device's packet and byte counters as its namespace's kernel counts
//! them (`/proc/thread-self/net/dev`: the calling thread's namespace).

use crate::LabError;
use crate::netns::{Netns, check_ifname};

/// What a device received and sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevCounters {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
}

impl DevCounters {
    /// What changed since `before`.
    pub fn since(&self, before: &DevCounters) -> DevCounters {
        DevCounters {
            rx_bytes: self.rx_bytes.saturating_sub(before.rx_bytes),
            rx_packets: self.rx_packets.saturating_sub(before.rx_packets),
            tx_bytes: self.tx_bytes.saturating_sub(before.tx_bytes),
            tx_packets: self.tx_packets.saturating_sub(before.tx_packets),
        }
    }
}

/// The counters of `dev` in a `/proc/net/dev` text, if it is listed.
pub fn parse_net_dev(text: &str, dev: &str) -> Option<DevCounters> {
    text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != dev {
            return None;
        }
        let f: Vec<u64> = rest.split_whitespace().filter_map(|v| v.parse().ok()).collect();
        Some(DevCounters {
            rx_bytes: *f.first()?,
            rx_packets: *f.get(1)?,
            tx_bytes: *f.get(8)?,
            tx_packets: *f.get(9)?,
        })
    })
}

/// The counters of `dev` in the calling thread's namespace.
pub fn dev_counters_here(dev: &str) -> Option<DevCounters> {
    parse_net_dev(&std::fs::read_to_string("/proc/thread-self/net/dev").ok()?, dev)
}

impl Netns {
    /// The counters of `dev` in this namespace.
    pub fn dev_counters(&self, dev: &str) -> Result<DevCounters, LabError> {
        check_ifname(dev)?;
        self.run(|| dev_counters_here(dev))?
            .ok_or_else(|| LabError::Observe(format!("{}: no device {dev}", self.name())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proc_net_dev_line_reads_back() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
                    face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n  \
                    eth0: 9000000    1000    0    0    0     0          0         0   64000    1000    0    0    0     0       0          0\n";
        let c = parse_net_dev(text, "eth0").unwrap();
        assert_eq!((c.rx_bytes, c.rx_packets, c.tx_bytes, c.tx_packets), (9_000_000, 1000, 64_000, 1000));
        assert_eq!(parse_net_dev(text, "eth1"), None);
        let d =
            DevCounters { rx_bytes: 10, rx_packets: 2, ..c }.since(&DevCounters { rx_bytes: 4, rx_packets: 1, ..c });
        assert_eq!((d.rx_bytes, d.rx_packets, d.tx_bytes), (6, 1, 0));
    }
}
