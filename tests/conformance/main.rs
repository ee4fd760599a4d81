//! The conformance suite: every scenario written once (`scenarios.rs`) and run on every backend
//! (`backends.rs`); a test's name says which, as in `redis::hand_off_after_500ms_hold`. The
//! ZooKeeper lock kinds' own scenarios are in `zookeeper_kinds.rs`.
//!
//! Each test starts its own throwaway server.

#[path = "../common/mod.rs"]
mod common;

mod backends;
mod checker;
mod guarded;
mod max_hold;
mod scenarios;
#[cfg(feature = "metrics")]
mod slow;
mod zookeeper_kinds;

use std::time::Duration;

/// The scenarios for one backend, in a module named after it.
macro_rules! backend {
    ($name:ident => $backend:expr) => {
        mod $name {
            use super::*;
            use crate::scenarios as s;

            const B: &dyn backends::Backend = &$backend;

            #[test]
            fn exclusion_across_clients() {
                s::exclusion(B)
            }
            #[test]
            fn fifo_order() {
                s::fifo(B)
            }
            #[test]
            fn reentrancy_and_not_owner() {
                s::reentrancy_and_not_owner(B)
            }
            #[test]
            fn hand_off_after_0ms_hold() {
                s::hand_off(B, Duration::ZERO)
            }
            #[test]
            fn hand_off_after_50ms_hold() {
                s::hand_off(B, Duration::from_millis(50))
            }
            #[test]
            fn hand_off_after_500ms_hold() {
                s::hand_off(B, Duration::from_millis(500))
            }
            #[test]
            fn try_and_timeout_bounds() {
                s::try_and_timeout(B)
            }
            #[test]
            fn cancel_waiters() {
                s::cancel_waiters(B)
            }
            #[test]
            fn close_while_waiting() {
                s::close_while_waiting(B)
            }
            #[test]
            fn close_while_holding() {
                s::close_while_holding(B)
            }
            #[test]
            fn frozen_server_bounds() {
                s::frozen_server(B)
            }
            #[test]
            fn server_restart_while_holding_and_waiting() {
                s::server_restart(B)
            }
            #[test]
            fn exit_frees_the_lock() {
                s::exit_frees_the_lock(B)
            }
            #[test]
            fn exit_worker() {
                s::exit_worker(B)
            }
            #[test]
            fn drop_then_try_lock_20_of_20() {
                s::drop_then_try_lock(B)
            }
            #[test]
            fn bad_input_refused() {
                s::bad_input(B)
            }
            #[test]
            fn semaphore_at_most_n() {
                s::semaphore_at_most_n(B)
            }
            #[test]
            fn read_write_exclusion_and_writer_preference() {
                s::read_write(B)
            }
            #[test]
            fn holder_killed_is_replaced() {
                s::silent_holder(B, "-KILL")
            }
            #[test]
            fn holder_frozen_is_replaced_and_reads_lost() {
                s::silent_holder(B, "-STOP")
            }
            /// Not a scenario: the holder process of the two above.
            #[test]
            fn holder_worker() {
                s::holder_worker(B)
            }
            #[test]
            fn leader_latch_one_leader_rising_epochs() {
                s::leader_latch(B)
            }
            #[test]
            fn extreme_durations() {
                s::extreme_durations(B)
            }
            #[test]
            fn release_during_slow_renewal() {
                s::release_during_slow_renewal(B)
            }
            #[test]
            fn max_hold_mutex_is_taken_over() {
                crate::max_hold::capped_hold_is_taken_over(B, false)
            }
            #[test]
            fn max_hold_write_lock_is_taken_over() {
                crate::max_hold::capped_hold_is_taken_over(B, true)
            }
            #[test]
            fn max_hold_lease_is_taken_over() {
                crate::max_hold::capped_lease_is_taken_over(B)
            }
            #[test]
            fn max_hold_multi_lock_is_taken_over() {
                crate::max_hold::capped_multi_lock(B)
            }
            #[test]
            fn max_hold_bad_values_refused() {
                crate::max_hold::bad_max_hold_refused(B)
            }
        }
    };
}

// The backends: one line each.
backend!(file => backends::File);
backend!(mem => backends::Mem);
backend!(zookeeper => backends::ZooKeeper);
#[cfg(feature = "redis")]
backend!(redis => backends::Redis);
#[cfg(feature = "redis")]
backend!(redis_cluster => backends::RedisCluster);
#[cfg(feature = "postgres")]
backend!(postgres => backends::Postgres);
#[cfg(feature = "mysql")]
backend!(mariadb => backends::Mariadb);
#[cfg(feature = "mysql")]
backend!(mariadb_table => backends::MariadbTable);
