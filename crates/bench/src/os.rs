//! The OS calls of the namespace benches: clocks, CPU pinning, timer slack, socket buffers,
//! and thread CPU time by thread name.
#![allow(unsafe_code)]

use std::os::fd::RawFd;

/// `clock` in ns.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_REALTIME in ns: the clock of the kernel's receive timestamps (`SO_TIMESTAMPNS`),
/// shared by every namespace.
pub fn real_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread in ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Pins the calling thread to `cpu` (best effort).
pub fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A 1 ns timer slack for the calling thread, so its sleeps end close to the due time.
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// Sleeps until CLOCK_MONOTONIC reaches `due` ns.
pub fn sleep_until_mono(due: u64) {
    let ts = libc::timespec {
        tv_sec: (due / 1_000_000_000) as libc::time_t,
        tv_nsec: (due % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: clock_nanosleep reads the timespec we pass; no remainder with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// Sets the receive buffer of socket `fd` to `bytes`, above `rmem_max` (`SO_RCVBUFFORCE`,
/// root; best effort).
pub fn force_receive_buffer(fd: RawFd, bytes: libc::c_int) {
    // SAFETY: setsockopt with a c_int on a socket the caller holds.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Clock ticks per second of `/proc/*/stat` times.
pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// Sends SIGTERM to process `pid` (a child the caller started); returns whether it was sent.
pub fn terminate(pid: u32) -> bool {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) == 0 }
}
