//! The `zklock` binary against real servers.
