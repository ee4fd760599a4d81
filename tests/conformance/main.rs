//! The conformance suite: every scenario written once (`scenarios.rs`) and run on every backend
//! (`backends.rs`); a test's name says which, as in `redis::hand_off_after_500ms_hold`. The
//! ZooKeeper lock kinds' own scenarios are in `zookeeper_kinds.rs`.
//!
//! The scenarios that neither pause nor restart the server share one per backend, started by the
//! first and stopped by the last test of the backend's module (`backends.rs`); the others start
//! their own throwaway server.

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

/// The tests of one backend's module, each counted as it ends ([`backends::Ended`]: the last
/// stops the server they shared; so none of them may be `#[ignore]`d, or the server would
/// outlive the run).
macro_rules! scenarios {
    ($($(#[$doc:meta])* $test:ident => $run:expr;)*) => {
        /// How many tests the module has.
        const TESTS: usize = [$(stringify!($test)),*].len();
        $(
            $(#[$doc])*
            #[test]
            fn $test() {
                let _ended = backends::Ended::on_drop(B, TESTS);
                $run
            }
        )*
    };
}

/// The scenarios for one backend, in a module named after it.
macro_rules! backend {
    ($name:ident => $backend:expr) => {
        mod $name {
            use super::*;
            use crate::scenarios as s;

            const B: &dyn backends::Backend = &$backend;

            scenarios! {
                exclusion_across_clients => s::exclusion(B);
                fifo_order => s::fifo(B);
                reentrancy_and_not_owner => s::reentrancy_and_not_owner(B);
                hand_off_after_0ms_hold => s::hand_off(B, Duration::ZERO);
                hand_off_after_50ms_hold => s::hand_off(B, Duration::from_millis(50));
                hand_off_after_500ms_hold => s::hand_off(B, Duration::from_millis(500));
                try_and_timeout_bounds => s::try_and_timeout(B);
                cancel_waiters => s::cancel_waiters(B);
                close_while_waiting => s::close_while_waiting(B);
                close_while_holding => s::close_while_holding(B);
                frozen_server_bounds => s::frozen_server(B);
                server_restart_while_holding_and_waiting =>
                    s::server_restart(B);
                exit_frees_the_lock => s::exit_frees_the_lock(B);
                exit_worker => s::exit_worker(B);
                drop_then_try_lock_20_of_20 => s::drop_then_try_lock(B);
                bad_input_refused => s::bad_input(B);
                semaphore_at_most_n => s::semaphore_at_most_n(B);
                read_write_exclusion_and_writer_preference =>
                    s::read_write(B);
                holder_killed_is_replaced => s::silent_holder(B, "-KILL");
                holder_frozen_is_replaced_and_reads_lost =>
                    s::silent_holder(B, "-STOP");
                /// Not a scenario: the holder process of the two above.
                holder_worker => s::holder_worker(B);
                leader_latch_one_leader_rising_epochs => s::leader_latch(B);
                extreme_durations => s::extreme_durations(B);
                release_during_slow_renewal => s::release_during_slow_renewal(B);
                max_hold_mutex_is_taken_over =>
                    crate::max_hold::capped_hold_is_taken_over(B, false);
                max_hold_write_lock_is_taken_over =>
                    crate::max_hold::capped_hold_is_taken_over(B, true);
                max_hold_lease_is_taken_over =>
                    crate::max_hold::capped_lease_is_taken_over(B);
                max_hold_multi_lock_is_taken_over =>
                    crate::max_hold::capped_multi_lock(B);
                max_hold_bad_values_refused =>
                    crate::max_hold::bad_max_hold_refused(B);
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
