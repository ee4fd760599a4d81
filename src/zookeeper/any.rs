//! The URL factory's adapter for ZooKeeper: `zk://HOSTS/CHROOT` opens a [`Client`] (the chroot
//! as its namespace), and a name is the path `/NAME`, in Curator's layout.

use std::sync::Arc;
use std::time::Duration;

use super::{
    client::Client,
    leader::LeaderLatch,
    locks::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2},
};
use crate::any::{AnyClientBuilder, Backend, Latch, ReadWrite, Semaphore};
use crate::core::connection::ConnectionState;
use crate::core::error::{Error, Result};
use crate::core::lock::Lock;

pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let rest = &b.url["zk://".len()..];
    let (hosts, chroot) = match rest.split_once('/') {
        Some((hosts, chroot)) => (hosts, chroot.trim_end_matches('/')),
        None => (rest, ""),
    };
    if hosts.is_empty() {
        return Err(Error::invalid(format!("{:?} names no host", b.url)));
    }
    let mut builder = Client::builder(hosts).with_options(&b.options.resolved(op));
    if !chroot.is_empty() {
        builder = builder.namespace(chroot);
    }
    Ok(Arc::new(builder.connect()?))
}

/// A name's path, in the layout Curator's users write.
fn path(name: &str) -> String {
    format!("/{name}")
}

crate::any::from_client!(Client);

impl Backend for Client {
    fn name(&self) -> &'static str {
        "zookeeper"
    }
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
        Ok(Arc::new(InterProcessMutex::new(self, &path(name))?))
    }
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
        Ok(Box::new(InterProcessReadWriteLock::new(self, &path(name))?))
    }
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
        Ok(Box::new(InterProcessSemaphoreV2::new(
            self,
            &path(name),
            max_leases,
        )?))
    }
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
        let latch = LeaderLatch::new(self, &path(name))?;
        latch.start()?;
        Ok(Box::new(latch))
    }
    fn state(&self) -> ConnectionState {
        // `None` only before the first connection, which `connect` waited for.
        Client::state(self).unwrap_or(ConnectionState::Suspended)
    }
    fn close(&self) {
        Client::close(self)
    }
}

crate::any::adapters!(
    InterProcessReadWriteLock,
    InterProcessSemaphoreV2,
    crate::zookeeper::locks::Lease,
    LeaderLatch
);
