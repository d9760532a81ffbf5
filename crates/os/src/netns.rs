//! Named network namespaces for tests and benchmarks (root only).
//!
//! [`NetNs`] creates a namespace with `ip netns add` and deletes it on drop, so a failing test
//! (a panic unwinds through the guard) still cleans up. Threads enter a namespace with `setns`,
//! which only affects the calling thread: the hirt dataplane can run in-process, one thread per
//! namespace, and every socket or TUN device it creates lives in that namespace.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace that exists as long as this value does.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short name unique to this process and call: `<prefix><pid mod 1e5>x<n>` (names stay well
/// below the 15-byte interface name limit when used as veth prefixes too).
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 100_000)
}

impl NetNs {
    /// Creates the namespace `name` with loopback up.
    pub fn new(name: &str) -> io::Result<NetNs> {
        run_checked(Command::new("ip").args(["netns", "add", name]))?;
        let ns = NetNs {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <ns> <args>`, failing with stderr on a non-zero exit.
    pub fn ip(&self, args: &[&str]) -> io::Result<Output> {
        run_checked(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// Runs a command inside the namespace (`ip netns exec`), failing on a non-zero exit.
    pub fn exec(&self, args: &[&str]) -> io::Result<Output> {
        run_checked(
            Command::new("ip")
                .args(["netns", "exec", &self.name])
                .args(args),
        )
    }

    /// Runs a shell command line inside the namespace, failing on a non-zero exit.
    pub fn sh(&self, line: &str) -> io::Result<Output> {
        self.exec(&["sh", "-c", line])
    }

    /// Sets a sysctl inside the namespace (`key` like `net.ipv6.conf.all.forwarding`).
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        self.exec(&["sysctl", "-qw", &format!("{key}={value}")])
            .map(|_| ())
    }

    /// Switches off `dev`'s checksum and segmentation offloads ([`crate::ethtool`]).
    pub fn disable_offloads(&self, dev: &str) -> io::Result<()> {
        let dev = dev.to_string();
        self.spawn(move || crate::ethtool::disable_offloads(&dev))
            .join()
            .map_err(|_| io::Error::other("offload thread panicked"))?
    }

    /// Moves the calling thread into this namespace. Only that thread is affected.
    pub fn enter(&self) -> io::Result<()> {
        enter_named(&self.name)
    }

    /// Spawns a thread that enters the namespace and runs `f` there.
    pub fn spawn<T, F>(&self, f: F) -> std::thread::JoinHandle<io::Result<T>>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let name = self.name.clone();
        std::thread::spawn(move || {
            enter_named(&name)?;
            f()
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Moves the calling thread into the named namespace (`/var/run/netns/<name>`).
pub fn enter_named(name: &str) -> io::Result<()> {
    let f = File::open(format!("/var/run/netns/{name}"))?;
    // SAFETY: setns on a descriptor we hold open; it only changes this thread's namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Connects two namespaces with a veth pair `a_if` (in `a`) <-> `b_if` (in `b`), both up.
pub fn veth(a: &NetNs, a_if: &str, b: &NetNs, b_if: &str) -> io::Result<()> {
    run_checked(Command::new("ip").args([
        "link", "add", a_if, "netns", &a.name, "type", "veth", "peer", "name", b_if, "netns",
        &b.name,
    ]))?;
    a.ip(&["link", "set", a_if, "up"])?;
    b.ip(&["link", "set", b_if, "up"])?;
    Ok(())
}

/// The underlay of a UDP tunnel in tests and benches: a client and a server namespace joined
/// by a veth, the client at `NET.2/24`, the server at `NET.1/24`.
#[derive(Debug)]
pub struct Underlay {
    /// The client's namespace.
    pub client: NetNs,
    /// The server's namespace.
    pub server: NetNs,
    /// The client's end of the veth.
    pub client_if: String,
    /// The server's end of the veth.
    pub server_if: String,
}

impl Underlay {
    /// Makes the namespaces `{prefix}c` / `{prefix}s`, the veth and the addresses in `net`
    /// (three octets, e.g. `192.168.77`).
    pub fn new(prefix: &str, net: &str) -> io::Result<Underlay> {
        let client = NetNs::new(&format!("{prefix}c"))?;
        let server = NetNs::new(&format!("{prefix}s"))?;
        let (client_if, server_if) = (format!("{prefix}vc"), format!("{prefix}vs"));
        veth(&client, &client_if, &server, &server_if)?;
        client.ip(&["addr", "add", &format!("{net}.2/24"), "dev", &client_if])?;
        server.ip(&["addr", "add", &format!("{net}.1/24"), "dev", &server_if])?;
        Ok(Underlay {
            client,
            server,
            client_if,
            server_if,
        })
    }

    /// Makes the veth behave like a wire, one frame per packet (`gso_max_segs 1`). A veth
    /// carries a UDP GSO run of the tunnel as one packet, which a loss rule would drop whole
    /// and nft would count once; this way the kernel cuts the runs in software before the veth.
    pub fn like_a_wire(&self) -> io::Result<()> {
        for (ns, dev) in [
            (&self.client, &self.client_if),
            (&self.server, &self.server_if),
        ] {
            ns.ip(&["link", "set", "dev", dev, "gso_max_segs", "1"])?;
        }
        Ok(())
    }

    /// Random loss `p` of the UDP datagrams of port `port` entering either side (iptables
    /// `statistic`: the server's destination port, the client's source port).
    pub fn lose(&self, port: u16, p: f64) -> io::Result<()> {
        let port = port.to_string();
        let p = p.to_string();
        for (ns, dir) in [(&self.server, "--dport"), (&self.client, "--sport")] {
            ns.exec(&[
                "iptables",
                "-A",
                "INPUT",
                "-p",
                "udp",
                dir,
                &port,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ])?;
        }
        Ok(())
    }
}

/// Runs a command; a non-zero exit becomes an error carrying the command and its stderr.
pub fn run_checked(cmd: &mut Command) -> io::Result<Output> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

/// Whether we may create namespaces (root and `ip` available). Tests skip themselves otherwise.
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("ip")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
