//! `mem://NAME` through [`connect`](crate::connect): the adapter of the `mem://` types to
//! [`AnyClient`](crate::AnyClient).

use std::sync::Arc;
use std::time::Duration;

use super::{MemClient, MemLeaderLatch, MemLease, MemMutex, MemReadWriteLock, MemSemaphore};
use crate::any::{adapters, from_client, AnyClientBuilder, Backend, Latch, ReadWrite, Semaphore};
use crate::core::connection::ConnectionState;
use crate::core::error::Result;
use crate::core::lock::Lock;

/// A Client of the store that `mem://NAME` names, with the URL's options.
pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let name = b.url.strip_prefix("mem://").unwrap_or(&b.url);
    let client = MemClient::builder(name)
        .with_options(&b.options.resolved(op))
        .connect()?;
    Ok(Arc::new(client))
}

from_client!(MemClient);

impl Backend for MemClient {
    fn name(&self) -> &'static str {
        "mem"
    }
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
        Ok(Arc::new(MemMutex::new(self, name)?))
    }
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
        Ok(Box::new(MemReadWriteLock::new(self, name)?))
    }
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
        Ok(Box::new(MemSemaphore::new(self, name, max_leases)?))
    }
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
        Ok(Box::new(MemLeaderLatch::start(self, name)?))
    }
    fn state(&self) -> ConnectionState {
        MemClient::state(self)
    }
    fn close(&self) {
        MemClient::close(self)
    }
}

adapters!(MemReadWriteLock, MemSemaphore, MemLease, MemLeaderLatch);
