//! The file backend behind [`AnyClient`](crate::AnyClient): `file:///dir` URLs.

use std::sync::Arc;
use std::time::Duration;

use super::{FileClient, FileLeaderLatch, FileLease, FileMutex, FileReadWriteLock, FileSemaphore};
use crate::any::{adapters, from_client, AnyClientBuilder, Backend, Latch, ReadWrite, Semaphore};
use crate::core::connection::ConnectionState;
use crate::core::error::{Error, Result};
use crate::core::lock::Lock;

/// Opens the directory a `file:///dir` URL names (an absolute path; on Windows
/// `file:///C:/dir`). The session and connect timeouts mean nothing here: the kernel frees a
/// dead process's locks, and there is nothing to connect to.
pub(crate) fn connect(b: &AnyClientBuilder, _: Duration) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(FileClient::open(path(&b.url)?)?))
}

/// The directory of `file:///dir` (or `file://localhost/dir`).
fn path(url: &str) -> Result<std::path::PathBuf> {
    let rest = &url["file://".len()..];
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return Err(Error::invalid(format!(
            "{url:?}: a file:// URL names an absolute directory of this host, as \
             file:///var/lock/app (three slashes)"
        )));
    }
    // file:///C:/locks on Windows: the drive letter follows the slash.
    #[cfg(windows)]
    let rest = match rest.as_bytes() {
        [b'/', d, b':', ..] if d.is_ascii_alphabetic() => &rest[1..],
        _ => rest,
    };
    if rest.len() <= 1 {
        return Err(Error::invalid(format!(
            "{url:?} names the root directory: give a directory of its own, as \
             file:///var/lock/app"
        )));
    }
    Ok(std::path::PathBuf::from(rest))
}

from_client!(FileClient);

impl Backend for FileClient {
    fn name(&self) -> &'static str {
        "file"
    }
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
        Ok(Arc::new(FileMutex::new(self, name)?))
    }
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
        Ok(Box::new(FileReadWriteLock::new(self, name)?))
    }
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
        Ok(Box::new(FileSemaphore::new(self, name, max_leases)?))
    }
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
        Ok(Box::new(FileLeaderLatch::start(self, name)?))
    }
    fn state(&self) -> ConnectionState {
        FileClient::state(self)
    }
    fn close(&self) {
        FileClient::close(self)
    }
}

adapters!(FileReadWriteLock, FileSemaphore, FileLease, FileLeaderLatch);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_name_an_absolute_directory() {
        assert_eq!(
            path("file:///var/lock/app").unwrap(),
            std::path::PathBuf::from("/var/lock/app")
        );
        assert_eq!(
            path("file://localhost/tmp/x").unwrap(),
            std::path::PathBuf::from("/tmp/x")
        );
        assert!(path("file://host/tmp").is_err());
        assert!(path("file://relative").is_err());
        assert!(path("file:///").is_err());
        assert!(path("file://").is_err());
    }
}
