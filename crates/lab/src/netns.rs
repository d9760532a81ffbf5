//! Network namespaces, child processes and their teardown.
//!
//! Everything the lab creates is registered here and removed by [`Teardown`] on drop — on success,
//! on error (unwinding) and on Ctrl-C/SIGTERM (the signal handler runs the same cleanup, then
//! exits). Names carry the lab's pid (`hlab<pid>-<role>`), so two labs never collide and a lab
//! killed with SIGKILL is cleaned up by the next one ([`remove_stale`]).

use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::sys;

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
        let _ = ctrlc::set_handler(|| {
            eprintln!("\ninterrupted: tearing the lab down");
            cleanup_all();
            std::process::exit(130);
        });
    });
}

/// Kills every registered child and deletes every registered namespace. Idempotent.
pub fn cleanup_all() {
    let mut reg = match REGISTRY.lock() {
        Ok(r) => r,
        Err(p) => p.into_inner(),
    };
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
    sys::signal(c.id() as i32, libc::SIGTERM);
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

fn delete_ns(ns: &str) {
    // Processes still inside (a child's own children) would keep it alive: kill them first.
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<i32>() {
                if pid != std::process::id() as i32 {
                    sys::signal(pid, libc::SIGKILL);
                }
            }
        }
    }
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(Stdio::null())
        .status();
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
            if pid != std::process::id() as i32 && !sys::pid_alive(pid) {
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

fn lock() -> std::sync::MutexGuard<'static, Registry> {
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
    let f = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
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
        sys::enter_netns(&ns).with_context(|| format!("entering {ns}"))?;
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
