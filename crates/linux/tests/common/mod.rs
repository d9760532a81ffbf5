//! Helpers shared by the end-to-end tests.

use std::net::UdpSocket;

/// A big receive buffer (root: beyond rmem_max), so a receiver thread starved of CPU on a busy
/// machine does not drop datagrams that the tunnel delivered.
pub fn big_rcvbuf(sock: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let sz: libc::c_int = 16 << 20;
    // SAFETY: setsockopt with a c_int on a socket we own.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&sz as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
    }
}
