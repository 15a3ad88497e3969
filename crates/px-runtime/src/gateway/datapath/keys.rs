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
        // Rings of about 8 MiB each way, as the AF_PACKET datapath's socket
        // buffers: a worker the scheduler holds off for a few milliseconds
        // (a busy two-core host) finds the frames still there.
        let spec = |n: usize, iface: &str, mtu: u16| {
            let (frame, block) = ring_frame(mtu);
            let count = ((RING_BYTES / frame) / (block / frame)).max(1) * (block / frame);
            format!("net_af_packet{n},iface={iface},qpairs={workers},framesz={frame},blocksz={block},framecnt={count}")
        };
        DpdkConfig { inner: spec(0, inner, mtus.0), outer: spec(1, outer, mtus.1), ..DpdkConfig::default() }
    }
}

/// The size of each ring of a `net_af_packet` device made from an
/// interface name.
const RING_BYTES: u32 = 8 << 20;

/// Where a TPACKET_V2 ring frame's data may start: the header, aligned
/// (the driver checks that the rest, `framesz` less this, fits one mbuf).
pub const TPACKET2_DATA: u32 = 32;

/// The frame and block sizes of DPDK's AF_PACKET driver's rings for an
/// interface of `mtu`: a frame holds the tpacket header, an address and
/// the whole frame (Ethernet and two VLAN tags); the driver finds frame
/// `i` at `i * framesz`, so blocks (whole pages) must hold frames without
/// a gap: a power of two up to a page, one frame per block beyond.
pub fn ring_frame(mtu: u16) -> (u32, u32) {
    let least = u32::from(mtu) + 22 + 80;
    if least <= 4096 {
        let frame = least.next_power_of_two().max(2048);
        (frame, 4096)
    } else {
        let frame = least.next_multiple_of(4096);
        (frame, frame)
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
    /// The ring frame size of a `net_af_packet` device (`framesz=`): its
    /// pool's buffers must hold a ring frame's data.
    pub ring_frame: Option<u32>,
}

/// Reads a device specification (`name[,key=value...]`).
pub fn device(spec: &str) -> Device<'_> {
    let name = spec.split(',').next().unwrap_or_default().trim();
    let iface = spec.split(',').skip(1).find_map(|kv| kv.trim().strip_prefix("iface="));
    let ring_frame = spec.split(',').skip(1).find_map(|kv| kv.trim().strip_prefix("framesz=")?.parse().ok());
    Device { name, virtual_device: name.starts_with("net_"), iface, ring_frame }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_named_as_the_eal_names_them() {
        let d = device("net_memif0,role=server,socket=/run/px/in.sock");
        assert_eq!(d, Device { name: "net_memif0", virtual_device: true, iface: None, ring_frame: None });
        let d = device("net_af_packet1,iface=px-gwo,qpairs=2,framesz=2048");
        assert_eq!(
            d,
            Device { name: "net_af_packet1", virtual_device: true, iface: Some("px-gwo"), ring_frame: Some(2048) }
        );
        let d = device("0000:03:00.0");
        assert_eq!(d, Device { name: "0000:03:00.0", virtual_device: false, iface: None, ring_frame: None });
        assert_eq!("dpdk".parse::<DatapathKind>(), Ok(DatapathKind::Dpdk));
        let c = DpdkConfig::on_interfaces("px-gwi", "px-gwo", 2, (9000, 1500));
        assert_eq!(c.inner, "net_af_packet0,iface=px-gwi,qpairs=2,framesz=12288,blocksz=12288,framecnt=682");
        assert_eq!(c.outer, "net_af_packet1,iface=px-gwo,qpairs=2,framesz=2048,blocksz=4096,framecnt=4096");
        assert_eq!(device(&c.outer).iface, Some("px-gwo"));
        assert_eq!(device(&c.inner).ring_frame, Some(12288));
        assert!("xdp".parse::<DatapathKind>().unwrap_err().contains("af_packet"));
    }

    /// The driver finds ring frame `i` at `i * framesz` (no gap between
    /// blocks), and a whole frame of the MTU fits behind the headers.
    #[test]
    fn ring_frames_leave_no_gap_and_hold_a_frame_of_the_mtu() {
        for mtu in [68u16, 576, 1280, 1500, 1600, 4000, 4074, 4075, 9000, 9216, 16000, 65535] {
            let (frame, block) = ring_frame(mtu);
            assert_eq!(block % 4096, 0, "{mtu}: block {block}");
            assert_eq!(block % frame, 0, "{mtu}: frame {frame} block {block}");
            assert_eq!(frame % 16, 0, "{mtu}: TPACKET_ALIGNMENT");
            // tpacket2 header, sockaddr_ll, the mac offset's alignment.
            assert!(frame >= u32::from(mtu) + 22 + 80, "{mtu}: frame {frame}");
        }
    }
}
