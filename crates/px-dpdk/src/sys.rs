//! The shim's ABI (`csrc/px_dpdk.h`), declared once more for Rust; the
//! tests compare every size and offset with what the C compiler made of
//! the header ([`px_dpdk_abi`]). In a build without DPDK the same
//! functions exist as stubs that fail, so that everything above compiles
//! and type-checks the same way in both builds; [`crate::Eal::init`] is
//! the first call and refuses, so no other stub is ever reached.

#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct px_rx_desc {
    pub data: *mut u8,
    pub len: u32,
    pub flags: u32,
    pub gso_size: u16,
    pub pad: [u16; 3],
}

impl Default for px_rx_desc {
    fn default() -> Self {
        px_rx_desc { data: std::ptr::null_mut(), len: 0, flags: 0, gso_size: 0, pad: [0; 3] }
    }
}

pub const PX_RX_L4_CSUM_GOOD: u32 = 0x1;
pub const PX_RX_L4_CSUM_BAD: u32 = 0x2;
pub const PX_RX_IP_CSUM_BAD: u32 = 0x4;
pub const PX_RX_LRO: u32 = 0x8;
pub const PX_RX_UNUSABLE: u32 = 0x10;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct px_tx_desc {
    pub m: *mut c_void,
    pub start: u32,
    pub len: u32,
    pub flags: u32,
    pub l2_len: u16,
    pub l3_len: u16,
    pub l4_len: u16,
    pub tso_segsz: u16,
    pub pad: u32,
}

impl Default for px_tx_desc {
    fn default() -> Self {
        px_tx_desc {
            m: std::ptr::null_mut(),
            start: 0,
            len: 0,
            flags: 0,
            l2_len: 0,
            l3_len: 0,
            l4_len: 0,
            tso_segsz: 0,
            pad: 0,
        }
    }
}

pub const PX_TX_IPV4: u32 = 0x1;
pub const PX_TX_IPV6: u32 = 0x2;
pub const PX_TX_IP_CSUM: u32 = 0x4;
pub const PX_TX_TCP_CSUM: u32 = 0x8;
pub const PX_TX_UDP_CSUM: u32 = 0x10;
pub const PX_TX_TCP_SEG: u32 = 0x20;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct px_port_info {
    pub driver: [u8; 32],
    pub port_id: u16,
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    pub mtu: u16,
    pub max_rx_pktlen: u32,
    pub socket: i32,
    pub capa: u32,
    pub mac: [u8; 6],
    pub pad: u16,
}

pub const PX_CAPA_TX_IP_CSUM: u32 = 0x1;
pub const PX_CAPA_TX_TCP_CSUM: u32 = 0x2;
pub const PX_CAPA_TX_UDP_CSUM: u32 = 0x4;
pub const PX_CAPA_TX_TSO: u32 = 0x8;
pub const PX_CAPA_RX_CSUM: u32 = 0x10;
pub const PX_CAPA_RX_LRO: u32 = 0x20;
pub const PX_CAPA_RSS: u32 = 0x40;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct px_port_conf {
    pub queues: u16,
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub mtu: u16,
    pub offloads: u32,
    pub promiscuous: u32,
    pub pool: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct px_port_stats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct px_abi {
    pub rx_desc_size: u32,
    pub rx_desc_len: u32,
    pub rx_desc_flags: u32,
    pub rx_desc_gso: u32,
    pub tx_desc_size: u32,
    pub tx_desc_start: u32,
    pub tx_desc_flags: u32,
    pub tx_desc_tso: u32,
    pub info_size: u32,
    pub info_capa: u32,
    pub info_mac: u32,
    pub conf_size: u32,
    pub conf_pool: u32,
    pub stats_size: u32,
}

#[cfg(px_dpdk)]
unsafe extern "C" {
    pub fn px_dpdk_abi(out: *mut px_abi);
    pub fn px_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    pub fn px_eal_cleanup() -> c_int;
    pub fn px_errno() -> c_int;
    pub fn px_strerror(err: c_int) -> *const c_char;
    pub fn px_runtime_dir() -> *const c_char;
    pub fn px_version() -> *const c_char;
    pub fn px_thread_register() -> c_int;
    pub fn px_thread_unregister();
    pub fn px_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
    pub fn px_port_info(port: u16, out: *mut px_port_info) -> c_int;
    pub fn px_port_start(port: u16, conf: *const px_port_conf, step: *mut *const c_char) -> c_int;
    pub fn px_port_stop(port: u16);
    pub fn px_port_stats(port: u16, out: *mut px_port_stats) -> c_int;
    pub fn px_port_link_up(port: u16) -> c_int;
    pub fn px_pool_create(name: *const c_char, n: u32, cache: u32, data_room: u16, socket: c_int) -> *mut c_void;
    pub fn px_pool_free(pool: *mut c_void);
    pub fn px_pool_in_use(pool: *mut c_void) -> u32;
    pub fn px_alloc(pool: *mut c_void, m: *mut *mut c_void, data: *mut *mut u8, room: *mut u32, n: u16) -> c_int;
    pub fn px_free(m: *mut *mut c_void, n: u16);
    pub fn px_rx(port: u16, queue: u16, m: *mut *mut c_void, d: *mut px_rx_desc, n: u16, large: *mut c_void) -> u16;
    pub fn px_tx_prepare(d: *const px_tx_desc, m: *mut *mut c_void, n: u16);
    pub fn px_tx_burst(port: u16, queue: u16, m: *mut *mut c_void, n: u16) -> u16;
}

#[cfg(not(px_dpdk))]
pub use stub::*;

/// What a build without DPDK links instead: every call fails or does
/// nothing. Only [`crate::Eal::init`] is ever called (and refuses first).
#[cfg(not(px_dpdk))]
#[allow(clippy::missing_safety_doc)]
mod stub {
    use super::*;

    pub unsafe fn px_dpdk_abi(_: *mut px_abi) {}
    pub unsafe fn px_eal_init(_: c_int, _: *mut *mut c_char) -> c_int {
        -1
    }
    pub unsafe fn px_eal_cleanup() -> c_int {
        -1
    }
    pub unsafe fn px_errno() -> c_int {
        libc::ENOSYS
    }
    pub unsafe fn px_strerror(_: c_int) -> *const c_char {
        c"built without DPDK".as_ptr()
    }
    pub unsafe fn px_runtime_dir() -> *const c_char {
        std::ptr::null()
    }
    pub unsafe fn px_version() -> *const c_char {
        c"none".as_ptr()
    }
    pub unsafe fn px_thread_register() -> c_int {
        -1
    }
    pub unsafe fn px_thread_unregister() {}
    pub unsafe fn px_port_by_name(_: *const c_char, _: *mut u16) -> c_int {
        -libc::ENODEV
    }
    pub unsafe fn px_port_info(_: u16, _: *mut px_port_info) -> c_int {
        -libc::ENODEV
    }
    pub unsafe fn px_port_start(_: u16, _: *const px_port_conf, _: *mut *const c_char) -> c_int {
        -libc::ENODEV
    }
    pub unsafe fn px_port_stop(_: u16) {}
    pub unsafe fn px_port_stats(_: u16, _: *mut px_port_stats) -> c_int {
        -libc::ENODEV
    }
    pub unsafe fn px_port_link_up(_: u16) -> c_int {
        -1
    }
    pub unsafe fn px_pool_create(_: *const c_char, _: u32, _: u32, _: u16, _: c_int) -> *mut c_void {
        std::ptr::null_mut()
    }
    pub unsafe fn px_pool_free(_: *mut c_void) {}
    pub unsafe fn px_pool_in_use(_: *mut c_void) -> u32 {
        0
    }
    pub unsafe fn px_alloc(_: *mut c_void, _: *mut *mut c_void, _: *mut *mut u8, _: *mut u32, _: u16) -> c_int {
        -1
    }
    pub unsafe fn px_free(_: *mut *mut c_void, _: u16) {}
    pub unsafe fn px_rx(_: u16, _: u16, _: *mut *mut c_void, _: *mut px_rx_desc, _: u16, _: *mut c_void) -> u16 {
        0
    }
    pub unsafe fn px_tx_prepare(_: *const px_tx_desc, _: *mut *mut c_void, _: u16) {}
    pub unsafe fn px_tx_burst(_: u16, _: u16, _: *mut *mut c_void, _: u16) -> u16 {
        0
    }
}
