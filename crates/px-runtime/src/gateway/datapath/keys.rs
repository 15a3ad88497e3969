//! The configuration keys of the datapaths: which one runs (`datapath`)
//! and the DPDK one's settings (the `[dpdk]` table). A leaf: it names no
//! other module of the gateway; `config.rs` checks these values.

use serde::{Deserialize, Serialize};

/// Which datapath carries the frames (the `datapath` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DatapathKind {
    /// Linux interfaces through packet sockets (`PACKET_VNET_HDR`).
    #[default]
    AfPacket,
    /// DPDK poll-mode ports (`[dpdk]`).
    Dpdk,
}

impl std::fmt::Display for DatapathKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DatapathKind::AfPacket => "af_packet",
            DatapathKind::Dpdk => "dpdk",
        })
    }
}

impl std::str::FromStr for DatapathKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "af_packet" => Ok(DatapathKind::AfPacket),
            "dpdk" => Ok(DatapathKind::Dpdk),
            _ => Err(format!("{s:?}: allowed \"af_packet\" or \"dpdk\"")),
        }
    }
}

/// The DPDK datapath (`[dpdk]`; `docs/dpdk.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkConfig {
    /// The inner port as a DPDK device: a virtual device with its
    /// arguments (`net_memif0,role=server,socket=/run/px/in.sock`,
    /// `net_af_packet0,iface=eth1`) or a PCI address (`0000:03:00.0`).
    pub inner: String,
    /// The outer port, the same way.
    pub outer: String,
    /// EAL arguments, as given (e.g. `["--in-memory"]`, `["-l", "2",
    /// "--no-huge"]`). The gateway adds `--vdev`/`-a` for the two ports,
    /// `-l` with the first worker's core if none of `-l`, `--lcores`, `-c`
    /// is given, and `-m` sized for the pools when `--no-huge` comes
    /// without `-m`.
    pub eal: Vec<String>,
    /// The CPU each worker thread is pinned to, one per worker (empty: not
    /// pinned). A polling worker takes its core whole.
    pub cores: Vec<usize>,
    /// Receive descriptors per queue.
    pub rx_descriptors: u16,
    /// Transmit descriptors per queue.
    pub tx_descriptors: u16,
    /// Buffers in each of the two pools (inner-sized, outer-sized); 0:
    /// enough for every queue's descriptors and what the workers hold.
    pub mbufs: u32,
    /// Use TSO (the outbound split) and checksum offload where a port has
    /// them; off: everything in software.
    pub offloads: bool,
    /// LRO on the outer port where it has it (off by default: the engine
    /// must see what it merges, docs/dpdk.md).
    pub lro: bool,
}

impl Default for DpdkConfig {
    fn default() -> Self {
        DpdkConfig {
            inner: String::new(),
            outer: String::new(),
            eal: Vec::new(),
            cores: Vec::new(),
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            mbufs: 0,
            offloads: true,
            lro: false,
        }
    }
}

impl DpdkConfig {
    /// The Linux interface a device specification runs on (DPDK's
    /// AF_PACKET driver's `iface=`), if any.
    pub fn interface_of(spec: &str) -> Option<&str> {
        device(spec).iface
    }

    /// Without a `[dpdk]` table: DPDK's AF_PACKET driver on the Linux
    /// interfaces `inner` and `outer` (one queue pair per worker), with
    /// frames sized for each interface's MTU (`mtus`: inner, outer), for
    /// trying the DPDK datapath on any Linux port and for the lab tests.
    pub fn on_interfaces(inner: &str, outer: &str, workers: usize, mtus: (u16, u16)) -> DpdkConfig {
        // A ring frame holds the tpacket header, an address and the whole
        // frame (Ethernet and two VLAN tags): the driver wants that to fit
        // one mbuf of the pool, whose room is the MTU plus the same 22
        // bytes (or more). Blocks are whole pages, a power of two.
        let spec = |n: usize, iface: &str, mtu: u16| {
            let frame = (u32::from(mtu) + 22 + 72).next_multiple_of(16);
            let block = frame.next_power_of_two().max(4096);
            format!("net_af_packet{n},iface={iface},qpairs={workers},framesz={frame},blocksz={block},framecnt=512")
        };
        DpdkConfig { inner: spec(0, inner, mtus.0), outer: spec(1, outer, mtus.1), ..DpdkConfig::default() }
    }
}

/// A DPDK device as the configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device<'a> {
    /// What the EAL calls the port: the virtual device's name
    /// (`net_memif0`) or the PCI address.
    pub name: &'a str,
    /// A virtual device (`--vdev`) rather than a PCI one (`-a`).
    pub virtual_device: bool,
    /// The Linux interface it runs on (`net_af_packet`'s `iface=`), which
    /// the gateway locks as it locks an AF_PACKET port.
    pub iface: Option<&'a str>,
}

/// Reads a device specification (`name[,key=value...]`).
pub fn device(spec: &str) -> Device<'_> {
    let name = spec.split(',').next().unwrap_or_default().trim();
    let iface = spec.split(',').skip(1).find_map(|kv| kv.trim().strip_prefix("iface="));
    Device { name, virtual_device: name.starts_with("net_"), iface }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_named_as_the_eal_names_them() {
        let d = device("net_memif0,role=server,socket=/run/px/in.sock");
        assert_eq!(d, Device { name: "net_memif0", virtual_device: true, iface: None });
        let d = device("net_af_packet1,iface=px-gwo,qpairs=2");
        assert_eq!(d, Device { name: "net_af_packet1", virtual_device: true, iface: Some("px-gwo") });
        let d = device("0000:03:00.0");
        assert_eq!(d, Device { name: "0000:03:00.0", virtual_device: false, iface: None });
        assert_eq!("dpdk".parse::<DatapathKind>(), Ok(DatapathKind::Dpdk));
        let c = DpdkConfig::on_interfaces("px-gwi", "px-gwo", 2, (9000, 1500));
        assert_eq!(c.inner, "net_af_packet0,iface=px-gwi,qpairs=2,framesz=9104,blocksz=16384,framecnt=512");
        assert_eq!(c.outer, "net_af_packet1,iface=px-gwo,qpairs=2,framesz=1600,blocksz=4096,framecnt=512");
        assert_eq!(device(&c.outer).iface, Some("px-gwo"));
        assert!("xdp".parse::<DatapathKind>().unwrap_err().contains("af_packet"));
    }
}
