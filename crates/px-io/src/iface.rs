//! Interface control: index, MTU, flags, offloads, and a guard that puts an
//! interface back the way it was found.
//!
//! Everything goes through ioctls on a throw-away datagram socket
//! (`SIOCGIFINDEX`, `SIOCGIFMTU`/`SIOCSIFMTU`, `SIOCGIFFLAGS`, and the
//! legacy per-feature `SIOCETHTOOL` commands), so the gateway needs no
//! `ethtool` binary. Names resolve in the calling thread's network
//! namespace. Promiscuous mode is *not* toggled here with `IFF_PROMISC`:
//! [`crate::PacketSocket`] joins it with `PACKET_MR_PROMISC`, a per-socket,
//! reference-counted membership the kernel drops when the socket closes,
//! so even a crashed gateway cannot leave a port promiscuous.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Why an interface operation failed.
#[derive(Debug, thiserror::Error)]
pub enum IfaceError {
    /// The name is empty, too long (>15 bytes) or contains a NUL.
    #[error("invalid interface name `{0}`")]
    Name(String),
    /// The kernel refused the request (no such device, not permitted,
    /// feature fixed...).
    #[error("{op} on {iface}: {source}")]
    Os {
        /// The request, e.g. `SIOCSIFMTU`.
        op: &'static str,
        /// The interface.
        iface: String,
        /// The OS error.
        source: io::Error,
    },
}

/// One offload feature, as the legacy ethtool commands name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Offload {
    /// Transmit checksum offload (`tx`); TSO depends on it.
    TxChecksum,
    /// TCP segmentation offload (`tso`).
    Tso,
    /// Generic segmentation offload (`gso`).
    Gso,
    /// Generic receive offload (`gro`).
    Gro,
}

impl Offload {
    /// In the order a restore must apply them (TSO needs TX checksumming).
    pub const ALL: [Offload; 4] = [Offload::TxChecksum, Offload::Tso, Offload::Gso, Offload::Gro];

    /// (get, set) ethtool command numbers from `<linux/ethtool.h>`.
    fn cmds(self) -> (u32, u32) {
        match self {
            Offload::TxChecksum => (0x16, 0x17), // ETHTOOL_GTXCSUM / STXCSUM
            Offload::Tso => (0x1e, 0x1f),        // ETHTOOL_GTSO / STSO
            Offload::Gso => (0x23, 0x24),        // ETHTOOL_GGSO / SGSO
            Offload::Gro => (0x2b, 0x2c),        // ETHTOOL_GGRO / SGRO
        }
    }
}

/// The offload state of an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffloadState {
    /// Transmit checksum offload.
    pub tx_csum: bool,
    /// TCP segmentation offload.
    pub tso: bool,
    /// Generic segmentation offload.
    pub gso: bool,
    /// Generic receive offload.
    pub gro: bool,
}

impl OffloadState {
    /// The value of one feature.
    pub fn get(&self, o: Offload) -> bool {
        match o {
            Offload::TxChecksum => self.tx_csum,
            Offload::Tso => self.tso,
            Offload::Gso => self.gso,
            Offload::Gro => self.gro,
        }
    }
}

/// A control socket for interface ioctls. Interface names resolve in the
/// network namespace the socket was created in (the creating thread's),
/// whichever thread uses it later.
#[derive(Debug)]
pub struct IfaceCtl {
    fd: OwnedFd,
}

/// An `ifreq` with the name filled in, or `None` if the name cannot fit.
fn ifreq(name: &str) -> Option<libc::ifreq> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) {
        return None;
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Some(r)
}

fn req_for(name: &str) -> Result<libc::ifreq, IfaceError> {
    ifreq(name).ok_or_else(|| IfaceError::Name(name.to_owned()))
}

/// `struct ethtool_value` of `<linux/ethtool.h>`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

impl IfaceCtl {
    /// A control socket in the calling thread's network namespace.
    pub fn new() -> Result<IfaceCtl, IfaceError> {
        // SAFETY: socket(2) with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(IfaceError::Os { op: "socket", iface: String::new(), source: io::Error::last_os_error() });
        }
        // SAFETY: fd is a fresh, valid descriptor nobody else owns.
        Ok(IfaceCtl { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Issues one interface ioctl. `req` must match the ifreq union member
    /// the caller reads or wrote.
    fn ioctl(&self, name: &str, op: &'static str, req: libc::c_ulong, r: &mut libc::ifreq) -> Result<(), IfaceError> {
        // SAFETY: `r` is a valid, initialised ifreq that outlives the call;
        // every request used in this module reads/writes only an ifreq (or,
        // for SIOCETHTOOL, the ethtool_value its ifr_data points to, kept
        // alive by the caller).
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), req as _, r as *mut libc::ifreq) } < 0 {
            return Err(IfaceError::Os { op, iface: name.to_owned(), source: io::Error::last_os_error() });
        }
        Ok(())
    }

    /// The interface index of `name`.
    pub fn ifindex(&self, name: &str) -> Result<u32, IfaceError> {
        let mut r = req_for(name)?;
        self.ioctl(name, "SIOCGIFINDEX", libc::SIOCGIFINDEX, &mut r)?;
        // SAFETY: SIOCGIFINDEX filled the ifindex member.
        let i = unsafe { r.ifr_ifru.ifru_ifindex };
        u32::try_from(i).map_err(|_| IfaceError::Name(name.to_owned()))
    }

    /// The MTU of `name` (L3 bytes, without the Ethernet header).
    pub fn mtu(&self, name: &str) -> Result<u32, IfaceError> {
        let mut r = req_for(name)?;
        self.ioctl(name, "SIOCGIFMTU", libc::SIOCGIFMTU, &mut r)?;
        // SAFETY: SIOCGIFMTU filled the mtu member.
        let m = unsafe { r.ifr_ifru.ifru_mtu };
        u32::try_from(m).map_err(|_| IfaceError::Name(name.to_owned()))
    }

    /// Sets the MTU of `name`.
    pub fn set_mtu(&self, name: &str, mtu: u32) -> Result<(), IfaceError> {
        let mut r = req_for(name)?;
        r.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu).unwrap_or(libc::c_int::MAX);
        self.ioctl(name, "SIOCSIFMTU", libc::SIOCSIFMTU, &mut r)
    }

    /// The interface flags (`IFF_UP`, `IFF_RUNNING`, ...) as SIOCGIFFLAGS
    /// reports them: `IFF_PROMISC` there only reflects a user's
    /// `ip link set promisc on`, not the packet-socket memberships this
    /// crate uses (those show as `promiscuity N` in `ip -d link`).
    pub fn flags(&self, name: &str) -> Result<u32, IfaceError> {
        let mut r = req_for(name)?;
        self.ioctl(name, "SIOCGIFFLAGS", libc::SIOCGIFFLAGS, &mut r)?;
        // SAFETY: SIOCGIFFLAGS filled the flags member.
        let f = unsafe { r.ifr_ifru.ifru_flags };
        Ok(u32::from(f as u16))
    }

    /// Sets `name` administratively up or down (`ip link set NAME up`,
    /// SIOCSIFFLAGS; needs CAP_NET_ADMIN). Down, a NIC turns its PHY off
    /// and a veth's peer loses its carrier: the neighbour sees the link
    /// fail.
    pub fn set_up(&self, name: &str, up: bool) -> Result<(), IfaceError> {
        let flags = self.flags(name)?;
        let want = if up { flags | libc::IFF_UP as u32 } else { flags & !(libc::IFF_UP as u32) };
        if want == flags {
            return Ok(());
        }
        let mut r = req_for(name)?;
        r.ifr_ifru.ifru_flags = want as u16 as libc::c_short;
        self.ioctl(name, "SIOCSIFFLAGS", libc::SIOCSIFFLAGS, &mut r)
    }

    fn ethtool(&self, name: &str, op: &'static str, cmd: u32, data: u32) -> Result<u32, IfaceError> {
        let mut v = EthtoolValue { cmd, data };
        let mut r = req_for(name)?;
        r.ifr_ifru.ifru_data = (&raw mut v).cast();
        self.ioctl(name, op, libc::SIOCETHTOOL, &mut r)?;
        Ok(v.data)
    }

    /// The current state of one offload.
    pub fn offload(&self, name: &str, o: Offload) -> Result<bool, IfaceError> {
        Ok(self.ethtool(name, "SIOCETHTOOL get", o.cmds().0, 0)? != 0)
    }

    /// Turns one offload on or off. The kernel may refuse (a fixed feature)
    /// or silently keep a feature off whose dependency is off; read back
    /// with [`IfaceCtl::offload`] where it matters.
    pub fn set_offload(&self, name: &str, o: Offload, on: bool) -> Result<(), IfaceError> {
        self.ethtool(name, "SIOCETHTOOL set", o.cmds().1, u32::from(on)).map(drop)
    }

    /// All offloads this module knows.
    pub fn offloads(&self, name: &str) -> Result<OffloadState, IfaceError> {
        Ok(OffloadState {
            tx_csum: self.offload(name, Offload::TxChecksum)?,
            tso: self.offload(name, Offload::Tso)?,
            gso: self.offload(name, Offload::Gso)?,
            gro: self.offload(name, Offload::Gro)?,
        })
    }
}

/// [`IfaceCtl::ifindex`] in the calling thread's namespace.
pub fn ifindex(name: &str) -> Result<u32, IfaceError> {
    req_for(name)?;
    IfaceCtl::new()?.ifindex(name)
}

/// [`IfaceCtl::mtu`] in the calling thread's namespace.
pub fn mtu(name: &str) -> Result<u32, IfaceError> {
    req_for(name)?;
    IfaceCtl::new()?.mtu(name)
}

/// [`IfaceCtl::flags`] in the calling thread's namespace.
pub fn flags(name: &str) -> Result<u32, IfaceError> {
    req_for(name)?;
    IfaceCtl::new()?.flags(name)
}

/// [`IfaceCtl::offloads`] in the calling thread's namespace.
pub fn offloads(name: &str) -> Result<OffloadState, IfaceError> {
    req_for(name)?;
    IfaceCtl::new()?.offloads(name)
}

/// Records an interface's MTU and offloads when created and restores them
/// when dropped, so the gateway leaves ports as it found them on every
/// exit path that runs destructors (the CLI's SIGINT/SIGTERM path must
/// unwind to it rather than `exit`).
///
/// The guard keeps the control socket it captured with, so it restores the
/// interface of the namespace it was created in, even if dropped on a
/// thread that lives in another namespace.
#[derive(Debug)]
pub struct IfaceGuard {
    ctl: IfaceCtl,
    name: String,
    mtu: u32,
    offloads: OffloadState,
}

impl IfaceGuard {
    /// Captures the current state of `name` (calling thread's namespace).
    pub fn capture(name: &str) -> Result<IfaceGuard, IfaceError> {
        req_for(name)?;
        let ctl = IfaceCtl::new()?;
        let mtu = ctl.mtu(name)?;
        let offloads = ctl.offloads(name)?;
        Ok(IfaceGuard { ctl, name: name.to_owned(), mtu, offloads })
    }

    /// The control socket, to change the interface while guarded.
    pub fn ctl(&self) -> &IfaceCtl {
        &self.ctl
    }

    /// The interface.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The MTU at capture time.
    pub fn original_mtu(&self) -> u32 {
        self.mtu
    }

    /// The offloads at capture time.
    pub fn original_offloads(&self) -> OffloadState {
        self.offloads
    }

    /// Puts MTU and offloads back now; reports the first failure but tries
    /// every item.
    pub fn restore(&self) -> Result<(), IfaceError> {
        let (c, n) = (&self.ctl, self.name.as_str());
        let mut first = None;
        if c.mtu(n).ok() != Some(self.mtu) {
            first = c.set_mtu(n, self.mtu).err();
        }
        for o in Offload::ALL {
            let want = self.offloads.get(o);
            if c.offload(n, o).ok() != Some(want)
                && let Err(e) = c.set_offload(n, o, want)
            {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for IfaceGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("px-io: restoring {} failed: {e}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_any_syscall() {
        assert!(matches!(ifindex(""), Err(IfaceError::Name(_))));
        assert!(matches!(mtu("sixteen-chars-xx"), Err(IfaceError::Name(_))));
        assert!(matches!(flags("a\0b"), Err(IfaceError::Name(_))));
    }

    #[test]
    fn loopback_is_visible_in_any_namespace() {
        // Every network namespace has `lo`; these ioctls need no privilege.
        assert!(ifindex("lo").unwrap() >= 1);
        assert!(mtu("lo").unwrap() >= 1280);
        assert!(flags("lo").unwrap() & libc::IFF_LOOPBACK as u32 != 0);
    }

    #[test]
    fn missing_interface_is_an_os_error() {
        match ifindex("px-nonexist0") {
            Err(IfaceError::Os { op, source, .. }) => {
                assert_eq!(op, "SIOCGIFINDEX");
                assert_eq!(source.raw_os_error(), Some(libc::ENODEV));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
