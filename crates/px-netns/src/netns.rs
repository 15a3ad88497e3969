//! Network namespaces as guards.
//!
//! A [`Netns`] is created with a unique name `px-<role>-<pid>-<n>` and is
//! deleted when dropped (and on SIGINT/SIGTERM, see [`crate::cleanup`]).
//! Commands run inside it with `ip netns exec`; Rust code runs inside it on
//! a thread that entered it with `setns(2)` ([`Netns::enter`],
//! [`Netns::run`]) — sockets opened there belong to the namespace.
//! Child processes started with [`Netns::spawn`] are killed and reaped when
//! their [`LabChild`] guard drops, before the namespace itself goes.

use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::addr::{DocPrefix, doc_addr};
use crate::{LabError, cleanup, cmd};

/// Every lab namespace name starts with this.
pub const PREFIX: &str = "px-";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The parts of a lab namespace name `px-<role>-<pid>-<n>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsName {
    /// What the namespace plays in the topology (`legacy`, `gw`, `bnet`...).
    pub role: String,
    /// The process that created it.
    pub pid: u32,
    /// Per-process counter, so one process can create many.
    pub n: u32,
}

impl NsName {
    /// Parses a name made by [`NsName::format`]; `None` for anything else.
    pub fn parse(name: &str) -> Option<NsName> {
        let rest = name.strip_prefix(PREFIX)?;
        let mut it = rest.rsplitn(3, '-');
        let n = it.next()?.parse().ok()?;
        let pid = it.next()?.parse().ok()?;
        let role = it.next()?;
        valid_role(role).then(|| NsName { role: role.to_owned(), pid, n })
    }

    /// The namespace name.
    pub fn format(&self) -> String {
        format!("{PREFIX}{}-{}-{}", self.role, self.pid, self.n)
    }

    /// True if the creating process no longer exists: a leftover of a run
    /// killed with SIGKILL, safe for `px lab down` to delete.
    pub fn is_stale(&self) -> bool {
        !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

/// Roles are short lowercase words so names stay readable and unambiguous.
fn valid_role(role: &str) -> bool {
    (1..=16).contains(&role.len()) && role.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Interface names: at most 15 bytes (IFNAMSIZ - 1), no `/`, space or `:`.
pub(crate) fn check_ifname(dev: &str) -> Result<(), LabError> {
    let ok = (1..=15).contains(&dev.len())
        && dev.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok { Ok(()) } else { Err(LabError::Name(dev.to_owned())) }
}

/// Names of all namespaces whose name starts with `px-`.
pub fn list_px_namespaces() -> Result<Vec<String>, LabError> {
    let out = cmd::run_args("ip", &["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
        .map(str::to_owned)
        .collect())
}

/// Deletes a namespace by name (for `px lab down`); only `px-` names.
pub fn delete_by_name(name: &str) -> Result<(), LabError> {
    if !name.starts_with(PREFIX) {
        return Err(LabError::Name(name.to_owned()));
    }
    cmd::run_args("ip", &["netns", "del", name])?;
    Ok(())
}

/// TCP segmentation, generic segmentation and generic receive offload
/// settings for one interface; `None` leaves a feature as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offloads {
    /// TCP segmentation offload (`tso`).
    pub tso: Option<bool>,
    /// Generic segmentation offload (`gso`).
    pub gso: Option<bool>,
    /// Generic receive offload (`gro`).
    pub gro: Option<bool>,
}

impl Offloads {
    /// A wire-like sender: the stack emits MTU-sized frames.
    pub const WIRE_SENDER: Offloads = Offloads { tso: Some(false), gso: Some(false), gro: None };
    /// A receiver that merges like a NIC's LRO (kernel GRO).
    pub const GRO_RECEIVER: Offloads = Offloads { tso: None, gso: None, gro: Some(true) };

    /// Combines two settings; `other` wins where both set a feature.
    pub fn with(self, other: Offloads) -> Offloads {
        Offloads { tso: other.tso.or(self.tso), gso: other.gso.or(self.gso), gro: other.gro.or(self.gro) }
    }

    /// The `ethtool -K DEV ...` argument list after DEV.
    pub fn ethtool_args(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (name, val) in [("tso", self.tso), ("gso", self.gso), ("gro", self.gro)] {
            if let Some(on) = val {
                v.push(name);
                v.push(if on { "on" } else { "off" });
            }
        }
        v
    }
}

/// A network namespace that is deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
    persistent: bool,
}

impl Netns {
    /// Creates `px-<role>-<pid>-<n>` with its loopback up.
    pub fn new(role: &str) -> Result<Netns, LabError> {
        if !valid_role(role) {
            return Err(LabError::Name(role.to_owned()));
        }
        let name =
            NsName { role: role.to_owned(), pid: std::process::id(), n: COUNTER.fetch_add(1, Ordering::Relaxed) }
                .format();
        // Register before creating: a signal between the two steps must still
        // find it (deleting a name that does not exist only prints a warning).
        cleanup::register_namespace(&name);
        if let Err(e) = cmd::run_args("ip", &["netns", "add", &name]) {
            cleanup::unregister_namespace(&name);
            return Err(e.into());
        }
        let ns = Netns { name, persistent: false };
        ns.ip(&["link", "set", "lo", "up"])?;
        // Interfaces created from now on skip IPv6 duplicate address
        // detection: a tentative link-local address delays neighbour
        // discovery by a second or more, which would stall the first
        // packets of every run.
        for key in ["net.ipv6.conf.default.accept_dad", "net.ipv6.conf.all.accept_dad"] {
            match ns.set_sysctl(key, "0") {
                // A kernel without IPv6 has no such key and no DAD either.
                Err(LabError::Sysctl { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
        Ok(ns)
    }

    /// The namespace's name (for `ip -n`, `ip netns exec`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps the namespace after this guard drops (`px lab up`); returns
    /// its name for a later [`delete_by_name`].
    pub fn persist(mut self) -> String {
        self.persistent = true;
        cleanup::unregister_namespace(&self.name);
        self.name.clone()
    }

    /// `ip -n NAME <args>`.
    pub fn ip(&self, args: &[&str]) -> Result<String, LabError> {
        let mut c = Command::new("ip");
        c.arg("-n").arg(&self.name).args(args);
        Ok(cmd::run(&mut c)?)
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `program args` inside the namespace; returns its stdout.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String, LabError> {
        Ok(cmd::run(self.command(program).args(args))?)
    }

    /// Starts `program args` inside the namespace in the background, its
    /// output discarded; the process is killed when the guard drops. For
    /// other stdio, build with [`Netns::command`] and use [`LabChild::spawn`].
    pub fn spawn(&self, program: &str, args: &[&str]) -> Result<LabChild, LabError> {
        let mut c = self.command(program);
        c.args(args).stdout(Stdio::null()).stderr(Stdio::null());
        LabChild::spawn(&mut c)
    }

    /// Moves the calling thread into the namespace until the guard drops.
    pub fn enter(&self) -> Result<NetnsGuard, LabError> {
        NetnsGuard::enter(&self.name)
    }

    /// Runs `f` on a fresh thread inside the namespace and returns its
    /// result; the caller's thread never changes namespace.
    pub fn run<R: Send, F: FnOnce() -> R + Send>(&self, f: F) -> Result<R, LabError> {
        std::thread::scope(|s| {
            s.spawn(|| {
                let _g = self.enter()?;
                Ok(f())
            })
            .join()
            .map_err(|_| LabError::Panicked(self.name.clone()))?
        })
    }

    /// Sets a per-namespace sysctl (`net.ipv4.ip_forward`): writes
    /// `/proc/sys/net/...` from a thread inside the namespace, which the
    /// kernel resolves to that namespace's value (no `sysctl` process).
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<(), LabError> {
        if !key.starts_with("net.") || key.contains('/') || key.contains("..") {
            return Err(LabError::Name(key.to_owned()));
        }
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.run(|| std::fs::write(&path, value))?.map_err(|source| LabError::Sysctl { key: key.to_owned(), source })
    }

    /// Turns on IPv4 and IPv6 forwarding (a router or gateway namespace).
    pub fn enable_forwarding(&self) -> Result<(), LabError> {
        self.set_sysctl("net.ipv4.ip_forward", "1")?;
        self.set_sysctl("net.ipv6.conf.all.forwarding", "1")
    }

    /// Sets an interface up.
    pub fn link_up(&self, dev: &str) -> Result<(), LabError> {
        check_ifname(dev)?;
        self.ip(&["link", "set", "dev", dev, "up"]).map(drop)
    }

    /// Sets an interface's MTU.
    pub fn set_mtu(&self, dev: &str, mtu: u32) -> Result<(), LabError> {
        check_ifname(dev)?;
        self.ip(&["link", "set", "dev", dev, "mtu", &mtu.to_string()]).map(drop)
    }

    /// Adds a documentation-range address (`198.51.100.1/24`,
    /// `2001:db8:1::1/64`). IPv6 addresses skip duplicate address detection
    /// so they are usable at once.
    pub fn add_addr(&self, dev: &str, prefix: &str) -> Result<(), LabError> {
        check_ifname(dev)?;
        let p = DocPrefix::parse(prefix)?.to_string();
        let mut args = vec!["addr", "add", &p, "dev", dev];
        if prefix.contains(':') {
            args.push("nodad");
        }
        self.ip(&args).map(drop)
    }

    /// Adds a route to a documentation prefix via a documentation gateway.
    pub fn add_route(&self, dst: &str, via: &str) -> Result<(), LabError> {
        let d = DocPrefix::parse(dst)?.to_string();
        let v = doc_addr(via)?.to_string();
        self.ip(&["route", "add", &d, "via", &v]).map(drop)
    }

    /// `ethtool -K dev ...` inside the namespace.
    pub fn set_offloads(&self, dev: &str, o: Offloads) -> Result<(), LabError> {
        check_ifname(dev)?;
        let args = o.ethtool_args();
        if args.is_empty() {
            return Ok(());
        }
        let mut all = vec!["-K", dev];
        all.extend(args);
        self.exec("ethtool", &all).map(drop)
    }

    /// One offload feature as `ethtool -k` reports it (`tcp-segmentation-offload`,
    /// `generic-receive-offload`, ...); `None` if not listed.
    pub fn offload(&self, dev: &str, feature: &str) -> Result<Option<bool>, LabError> {
        check_ifname(dev)?;
        let out = self.exec("ethtool", &["-k", dev])?;
        Ok(parse_ethtool_feature(&out, feature))
    }

    /// Pings `target` (a documentation address) `count` times, 0.2 s apart;
    /// Ok if at least one reply came back.
    pub fn ping(&self, target: &str, count: u32) -> Result<(), LabError> {
        let t = doc_addr(target)?.to_string();
        self.exec("ping", &["-n", "-q", "-c", &count.to_string(), "-i", "0.2", "-W", "2", &t]).map(drop)
    }
}

/// Finds `feature: on|off` in `ethtool -k` output (`[fixed]` suffix allowed).
pub fn parse_ethtool_feature(out: &str, feature: &str) -> Option<bool> {
    out.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(':')?;
        if k != feature {
            return None;
        }
        match v.split_whitespace().next()? {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        }
    })
}

impl Drop for Netns {
    fn drop(&mut self) {
        if self.persistent {
            return;
        }
        crate::runfiles::remove_files_of_namespace(&self.name);
        if let Err(e) = cmd::run_args("ip", &["netns", "del", &self.name]) {
            eprintln!("px-lab: deleting namespace {} failed: {e}", self.name);
        }
        cleanup::unregister_namespace(&self.name);
    }
}

/// The calling thread is inside another namespace while this lives; drop
/// returns it to the namespace it came from. Not `Send`: namespaces are
/// per-thread and the restore must run on the same thread.
#[derive(Debug)]
pub struct NetnsGuard {
    original: File,
    _not_send: PhantomData<*const ()>,
}

impl NetnsGuard {
    /// Moves the calling thread into the namespace `name` (of `ip netns`)
    /// until the guard drops; threads it creates meanwhile are born there.
    pub fn enter(name: &str) -> Result<NetnsGuard, LabError> {
        let setns_err = |source| LabError::Setns { name: name.to_owned(), source };
        let original = File::open("/proc/thread-self/ns/net").map_err(setns_err)?;
        let target = File::open(format!("/run/netns/{name}")).map_err(setns_err)?;
        setns_net(&target).map_err(setns_err)?;
        Ok(NetnsGuard { original, _not_send: PhantomData })
    }
}

fn setns_net(f: &File) -> std::io::Result<()> {
    // SAFETY: setns(2) with a valid open namespace fd; it only changes this
    // thread's network namespace (allowed in multi-threaded processes).
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Err(e) = setns_net(&self.original) {
            // Continuing in the wrong namespace would silently run later code
            // (and sockets) in a lab namespace: that must not go unnoticed.
            panic!("px-lab: cannot return thread to its original network namespace: {e}");
        }
    }
}

/// A background process killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct LabChild {
    child: Option<Child>,
    cmd: String,
}

impl LabChild {
    /// Spawns `cmd`; registers its pid for signal cleanup.
    pub fn spawn(cmd: &mut Command) -> Result<LabChild, LabError> {
        let line = cmd::describe(cmd);
        let child = cmd.spawn().map_err(|source| cmd::CmdError::Spawn { cmd: line.clone(), source })?;
        cleanup::register_child(child.id());
        Ok(LabChild { child: Some(child), cmd: line })
    }

    /// The process id.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process has exited (it is then reaped).
    pub fn has_exited(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => false,
            Some(_) | None => true,
        }
    }

    /// Sends SIGKILL now and reaps the process (what dropping the guard
    /// does, for a caller that needs to know when it happened).
    pub fn kill_and_reap(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Errors mean it already exited; wait() reaps it either way.
            let _ = c.kill();
            let _ = c.wait();
            cleanup::unregister_child(c.id());
        }
    }

    /// The command line that started it.
    pub fn command_line(&self) -> &str {
        &self.cmd
    }

    /// Waits for the process to exit by itself and collects its output
    /// (stdout/stderr are captured only if the command piped them).
    pub fn wait_with_output(mut self) -> Result<Output, LabError> {
        let Some(child) = self.child.take() else {
            // Only `drop` and this method take the child, and both consume self.
            return Err(LabError::Gone(self.cmd.clone()));
        };
        let pid = child.id();
        let out = child.wait_with_output();
        cleanup::unregister_child(pid);
        out.map_err(|source| cmd::CmdError::Spawn { cmd: self.cmd.clone(), source }.into())
    }
}

impl Drop for LabChild {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn name_roundtrip() {
        let n = NsName { role: "gw".into(), pid: 4242, n: 7 };
        assert_eq!(n.format(), "px-gw-4242-7");
        assert_eq!(NsName::parse("px-gw-4242-7"), Some(n));
    }

    #[test]
    fn parse_rejects_foreign_names() {
        for s in ["gw-1-2", "px-gw-1", "px--1-2", "px-GW-1-2", "px-gw-x-2", "px-gw-1-2-", "px-a-b-1-2"] {
            assert_eq!(NsName::parse(s), None, "{s}");
        }
    }

    #[test]
    fn stale_detection_uses_pid() {
        let me = NsName { role: "a".into(), pid: std::process::id(), n: 0 };
        assert!(!me.is_stale());
        let gone = NsName { role: "a".into(), pid: u32::MAX - 1, n: 0 };
        assert!(gone.is_stale());
    }

    #[test]
    fn role_and_ifname_validation() {
        assert!(Netns::new("Bad Role").is_err());
        assert!(check_ifname("eth0").is_ok());
        assert!(check_ifname("a-very-long-ifname").is_err());
        assert!(check_ifname("a b").is_err());
        assert!(check_ifname("").is_err());
    }

    #[test]
    fn offload_args() {
        assert_eq!(Offloads::WIRE_SENDER.ethtool_args(), ["tso", "off", "gso", "off"]);
        let both = Offloads::WIRE_SENDER.with(Offloads::GRO_RECEIVER);
        assert_eq!(both.ethtool_args(), ["tso", "off", "gso", "off", "gro", "on"]);
        assert!(Offloads::default().ethtool_args().is_empty());
    }

    #[test]
    fn ethtool_feature_parsing() {
        let out = "Features for veth0:\nrx-checksumming: on\ntcp-segmentation-offload: off\n\
                   \ttx-tcp-segmentation: off\ngeneric-receive-offload: on\nlarge-receive-offload: off [fixed]\n";
        assert_eq!(parse_ethtool_feature(out, "tcp-segmentation-offload"), Some(false));
        assert_eq!(parse_ethtool_feature(out, "tx-tcp-segmentation"), Some(false));
        assert_eq!(parse_ethtool_feature(out, "generic-receive-offload"), Some(true));
        assert_eq!(parse_ethtool_feature(out, "large-receive-offload"), Some(false));
        assert_eq!(parse_ethtool_feature(out, "missing"), None);
    }

    proptest! {
        #[test]
        fn any_valid_name_roundtrips(role in "[a-z0-9]{1,16}", pid: u32, n: u32) {
            let name = NsName { role, pid, n };
            prop_assert_eq!(NsName::parse(&name.format()), Some(name));
        }
    }
}
