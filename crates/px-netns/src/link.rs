//! Veth pairs between namespaces.
//!
//! A [`Veth`] is created directly inside its two namespaces (never in the
//! caller's namespace), so the same short device names (`eth0`) can be used
//! in every namespace and parallel tests cannot collide. The pair is
//! destroyed by the kernel when either namespace is deleted; [`Veth`] only
//! describes it. [`Veth::create`] returns once both ends can carry frames.

use std::time::{Duration, Instant};

use crate::LabError;
use crate::netns::{Netns, Offloads, check_ifname};

/// How long a new link may take to become operational.
const OPERATIONAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Waits until `dev` is operationally up *and* has its real queueing
/// discipline. Until the kernel's link watcher (which may defer by up to a
/// second) activates the device, it sits on the `noop` qdisc, which drops
/// every frame while reporting success to the sender: the first frames of
/// a test would vanish.
fn wait_operational(ns: &Netns, dev: &str) -> Result<(), LabError> {
    let start = Instant::now();
    loop {
        let out = ns.ip(&["-o", "link", "show", "dev", dev])?;
        if is_operational(&out) {
            return Ok(());
        }
        if start.elapsed() > OPERATIONAL_TIMEOUT {
            return Err(LabError::NotOperational(format!("{}:{dev}: {}", ns.name(), out.trim())));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Parses one line of `ip -o link show`.
fn is_operational(line: &str) -> bool {
    line.contains(" state UP ") && !line.contains(" qdisc noop ")
}

/// One end of a link: a namespace name and a device name inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkEnd {
    /// The namespace holding the device.
    pub ns: String,
    /// The device name inside that namespace.
    pub dev: String,
}

/// A veth pair with both ends up and the same MTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Veth {
    /// First end.
    pub a: LinkEnd,
    /// Second end.
    pub b: LinkEnd,
    /// The MTU set on both ends.
    pub mtu: u32,
}

impl Veth {
    /// Creates `a_dev` in `a` paired with `b_dev` in `b`, sets `mtu` on both
    /// ends and brings them up.
    pub fn create(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str, mtu: u32) -> Result<Veth, LabError> {
        check_ifname(a_dev)?;
        check_ifname(b_dev)?;
        let m = mtu.to_string();
        let args = [
            "link",
            "add",
            a_dev,
            "netns",
            a.name(),
            "mtu",
            &m,
            "type",
            "veth",
            "peer",
            "name",
            b_dev,
            "netns",
            b.name(),
            "mtu",
            &m,
        ];
        crate::cmd::run_args("ip", &args)?;
        a.link_up(a_dev)?;
        b.link_up(b_dev)?;
        wait_operational(a, a_dev)?;
        wait_operational(b, b_dev)?;
        Ok(Veth {
            a: LinkEnd { ns: a.name().to_owned(), dev: a_dev.to_owned() },
            b: LinkEnd { ns: b.name().to_owned(), dev: b_dev.to_owned() },
            mtu,
        })
    }

    /// Makes the link behave like a wire in the direction a → b: the
    /// sender `a` emits MTU-sized frames (TSO/GSO off) and the receiver `b`
    /// merges them with GRO, as a NIC's LRO would.
    pub fn wire_like(&self, a: &Netns, b: &Netns) -> Result<(), LabError> {
        a.set_offloads(&self.a.dev, Offloads::WIRE_SENDER)?;
        b.set_offloads(&self.b.dev, Offloads::GRO_RECEIVER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operational_means_up_with_a_real_qdisc() {
        let up = "5: eth0@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT";
        let waiting = "5: eth0@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noop state UP mode DEFAULT";
        let down = "5: eth0@if4: <BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state LOWERLAYERDOWN mode DEFAULT";
        assert!(is_operational(up));
        assert!(!is_operational(waiting));
        assert!(!is_operational(down));
    }
}
