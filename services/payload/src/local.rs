//! [`LocalStore`]: payload objects as files under one folder, `<root>/<tenant>/<first two hex
//! digits>/<object>` (the middle level keeps folders small with millions of objects). A write goes
//! to a temporary file that is flushed to disk, renamed into place and its folder flushed, so a
//! crash leaves either no object or the whole one, never part of one under its name.

use crate::{Millis, ObjectPage, PayloadError, PayloadKey, PayloadStore, StoredObject};
use async_trait::async_trait;
use bytes::Bytes;
use rand::RngCore;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Temporary files of unfinished writes; the tenant folders can never be named so.
const TEMP_DIR: &str = ".incoming";

/// Payload objects in a folder of the server's disk.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
}

impl LocalStore {
    /// A store under `root`, created if missing. Leftovers of writes interrupted by a crash are
    /// removed.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        let temp = root.join(TEMP_DIR);
        if temp.exists() {
            fs::remove_dir_all(&temp)?;
        }
        create_private_dir(&temp)?;
        Ok(Self { root })
    }

    /// The folder the store lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, key: &PayloadKey) -> PathBuf {
        let object = key.object();
        self.root.join(key.tenant()).join(&object[..2]).join(object)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(LocalStore) -> Result<T, PayloadError> + Send + 'static,
    ) -> Result<T, PayloadError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(store))
            .await
            .map_err(|e| PayloadError::Unavailable(format!("payload file task failed: {e}")))?
    }

    fn write(&self, key: &PayloadKey, body: &[u8]) -> io::Result<()> {
        let mut random = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut random);
        let temp = self.root.join(TEMP_DIR).join(hex::encode(random));
        let result = (|| {
            let mut file = create_private_file(&temp)?;
            file.write_all(body)?;
            file.sync_all()?;
            let path = self.path_of(key);
            let folder = path.parent().unwrap_or(&self.root);
            create_private_dir(folder)?;
            fs::rename(&temp, &path)?;
            // The rename is durable only once the folder holding the new name is.
            File::open(folder)?.sync_all()
        })();
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result
    }

    /// Every object's key in order (tenant folders, then shard folders, then files, each sorted:
    /// the same order as the keys' strings, since names are fixed-width hex under one tenant).
    fn walk(&self, after: Option<&str>, limit: usize) -> io::Result<ObjectPage> {
        let mut page = ObjectPage::default();
        for tenant in sorted_names(&self.root)? {
            if tenant == TEMP_DIR {
                continue;
            }
            if after.is_some_and(|after| tenant.as_str() < after.split('/').next().unwrap_or("")) {
                continue;
            }
            for shard in sorted_names(&self.root.join(&tenant))? {
                for object in sorted_names(&self.root.join(&tenant).join(&shard))? {
                    let Ok(key) = PayloadKey::parse(&format!("{tenant}/{object}")) else {
                        continue;
                    };
                    if after.is_some_and(|after| key.as_str() <= after) {
                        continue;
                    }
                    if page.objects.len() == limit {
                        page.next = page.objects.last().map(|o| o.key.as_str().to_owned());
                        return Ok(page);
                    }
                    let meta = match fs::metadata(self.path_of(&key)) {
                        Ok(meta) => meta,
                        // Deleted since the folder was read.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    };
                    let written_at = meta
                        .modified()?
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as Millis);
                    page.objects.push(StoredObject {
                        key,
                        size: meta.len(),
                        written_at,
                    });
                }
            }
        }
        Ok(page)
    }
}

/// Creates `folder` and any missing parent with mode 0700: bodies are tenants' data, for the
/// server's user alone.
fn create_private_dir(folder: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(folder)
}

/// Creates a new file with mode 0600 (see [`create_private_dir`]).
fn create_private_file(path: &Path) -> io::Result<File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn sorted_names(folder: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    let entries = match fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(names),
        Err(e) => return Err(e),
    };
    for entry in entries {
        if let Ok(name) = entry?.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn unavailable(what: &str, key: &PayloadKey, error: io::Error) -> PayloadError {
    PayloadError::Unavailable(format!("{what} {key}: {error}"))
}

#[async_trait]
impl PayloadStore for LocalStore {
    async fn put(&self, key: &PayloadKey, body: Bytes) -> Result<(), PayloadError> {
        let key = key.clone();
        self.blocking(move |store| {
            store
                .write(&key, &body)
                .map_err(|e| unavailable("writing", &key, e))
        })
        .await
    }

    async fn get(&self, key: &PayloadKey) -> Result<Vec<u8>, PayloadError> {
        let key = key.clone();
        self.blocking(move |store| match fs::read(store.path_of(&key)) {
            Ok(body) => Ok(body),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(PayloadError::NotFound(key.to_string()))
            }
            Err(e) => Err(unavailable("reading", &key, e)),
        })
        .await
    }

    async fn delete(&self, key: &PayloadKey) -> Result<(), PayloadError> {
        let key = key.clone();
        self.blocking(move |store| match fs::remove_file(store.path_of(&key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(unavailable("deleting", &key, e)),
        })
        .await
    }

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ObjectPage, PayloadError> {
        let after = after.map(str::to_owned);
        self.blocking(move |store| {
            store
                .walk(after.as_deref(), limit)
                .map_err(|e| PayloadError::Unavailable(format!("listing payload objects: {e}")))
        })
        .await
    }

    async fn ping(&self) -> Result<(), PayloadError> {
        self.blocking(|store| {
            fs::metadata(store.root.join(TEMP_DIR))
                .map(drop)
                .map_err(|e| PayloadError::Unavailable(format!("payload folder: {e}")))
        })
        .await
    }
}
