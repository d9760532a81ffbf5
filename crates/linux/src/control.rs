//! The control socket of a running instance (a unix stream socket, one line per request, one
//! JSON line per answer):
//!
//! - `status` -> the counters ([`crate::metrics::Snapshot`]) plus the current controller;
//! - `set controller <CTRL>` -> switch the encoders' repair-rate controller live (`ours`, `hirt`,
//!   `rquic`, `fixed:step=10` for a fixed ratio of 1 repair per 10 sources, `none`); workers
//!   pick the change up within one loop iteration;
//! - `set path-policy <KIND>` (`failover`, `lowest-delay`, `greedy`, `random`, `bond`) and
//!   `set repair-path <same|diverse>` -> the path policy of a multi-path tunnel, live;
//! - anything else -> `{"error": ...}`.
//!
//! `hirt status --control PATH` is the client.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hirt_core::path::{PolicyKind, RepairPath};

use crate::metrics::Metrics;

/// A live change of the path policy (`set path-policy`, `set repair-path`): what was asked
/// last of each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathChange {
    /// The policy kind.
    pub kind: Option<PolicyKind>,
    /// The repair path.
    pub repair: Option<RepairPath>,
}

/// Checks a `set controller` argument before it is accepted.
pub type Validator = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// State shared between the control thread and the workers.
#[derive(Debug)]
pub struct Control {
    /// Counters.
    pub metrics: Arc<Metrics>,
    generation: AtomicU64,
    controller: Mutex<String>,
    path_generation: AtomicU64,
    path_change: Mutex<PathChange>,
}

impl Control {
    /// Shared control state with the initial controller string.
    pub fn new(metrics: Arc<Metrics>, controller: &str) -> Arc<Control> {
        Arc::new(Control {
            metrics,
            generation: AtomicU64::new(0),
            controller: Mutex::new(controller.into()),
            path_generation: AtomicU64::new(0),
            path_change: Mutex::new(PathChange::default()),
        })
    }

    /// Bumped on every path policy change.
    #[inline]
    pub fn path_generation(&self) -> u64 {
        self.path_generation.load(Ordering::Acquire)
    }

    /// The path policy changes asked for so far.
    pub fn path_change(&self) -> PathChange {
        self.path_change.lock().map(|g| *g).unwrap_or_default()
    }

    /// Asks the workers for another path policy kind and/or repair path.
    pub fn set_path_change(&self, c: PathChange) {
        if let Ok(mut g) = self.path_change.lock() {
            g.kind = c.kind.or(g.kind);
            g.repair = c.repair.or(g.repair);
        }
        self.path_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Bumped on every accepted change; workers compare it with the last one they applied.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current controller string.
    pub fn controller(&self) -> String {
        self.controller
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default()
    }

    /// Sets a new controller after validating it with `validate`.
    pub fn set_controller(
        &self,
        mode: &str,
        validate: impl Fn(&str) -> Result<(), String>,
    ) -> Result<(), String> {
        validate(mode)?;
        if let Ok(mut g) = self.controller.lock() {
            *g = mode.to_string();
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// Removes the socket file when dropped.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers one request line.
pub fn answer(
    ctl: &Control,
    line: &str,
    validate: &(dyn Fn(&str) -> Result<(), String> + Send + Sync),
) -> String {
    let line = line.trim();
    if line == "status" {
        let snap = ctl.metrics.snapshot();
        serde_json::json!({"status": snap, "controller": ctl.controller()}).to_string()
    } else if let Some(mode) = line.strip_prefix("set controller ") {
        match ctl.set_controller(mode.trim(), validate) {
            Ok(()) => serde_json::json!({"ok": true, "controller": ctl.controller()}).to_string(),
            Err(e) => serde_json::json!({"error": e}).to_string(),
        }
    } else if let Some(kind) = line.strip_prefix("set path-policy ") {
        match kind.trim().parse::<PolicyKind>() {
            Ok(k) => {
                ctl.set_path_change(PathChange {
                    kind: Some(k),
                    repair: None,
                });
                serde_json::json!({"ok": true, "path-policy": k.as_str()}).to_string()
            }
            Err(e) => serde_json::json!({"error": e.to_string()}).to_string(),
        }
    } else if let Some(r) = line.strip_prefix("set repair-path ") {
        match r.trim().parse::<RepairPath>() {
            Ok(r) => {
                ctl.set_path_change(PathChange {
                    kind: None,
                    repair: Some(r),
                });
                serde_json::json!({"ok": true, "repair-path": r.as_str()}).to_string()
            }
            Err(e) => serde_json::json!({"error": e.to_string()}).to_string(),
        }
    } else {
        serde_json::json!({"error": format!("unknown request `{line}`")}).to_string()
    }
}

/// Listens on `path` (replacing a stale socket file) from a background thread.
pub fn serve(
    path: &Path,
    ctl: Arc<Control>,
    validate: Validator,
) -> std::io::Result<ControlServer> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    // `set controller` changes the dataplane: only the owner (root, or the service user) may
    // connect, whatever the umask.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::thread::Builder::new()
        .name("hirt-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut w = match conn.try_clone() {
                    Ok(w) => w,
                    Err(_) => continue,
                };
                for line in BufReader::new(conn).lines() {
                    let Ok(line) = line else { break };
                    let reply = answer(&ctl, &line, &*validate);
                    if writeln!(w, "{reply}").is_err() {
                        break;
                    }
                }
            }
        })?;
    Ok(ControlServer {
        path: path.to_path_buf(),
    })
}

/// Sends one request and returns the answer line.
pub fn request(path: &Path, line: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    writeln!(s, "{line}")?;
    let mut r = BufReader::new(s);
    let mut out = String::new();
    r.read_line(&mut out)?;
    Ok(out.trim_end().to_string())
}

/// Starts what operators talk to: the control socket at `path` (live controller changes are
/// validated as `ControllerConfig` strings) and, when asked, the Prometheus endpoint. A control
/// socket that cannot be bound is logged and skipped (the tunnel still runs); a metrics address
/// that cannot be bound is an error, since the operator asked for it explicitly.
pub fn start_operations(
    path: &Path,
    ctl: &Arc<Control>,
    metrics_addr: Option<std::net::SocketAddr>,
    metrics: &Arc<Metrics>,
) -> std::io::Result<Option<ControlServer>> {
    let validate: Validator = Arc::new(|s: &str| {
        s.parse::<hirt_core::ControllerConfig>()
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let server = match serve(path, ctl.clone(), validate) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("control socket {path:?}: {e}");
            None
        }
    };
    if let Some(addr) = metrics_addr {
        crate::metrics::serve_prometheus(addr, metrics.clone())?;
    }
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_live_change_over_the_socket() {
        let m = Metrics::new(1, "test");
        crate::metrics::add(&m.stream(0).recovered, 5);
        let ctl = Control::new(m, "hirt");
        let dir = std::env::temp_dir().join(format!("hirt-ctl-{}.sock", std::process::id()));
        let validate: Validator = Arc::new(|s: &str| {
            if s == "bad" {
                Err("nope".into())
            } else {
                Ok(())
            }
        });
        let _srv = serve(&dir, ctl.clone(), validate).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only the owner may connect");
        let st = request(&dir, "status").unwrap();
        let v: serde_json::Value = serde_json::from_str(&st).unwrap();
        assert_eq!(v["status"]["streams"][0]["recovered"], 5);
        assert_eq!(v["controller"], "hirt");
        let g0 = ctl.generation();
        let r = request(&dir, "set controller fixed:w=8,step=2").unwrap();
        assert!(r.contains("\"ok\":true"), "{r}");
        assert_eq!(ctl.generation(), g0 + 1);
        assert_eq!(ctl.controller(), "fixed:w=8,step=2");
        let r = request(&dir, "set controller bad").unwrap();
        assert!(r.contains("nope"));
        assert_eq!(ctl.generation(), g0 + 1);
        assert!(request(&dir, "frobnicate").unwrap().contains("error"));
        let p0 = ctl.path_generation();
        let r = request(&dir, "set path-policy lowest-delay").unwrap();
        assert!(r.contains("\"ok\":true"), "{r}");
        let r = request(&dir, "set repair-path diverse").unwrap();
        assert!(r.contains("\"ok\":true"), "{r}");
        assert_eq!(ctl.path_generation(), p0 + 2);
        assert_eq!(
            ctl.path_change(),
            PathChange {
                kind: Some(PolicyKind::LowestDelay),
                repair: Some(RepairPath::Diverse)
            }
        );
        let r = request(&dir, "set path-policy fastest").unwrap();
        assert!(r.contains("error") && r.contains("unknown"), "{r}");
        assert_eq!(
            ctl.path_generation(),
            p0 + 2,
            "a refused change changes nothing"
        );
    }
}
