//! [`S3Server`]: a real S3-compatible server for tests — moto's server (`moto_server`, from
//! PyPI's `moto[server]`), on a free port, in memory. `tests/run.sh` installs it in its tools
//! virtual environment and exports that folder as `SLUICE_TEST_AWS_BIN`; without it the server
//! is looked up on the `PATH`.

use crate::{free_port, lock, spawn_watchdog, Process};
use std::io;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long moto may take to start listening (it imports a lot of Python).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One S3-compatible server on 127.0.0.1, killed on drop. Its state is in memory: a restart
/// starts empty (buckets included), like a store that lost everything.
pub struct S3Server {
    port: u16,
    process: Mutex<Option<Process>>,
    // Declared last: dropped after the process is gone.
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

fn moto_server() -> PathBuf {
    if let Some(bin) = std::env::var_os("SLUICE_TEST_AWS_BIN") {
        let path = PathBuf::from(bin).join("moto_server");
        if path.exists() {
            return path;
        }
    }
    PathBuf::from("moto_server")
}

impl S3Server {
    /// Starts a server and waits until it listens.
    pub fn start() -> io::Result<Self> {
        let mut last_error = None;
        for _ in 0..5 {
            let server = Self {
                port: free_port()?,
                process: Mutex::new(None),
                dir: tempfile::Builder::new().prefix("sluice-s3-").tempdir()?,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("moto_server did not start")))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn(&self) -> io::Result<()> {
        let log = std::fs::File::create(self.dir.path().join("moto.log"))?;
        let mut server = Command::new(moto_server())
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                io::Error::other(format!(
                    "cannot run moto_server ({e}); install PyPI's moto[server] or set SLUICE_TEST_AWS_BIN"
                ))
            })?;
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
                    "moto_server on port {} exited with {status}",
                    self.port
                )));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                Process { server, watchdog }.end();
                return Err(io::Error::other(format!(
                    "moto_server on port {} did not start listening",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        *lock(&self.process) = Some(Process { server, watchdog });
        Ok(())
    }

    /// Kills the server: the store becomes unreachable (connections refused).
    pub fn kill(&self) {
        if let Some(process) = lock(&self.process).take() {
            process.end();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}
