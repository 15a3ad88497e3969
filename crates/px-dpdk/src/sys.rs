//! The shim's ABI (`csrc/px_dpdk.h`), declared once more for Rust; the
//! tests compare every size and offset with what the C compiler made of
//! the header ([`px_dpdk_abi`]). The shim is a shared object embedded in
//! the binary and loaded with dlopen by `load` (so px needs DPDK's
//! libraries only when it uses them); its functions are called through
//! a table of pointers, with same-named wrappers. In a build without DPDK the same
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
    pub ext_size: u32,
    pub ext_done: u32,
}

#[repr(C)]
#[derive(Debug, Default)]
pub struct px_ext {
    pub shinfo: [u64; 4],
    pub done: std::sync::atomic::AtomicU32,
    pub pad: u32,
}

/// Declares the shim's functions once: a table of pointers resolved with
/// `dlsym` from the loaded shim, and a same-named `unsafe fn` for each
/// that calls through it (callers use them as they would `extern` ones).
#[cfg(px_dpdk)]
macro_rules! shim {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        /// The shim's entry points, resolved once.
        struct Table {
            $($name: unsafe extern "C" fn($($ty),*) $(-> $ret)?,)*
        }

        impl Table {
            /// # Safety
            /// `handle` is a live `dlopen` handle of the shim.
            unsafe fn resolve(handle: *mut c_void) -> Result<Table, String> {
                Ok(Table {
                    $($name: {
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: a live handle and a NUL-terminated name.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("symbol {} missing: {}", stringify!($name), dlerror()));
                        }
                        // SAFETY: the shim defines this symbol with this
                        // signature (csrc/px_dpdk.h; checked by abi_matches).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) $(-> $ret)?>(p) }
                    },)*
                })
            }
        }

        $(
            /// Calls the shim's function of this name.
            ///
            /// # Safety
            /// As the C function's contract (csrc/px_dpdk.h); the shim must
            /// have been loaded (`load`), or this panics.
            pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller keeps the C function's contract.
                unsafe { (table().$name)($($arg),*) }
            }
        )*
    };
}

#[cfg(px_dpdk)]
shim! {
    fn px_dpdk_abi(out: *mut px_abi);
    fn px_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    fn px_eal_cleanup() -> c_int;
    fn px_errno() -> c_int;
    fn px_strerror(err: c_int) -> *const c_char;
    fn px_runtime_dir() -> *const c_char;
    fn px_version() -> *const c_char;
    fn px_thread_register() -> c_int;
    fn px_thread_unregister();
    fn px_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
    fn px_port_info(port: u16, out: *mut px_port_info) -> c_int;
    fn px_port_start(port: u16, conf: *const px_port_conf, step: *mut *const c_char) -> c_int;
    fn px_port_stop(port: u16);
    fn px_port_stats(port: u16, out: *mut px_port_stats) -> c_int;
    fn px_port_link_up(port: u16) -> c_int;
    fn px_pool_create(name: *const c_char, n: u32, cache: u32, data_room: u16, socket: c_int) -> *mut c_void;
    fn px_pool_free(pool: *mut c_void);
    fn px_pool_in_use(pool: *mut c_void) -> u32;
    fn px_alloc(pool: *mut c_void, m: *mut *mut c_void, data: *mut *mut u8, room: *mut u32, n: u16) -> c_int;
    fn px_free(m: *mut *mut c_void, n: u16);
    fn px_attach(pool: *mut c_void, data: *mut u8, len: u16, ext: *mut px_ext) -> *mut c_void;
    fn px_rx(port: u16, queue: u16, m: *mut *mut c_void, d: *mut px_rx_desc, n: u16, large: *mut c_void) -> u16;
    fn px_tx_prepare(d: *const px_tx_desc, m: *mut *mut c_void, n: u16);
    fn px_tx_burst(port: u16, queue: u16, m: *mut *mut c_void, n: u16) -> u16;
}

/// The shim built by build.rs (linked against the DPDK it found),
/// embedded so that px stays one file and needs DPDK's libraries only
/// when the DPDK datapath is asked for.
#[cfg(px_dpdk)]
static SHIM_SO: &[u8] = include_bytes!(env!("PX_DPDK_SHIM_SO"));

#[cfg(px_dpdk)]
static SHIM: std::sync::OnceLock<Result<Table, String>> = std::sync::OnceLock::new();

/// Loads the shim (and through it DPDK's libraries) once: `Err` holds
/// why it could not be (dlerror's text).
#[cfg(px_dpdk)]
pub fn load() -> Result<(), String> {
    SHIM.get_or_init(|| open_shim(SHIM_SO)).as_ref().map(|_| ()).map_err(String::clone)
}

#[cfg(px_dpdk)]
fn table() -> &'static Table {
    match SHIM.get() {
        Some(Ok(t)) => t,
        _ => panic!("a DPDK call before the shim was loaded (Eal::init loads it first)"),
    }
}

#[cfg(px_dpdk)]
fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlerror".into()
    } else {
        unsafe { std::ffi::CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Writes `so` to an anonymous file and opens it with dlopen
/// (RTLD_NOW | RTLD_LOCAL): every symbol of the shim and of the DPDK
/// libraries it needs is bound here, or the error says which is missing.
/// The handle is never closed (DPDK cannot be unloaded).
#[cfg(px_dpdk)]
fn open_shim(so: &[u8]) -> Result<Table, String> {
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a NUL-terminated name; the fd is owned by the File below.
    let fd = unsafe { libc::memfd_create(c"px-dpdk-shim".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(so).map_err(|e| format!("writing the shim to a memfd: {e}"))?;
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL");
    // SAFETY: a NUL-terminated path; the shim's constructors are DPDK's.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    drop(file);
    if handle.is_null() {
        return Err(dlerror());
    }
    // SAFETY: a live handle, kept open for the process's life.
    unsafe { Table::resolve(handle) }
}

/// Test access to the loader with other bytes than the built shim.
#[cfg(all(px_dpdk, test))]
pub fn open_shim_for_test(so: &[u8]) -> Result<(), String> {
    open_shim(so).map(|_| ())
}

#[cfg(not(px_dpdk))]
pub use stub::*;

/// What a build without DPDK links instead: every call fails or does
/// nothing. Only [`crate::Eal::init`] is ever called (and refuses first).
#[cfg(not(px_dpdk))]
#[allow(clippy::missing_safety_doc)]
mod stub {
    use super::*;

    pub fn load() -> Result<(), String> {
        Err(crate::NOT_BUILT.into())
    }

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
    pub unsafe fn px_attach(_: *mut c_void, _: *mut u8, _: u16, _: *mut px_ext) -> *mut c_void {
        std::ptr::null_mut()
    }
    pub unsafe fn px_rx(_: u16, _: u16, _: *mut *mut c_void, _: *mut px_rx_desc, _: u16, _: *mut c_void) -> u16 {
        0
    }
    pub unsafe fn px_tx_prepare(_: *const px_tx_desc, _: *mut *mut c_void, _: u16) {}
    pub unsafe fn px_tx_burst(_: u16, _: u16, _: *mut *mut c_void, _: u16) -> u16 {
        0
    }
}
