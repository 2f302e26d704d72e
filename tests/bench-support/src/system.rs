//! What `/proc` says about this process, its threads, other processes and the whole machine
//! (CPU seconds, resident memory), and where scratch data may live: on a real disk, never on a
//! tmpfs, where fsync costs nothing.

use crate::BenchResult;
use std::io;
use std::path::{Path, PathBuf};

/// Clock ticks per second of `/proc` CPU times. USER_HZ is 100 on every Linux build this runs
/// on; reading it would need libc's `sysconf`, which the workspace's `unsafe_code = forbid`
/// rules out.
const USER_HZ: f64 = 100.0;

/// The command name and CPU seconds (user + system) of a `/proc/.../stat` line.
pub fn parse_stat(stat: &str) -> Option<(String, f64)> {
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is index 0, utime is 11, stime is 12.
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((comm, (user + system) / USER_HZ))
}

fn stat_seconds(path: &Path) -> io::Result<f64> {
    let stat = std::fs::read_to_string(path)?;
    parse_stat(&stat).map(|(_, s)| s).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unparsable {}", path.display()),
        )
    })
}

/// CPU seconds (user + system, all threads) process `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    stat_seconds(Path::new(&format!("/proc/{pid}/stat")))
}

/// CPU seconds this process (every thread) has used so far, NaN if `/proc` cannot say.
pub fn own_cpu_seconds() -> f64 {
    stat_seconds(Path::new("/proc/self/stat")).unwrap_or(f64::NAN)
}

/// CPU seconds used so far by the threads of this process whose name starts with `prefix`
/// (tokio runtimes and named threads), NaN if none has that name.
pub fn threads_cpu_seconds(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    let mut found = None;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let Some((comm, seconds)) = parse_stat(&stat) {
            if comm.starts_with(prefix) {
                *found.get_or_insert(0.0) += seconds;
            }
        }
    }
    found.unwrap_or(f64::NAN)
}

/// (busy, all) CPU seconds of the whole machine so far, from the first line of `/proc/stat`.
pub fn machine_cpu() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (f64::NAN, f64::NAN);
    };
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8) // user nice system idle iowait irq softirq steal (guest is inside user)
        .filter_map(|f| f.parse().ok())
        .collect();
    let all: f64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    ((all - idle) / USER_HZ, all / USER_HZ)
}

/// `VmRSS` and `VmHWM` (peak resident set) of process `pid`, in bytes.
pub fn memory(pid: u32) -> io::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> io::Result<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("no {name} in /proc/{pid}/status"),
                )
            })
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// `VmRSS` of this process, in bytes.
pub fn resident_bytes() -> io::Result<u64> {
    memory(std::process::id()).map(|(rss, _)| rss)
}

/// `"<fstype> <device>"` of the mount holding `path`, from `/proc/mounts`.
pub fn filesystem_of(path: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let device = fields.next()?;
            let mount_point = fields.next()?;
            let fstype = fields.next()?;
            path.starts_with(mount_point)
                .then(|| (mount_point.len(), format!("{fstype} {device}")))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
}

/// The scratch directory and its filesystem: `SLUICE_BENCH_DIR` if set, else the system temp
/// dir, else `bench-tmp` in the cargo target directory, the first one not on a tmpfs.
pub fn scratch_base() -> BenchResult<(PathBuf, String)> {
    let candidates: Vec<PathBuf> = match std::env::var_os("SLUICE_BENCH_DIR") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
                || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
                PathBuf::from,
            );
            vec![std::env::temp_dir(), target.join("bench-tmp")]
        }
    };
    for dir in candidates {
        std::fs::create_dir_all(&dir)?;
        let dir = dir.canonicalize()?;
        let fs = filesystem_of(&dir).unwrap_or_else(|| "unknown".into());
        if !fs.starts_with("tmpfs") && !fs.starts_with("ramfs") {
            return Ok((dir, fs));
        }
        eprintln!("{} is on {fs}; looking further", dir.display());
    }
    Err("no scratch directory on a real disk; set SLUICE_BENCH_DIR".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_readable() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).is_ok_and(|s| s >= 0.0));
        let (rss, hwm) = memory(pid).expect("status");
        assert!(rss > 0 && hwm >= rss);
        assert!(own_cpu_seconds() >= 0.0);
        assert!(threads_cpu_seconds("no-such-thread-name").is_nan());
        let (busy, all) = machine_cpu();
        assert!(all >= busy && busy >= 0.0);
    }

    #[test]
    fn stat_lines_with_odd_command_names() {
        let line = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0";
        assert_eq!(parse_stat(line), Some(("a (b) c".to_owned(), 3.0)));
        assert_eq!(parse_stat("garbage"), None);
    }
}
