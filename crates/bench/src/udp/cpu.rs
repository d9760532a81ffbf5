//! CPU time of this process's threads, found by name (the hirt workers are `hirt-udp...`).

/// CPU seconds used so far by this process's threads whose name starts with `prefix`.
pub fn threads_cpu(prefix: &str) -> f64 {
    let hz = crate::os::clock_ticks_per_second();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end().starts_with(prefix))
        })
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let (u, s): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
            Some((u + s) / hz)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The CPU time of threads found by name: a thread that burned 60 ms of its own CPU time
    /// (its thread clock) is counted with at least 50 ms (clock ticks are 10 ms), and a name
    /// that matches nothing counts 0.
    #[test]
    fn thread_cpu_time_by_name() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("bench-cpu-probe".into())
            .spawn(move || {
                let mut x = 0u64;
                while hirt_linux::engine::load::thread_cpu_time() < Duration::from_millis(60) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                done_tx.send(()).unwrap();
                let _ = rx.recv();
            })
            .unwrap();
        done_rx.recv().unwrap();
        let cpu = threads_cpu("bench-cpu-prob");
        tx.send(()).unwrap();
        h.join().unwrap();
        assert!(cpu >= 0.05, "{cpu}");
        assert_eq!(threads_cpu("no-such-thread-name"), 0.0);
    }
}
