//! Test support for Sluice: real `redis-server` processes (and an S3-compatible server) for
//! tests, started on free ports in fresh temporary directories, and nothing assumed to be
//! running already.
//!
//! * [`RedisServer`]: one standalone server (`--save '' --appendonly no` unless told otherwise),
//!   with [`kill`](RedisServer::kill) (SIGKILL), [`stop`](RedisServer::stop) (SIGTERM) and
//!   [`restart`](RedisServer::restart) on the same port and directory, for outage and
//!   durability tests.
//! * [`RedisCluster`]: N masters joined with `redis-cli --cluster create`, ready once every node
//!   reports `cluster_state:ok`.
//! * [`S3Server`]: moto's S3-compatible server, in memory, for payload-store tests.
//! * [`shared_server`] / [`shared_cluster`]: one instance per test binary, so the tests of a
//!   binary share one process (isolated from each other by a unique key prefix, see
//!   [`unique_prefix`], never by `FLUSHALL`).
//!
//! **Cleanup.** A server owned by a value is killed when the value drops. The shared instances
//! live in statics, which Rust never drops, and `unsafe` (hence `prctl(PR_SET_PDEATHSIG)`) is
//! forbidden in this workspace; so every `redis-server` gets a tiny `sh` watchdog that polls
//! the test process once a second and, once that process is gone, SIGKILLs the server and
//! removes its directory. The watchdog ends by itself when its server ends first. The `pid`
//! files written into each directory are there for humans chasing a leak.

mod s3;

pub use s3::S3Server;

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a starting server may take to answer `PING` (an AOF replay included).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A key prefix no other engine of this test process uses (and no other process: the pid is
/// part of it), for isolating tests that share one server.
pub fn unique_prefix(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("t{}-{n}-{tag}", std::process::id())
}

/// A free TCP port on 127.0.0.1 below 55535, so that `port + 10000` (a cluster node's bus port)
/// is a valid port too. Free when asked: another process may take it before it is used, so
/// starters retry on a failed start.
pub fn free_port() -> io::Result<u16> {
    for _ in 0..200 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port < 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port below 55535"))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends one command to `127.0.0.1:port` and answers the reply as text: the line of a simple
/// string, integer or error (errors as `Err`), the contents of a bulk string, or the elements
/// of an array of bulk strings joined by newlines. Enough for `PING`, `INFO`, `CLUSTER INFO`
/// and `CONFIG GET` without an async runtime.
pub fn query(port: u16, args: &[&str]) -> io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(request.as_bytes())?;
    let mut reader = BufReader::new(stream);
    read_reply(&mut reader)
}

fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<String> {
    let line = read_line(reader)?;
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || {
        rest.parse::<i64>()
            .map_err(|e| io::Error::other(format!("bad length {rest:?}: {e}")))
    };
    match kind {
        "+" | ":" => Ok(rest.to_owned()),
        "-" => Err(io::Error::other(rest.to_owned())),
        "$" => {
            let len = number()?;
            if len < 0 {
                return Ok(String::new());
            }
            let mut buf = vec![0; len as usize + 2];
            reader.read_exact(&mut buf)?;
            buf.truncate(len as usize);
            String::from_utf8(buf).map_err(io::Error::other)
        }
        "*" => {
            let n = number()?.max(0);
            let mut parts = Vec::new();
            for _ in 0..n {
                parts.push(read_reply(reader)?);
            }
            Ok(parts.join("\n"))
        }
        _ => Err(io::Error::other(format!("unexpected reply {line:?}"))),
    }
}

/// Spawns the watchdog that SIGKILLs `pid` and removes `dir` once this test process is gone.
fn spawn_watchdog(pid: u32, dir: &Path) -> io::Result<Child> {
    const SCRIPT: &str = r#"
        while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
        if ! kill -0 "$1" 2>/dev/null; then kill -9 "$2" 2>/dev/null; rm -rf "$3"; fi
    "#;
    Command::new("sh")
        .args(["-c", SCRIPT, "sluice-testkit-watchdog"])
        .arg(std::process::id().to_string())
        .arg(pid.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// A running (or stopped) redis-server process and its watchdog.
struct Process {
    server: Child,
    watchdog: Child,
}

impl Process {
    fn end(mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// One `redis-server` on 127.0.0.1, in a temporary directory of its own. Killed (and its
/// directory removed) on drop.
pub struct RedisServer {
    port: u16,
    args: Vec<String>,
    process: Mutex<Option<Process>>,
    // Declared last: dropped after the process is gone.
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// A throwaway server: no snapshots, no AOF.
    pub fn start() -> io::Result<Self> {
        Self::start_with(&[])
    }

    /// A server with extra arguments appended to the defaults (later ones win), e.g.
    /// `["--appendonly", "yes", "--appendfsync", "always"]` for durability tests.
    pub fn start_with(extra: &[&str]) -> io::Result<Self> {
        let mut last_error = None;
        // A free port can be taken between choosing and binding it: try a few.
        for _ in 0..5 {
            let dir = tempfile::Builder::new().prefix("sluice-redis-").tempdir()?;
            let server = Self {
                port: free_port()?,
                args: extra.iter().map(|s| (*s).to_owned()).collect(),
                process: Mutex::new(None),
                dir,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its working directory (AOF and RDB files, `redis.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends one command (see [`query`]).
    pub fn query(&self, args: &[&str]) -> io::Result<String> {
        query(self.port, args)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--logfile", "redis.log"])
            .args(["--pidfile", "redis.pid"])
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    fn spawn(&self) -> io::Result<()> {
        let mut server = self.command().spawn()?;
        let watchdog = match spawn_watchdog(server.id(), self.dir.path()) {
            Ok(w) => w,
            Err(e) => {
                let _ = server.kill();
                let _ = server.wait();
                return Err(e);
            }
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = server.try_wait()? {
                Process { server, watchdog }.end();
                return Err(io::Error::other(format!(
                    "redis-server on port {} exited with {status}; see {}",
                    self.port,
                    self.dir.path().join("redis.log").display()
                )));
            }
            if matches!(self.query(&["PING"]).as_deref(), Ok("PONG")) {
                break;
            }
            if Instant::now() > deadline {
                Process { server, watchdog }.end();
                return Err(io::Error::other(format!(
                    "redis-server on port {} did not answer PING",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        *lock(&self.process) = Some(Process { server, watchdog });
        Ok(())
    }

    /// Whether the process is running.
    pub fn is_running(&self) -> bool {
        lock(&self.process)
            .as_mut()
            .is_some_and(|p| matches!(p.server.try_wait(), Ok(None)))
    }

    /// SIGKILL: a crash, nothing flushed that was not already.
    pub fn kill(&self) {
        if let Some(process) = lock(&self.process).take() {
            process.end();
        }
    }

    fn signal(&self, signal: &str) -> io::Result<()> {
        let pid = lock(&self.process)
            .as_ref()
            .map(|p| p.server.id())
            .ok_or_else(|| io::Error::other("redis-server is not running"))?;
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill {signal} {pid}: {status}")))
        }
    }

    /// SIGSTOP: the server keeps its connections open but answers nothing (a hung server, for
    /// timeout tests) until [`thaw`](Self::thaw).
    pub fn freeze(&self) -> io::Result<()> {
        self.signal("-STOP")
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub fn thaw(&self) -> io::Result<()> {
        self.signal("-CONT")
    }

    /// SIGTERM and wait (Redis flushes the AOF and exits), SIGKILL after 10 s.
    pub fn stop(&self) {
        // A frozen server would not act on SIGTERM.
        let _ = self.thaw();
        let Some(mut process) = lock(&self.process).take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &process.server.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(process.server.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        process.end();
    }

    /// Starts the server again on the same port and directory (stopping it first if it runs),
    /// and waits until it answers `PING` (after replaying its AOF, if any).
    pub fn restart(&self) -> io::Result<()> {
        self.stop();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of masters without replicas, each node a [`RedisServer`].
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("ports", &self.ports())
            .finish()
    }
}

impl RedisCluster {
    /// Starts `masters` nodes (3 or more), creates the cluster and waits until every node says
    /// `cluster_state:ok`.
    pub fn start(masters: usize) -> io::Result<Self> {
        let mut last_error = None;
        for _ in 0..3 {
            match Self::try_start(masters) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("the cluster did not start")))
    }

    fn try_start(masters: usize) -> io::Result<Self> {
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            ])?);
        }
        let cluster = Self { nodes };
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = cluster.nodes.iter().all(|n| {
                n.query(&["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok")
                        && info.contains("cluster_slots_ok:16384")
                        && info.contains(&format!("cluster_known_nodes:{masters}"))
                })
            });
            if ready {
                return Ok(cluster);
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(
                    "the cluster never reached cluster_state:ok",
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The nodes' ports.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }
}

/// The standalone server every test of this test binary shares (started on first use).
pub fn shared_server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        RedisServer::start().unwrap_or_else(|e| panic!("start the shared redis-server: {e}"))
    })
}

/// The 3-master cluster every test of this test binary shares (started on first use).
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        RedisCluster::start(3).unwrap_or_else(|e| panic!("start the shared Redis Cluster: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_starts_restarts_and_dies_with_its_value() {
        let server = RedisServer::start().unwrap();
        assert_eq!(server.query(&["PING"]).unwrap(), "PONG");
        server.query(&["SET", "k", "v"]).unwrap();
        server.kill();
        assert!(!server.is_running());
        assert!(server.query(&["PING"]).is_err());
        server.restart().unwrap();
        assert_eq!(server.query(&["PING"]).unwrap(), "PONG");
        assert_eq!(server.query(&["GET", "k"]).unwrap(), "", "no persistence");
        let port = server.port();
        drop(server);
        assert!(query(port, &["PING"]).is_err());
    }

    #[test]
    fn aof_survives_a_kill() {
        let server =
            RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
        server.query(&["SET", "k", "v"]).unwrap();
        server.kill();
        server.restart().unwrap();
        assert_eq!(server.query(&["GET", "k"]).unwrap(), "v");
    }

    #[test]
    fn a_cluster_forms() {
        let cluster = RedisCluster::start(3).unwrap();
        assert!(cluster.url().starts_with("redis+cluster://127.0.0.1:"));
        for node in cluster.nodes() {
            assert!(node
                .query(&["CLUSTER", "INFO"])
                .unwrap()
                .contains("cluster_state:ok"));
        }
    }
}
