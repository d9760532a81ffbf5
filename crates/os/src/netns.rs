//! Named network namespaces for tests, benchmarks and the lab (root only).
//!
//! [`NetNs`] creates a namespace with `ip netns add` and deletes it on drop, so a failing test
//! (a panic unwinds through the guard) still cleans up. Threads enter a namespace with `setns`,
//! which only affects the calling thread: the hirt dataplane can run in-process, one thread per
//! namespace, and every socket or TUN device it creates lives in that namespace.
//!
//! Loss and counting rules are nftables rules ([`NetNs::random_loss`], [`NetNs::count`]) with
//! named counters ([`NetNs::counter`]), in a table `inet hirt` of the namespace ([`crate::nft`]).
//!
//! The lab registers what it creates instead ([`create`], [`spawn`]): everything is removed by
//! [`Teardown`] on drop — on success, on error (unwinding) and on Ctrl-C/SIGTERM (the signal
//! handler runs the same cleanup, then exits). Lab names carry the lab's pid
//! (`hlab<pid>-<role>`), so two labs never collide and a lab killed with SIGKILL is cleaned up by
//! the next one ([`remove_stale`]).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

pub use crate::nft::Hook;

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
        delete_ns(&self.name);
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

    /// Random loss `p` of the UDP datagrams of port `port` entering either side (the server's
    /// destination port, the client's source port), counted in [`Underlay::LOSS_COUNTER`] of
    /// each namespace. Replaces an earlier loss of the underlay; the counters go on counting.
    pub fn lose(&self, port: u16, p: f64) -> io::Result<()> {
        for (ns, dir) in [(&self.server, "dport"), (&self.client, "sport")] {
            ns.random_loss_udp(dir, port, p, Self::LOSS_COUNTER)?;
        }
        Ok(())
    }

    /// The counter of [`Underlay::lose`].
    pub const LOSS_COUNTER: &'static str = "underlay_loss";

    /// Datagrams dropped so far by [`Underlay::lose`], both directions.
    pub fn lost(&self) -> io::Result<u64> {
        Ok(self.client.counter(Self::LOSS_COUNTER)? + self.server.counter(Self::LOSS_COUNTER)?)
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

/// Whether the calling process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether we may create namespaces (root and `ip` available). Tests skip themselves otherwise.
pub fn available() -> bool {
    is_root()
        && Command::new("ip")
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
}

/// Sends `sig` to process `pid`; returns whether it was delivered (signal 0: whether the
/// process exists).
fn kill(pid: i32, sig: i32) -> bool {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Deletes namespace `ns`, first killing the processes still inside (a child's own children
/// would keep it alive).
fn delete_ns(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<i32>() {
                if pid != std::process::id() as i32 {
                    kill(pid, libc::SIGKILL);
                }
            }
        }
    }
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(Stdio::null())
        .status();
}

// The lab's registry: namespaces and child processes to remove at teardown.

/// What must be undone.
#[derive(Default)]
struct Registry {
    namespaces: Vec<String>,
    children: Vec<Child>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    namespaces: Vec::new(),
    children: Vec::new(),
});
static HANDLER: Once = Once::new();

/// Prefix of every namespace a lab creates.
pub const PREFIX: &str = "hlab";

/// The namespace name for `role` in this process's lab.
pub fn ns_name(role: &str) -> String {
    format!("{PREFIX}{}-{role}", std::process::id())
}

/// Installs the Ctrl-C/SIGTERM handler that tears everything down (once per process).
pub fn install_signal_handler() {
    HANDLER.call_once(|| {
        let installed = crate::runtime::on_termination(|_| {
            eprintln!("\ninterrupted: tearing the lab down");
            cleanup_all();
            std::process::exit(130);
        });
        if let Err(e) = installed {
            eprintln!("cannot handle Ctrl-C: {e}");
        }
    });
}

/// Kills every registered child and deletes every registered namespace. Idempotent.
pub fn cleanup_all() {
    let mut reg = lock();
    for mut c in reg.children.drain(..) {
        stop_child(&mut c);
    }
    for ns in reg.namespaces.drain(..).rev() {
        delete_ns(&ns);
    }
}

fn stop_child(c: &mut Child) {
    if let Ok(Some(_)) = c.try_wait() {
        return;
    }
    kill(c.id() as i32, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// Deletes namespaces left behind by labs whose process no longer exists.
pub fn remove_stale() {
    for ns in list() {
        let Some(rest) = ns.strip_prefix(PREFIX) else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('-') else {
            continue;
        };
        if let Ok(pid) = pid.parse::<i32>() {
            if pid != std::process::id() as i32 && !kill(pid, 0) {
                delete_ns(&ns);
            }
        }
    }
}

/// Names of the existing namespaces (`ip netns list`).
pub fn list() -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Creates namespace `name` and registers it for teardown; loopback is brought up.
pub fn create(name: &str) -> anyhow::Result<()> {
    run("ip", &["netns", "add", name])?;
    lock().namespaces.push(name.to_string());
    ip(name, &["link", "set", "lo", "up"])?;
    Ok(())
}

fn lock() -> MutexGuard<'static, Registry> {
    match REGISTRY.lock() {
        Ok(r) => r,
        Err(p) => p.into_inner(),
    }
}

/// Runs a command; fails with its stderr when it fails.
pub fn run(cmd: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `ip -n <ns> <args>`.
pub fn ip(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut a = vec!["-n", ns];
    a.extend_from_slice(args);
    run("ip", &a)
}

/// `ip netns exec <ns> sysctl -qw <kv>`.
pub fn sysctl(ns: &str, kv: &str) -> anyhow::Result<()> {
    run("ip", &["netns", "exec", ns, "sysctl", "-qw", kv])
}

/// Starts `program args` inside namespace `ns` as a registered child (killed at teardown).
/// Output goes to `log` (a file path) so a failing child can be diagnosed.
pub fn spawn(
    ns: &str,
    program: &str,
    args: &[String],
    log: &std::path::Path,
) -> anyhow::Result<u32> {
    let f = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let f2 = f.try_clone()?;
    let child = Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .spawn()
        .with_context(|| format!("starting {program} in {ns}"))?;
    let pid = child.id();
    lock().children.push(child);
    Ok(pid)
}

/// Whether the registered child `pid` is still running.
pub fn child_running(pid: u32) -> bool {
    let mut reg = lock();
    reg.children
        .iter_mut()
        .any(|c| c.id() == pid && matches!(c.try_wait(), Ok(None)))
}

/// Stops the registered child `pid` now (SIGTERM, then SIGKILL).
pub fn stop(pid: u32) {
    let mut reg = lock();
    if let Some(i) = reg.children.iter().position(|c| c.id() == pid) {
        let mut c = reg.children.remove(i);
        drop(reg);
        stop_child(&mut c);
    }
}

/// Tears the lab down when dropped.
pub struct Teardown;

impl Drop for Teardown {
    fn drop(&mut self) {
        cleanup_all();
    }
}

/// Runs `f` on a new thread inside namespace `ns` and returns its result. Every socket `f` opens
/// belongs to that namespace.
pub fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> std::thread::JoinHandle<anyhow::Result<T>> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter_named(&ns).with_context(|| format!("entering {ns}"))?;
        f()
    })
}

/// Joins a thread started by [`in_ns`].
pub fn join<T>(h: std::thread::JoinHandle<anyhow::Result<T>>) -> anyhow::Result<T> {
    match h.join() {
        Ok(r) => r,
        Err(_) => bail!("a lab thread panicked"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_names_carry_the_pid() {
        let n = ns_name("cli");
        assert!(n.starts_with(PREFIX) && n.ends_with("-cli"), "{n}");
        assert!(n.contains(&std::process::id().to_string()));
    }

    /// Registered namespaces and children go away at teardown.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn teardown_removes_what_was_registered() {
        if !available() {
            eprintln!("skipped: needs root");
            return;
        }
        let name = unique_name("htd");
        create(&name).unwrap();
        sysctl(&name, "net.ipv6.conf.all.forwarding=1").unwrap();
        let log = std::env::temp_dir().join(format!("{name}.log"));
        let pid = spawn(&name, "sleep", &["30".into()], &log).unwrap();
        assert!(child_running(pid));
        assert!(list().contains(&name));
        let got = join(in_ns(&name, || {
            Ok(std::fs::read_link("/proc/thread-self/ns/net")?)
        }))
        .unwrap();
        assert!(got.to_string_lossy().starts_with("net:"), "{got:?}");
        drop(Teardown);
        assert!(!child_running(pid));
        assert!(!list().contains(&name));
        let _ = std::fs::remove_file(log);
    }
}
