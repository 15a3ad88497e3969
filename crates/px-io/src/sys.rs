//! The libc calls the socket modules share, each wrapped once with its
//! safety argument.

use std::io;
use std::mem::size_of;
use std::os::fd::AsRawFd;

/// `setsockopt` for plain-old-data option values.
pub(crate) fn setsockopt<T: Copy>(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` points to a live, initialised `T` of the given size; every
    // caller passes the type the option expects (int, packet_mreq,
    // tpacket_req).
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, name, (v as *const T).cast(), size_of::<T>() as libc::socklen_t)
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}
