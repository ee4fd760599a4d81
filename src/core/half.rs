//! The read and write halves of a read-write lock that a backend builds from two of its
//! mutexes sharing one grant (Redis, PostgreSQL, MySQL): types of their own, so that a half is
//! never taken for the backend's mutex, with the mutex's [`Lock`](crate::Lock), guards, health
//! and fencing token. The backend adds the accessors that are its own (a key, the SQL).

/// `$half`, one half of a read-write lock, over a `$mutex` of the shell
/// ([`reentrant_lock!`](crate::core::hold::reentrant_lock)); `$thread` says where health
/// callbacks run. The struct holds the mutex in a field `mutex`, for the caller's own
/// accessors.
macro_rules! lock_half {
    ($(#[$doc:meta])* $half:ident, $mutex:ty, $thread:literal) => {
        $(#[$doc])*
        pub struct $half {
            mutex: $mutex,
        }

        impl $half {
            pub(crate) fn new(mutex: $mutex) -> $half {
                $half { mutex }
            }

            /// Whether any thread of this process holds this half.
            pub fn is_acquired_in_this_process(&self) -> bool {
                self.mutex.is_acquired_in_this_process()
            }

            /// Whether the calling thread holds this half.
            pub fn is_owned_by_current_thread(&self) -> bool {
                self.mutex.is_owned_by_current_thread()
            }

            /// The calling thread's hold's fencing token, if it holds this half.
            pub fn fencing_token(&self) -> Option<u64> {
                self.mutex.fencing_token()
            }

            /// The calling thread's hold's health, computed now, if it holds this half.
            pub fn health(&self) -> Option<$crate::LockHealth> {
                self.mutex.health()
            }

            /// A channel of every later health change of the holds through this half, each
            /// naming its hold and fencing token (see [`HealthEvent`](crate::HealthEvent)).
            pub fn health_events(&self) -> $crate::Receiver<$crate::HealthEvent> {
                self.mutex.health_events()
            }

            #[doc = concat!(
                "Calls `f` on ", $thread, " at every later health change of a hold through ",
                "this half; it must not block. Returns an id for ",
                "[`remove_health_listener`](Self::remove_health_listener)."
            )]
            pub fn on_health(&self, f: impl FnMut($crate::HealthEvent) + Send + 'static) -> u64 {
                self.mutex.on_health(f)
            }

            /// Removes a callback of [`on_health`](Self::on_health); `false` if it was not
            /// there.
            pub fn remove_health_listener(&self, id: u64) -> bool {
                self.mutex.remove_health_listener(id)
            }
        }

        impl std::fmt::Debug for $half {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(stringify!($half)).field(&self.mutex).finish()
            }
        }

        impl $crate::core::lock::Sealed for $half {
            fn acquire_until(&self, until: Option<std::time::Instant>) -> $crate::Result<bool> {
                $crate::core::lock::Sealed::acquire_until(&self.mutex, until)
            }

            fn release_as(&self, how: $crate::core::lock::Release) -> $crate::Result<()> {
                $crate::core::lock::Sealed::release_as(&self.mutex, how)
            }

            fn cancel(&self) {
                $crate::core::lock::Sealed::cancel(&self.mutex)
            }

            fn cap_holds(&self, max_hold: Option<std::time::Duration>) -> $crate::Result<()> {
                $crate::core::lock::Sealed::cap_holds(&self.mutex, max_hold)
            }

            fn acquired_here(&self) -> bool {
                $crate::core::lock::Sealed::acquired_here(&self.mutex)
            }

            fn hold_id(&self) -> Option<u64> {
                $crate::core::lock::Sealed::hold_id(&self.mutex)
            }

            fn drop_bound(&self) -> std::time::Duration {
                $crate::core::lock::Sealed::drop_bound(&self.mutex)
            }
        }

        impl $crate::Lock for $half {
            fn fencing_token(&self) -> Option<u64> {
                self.mutex.fencing_token()
            }

            fn health(&self) -> Option<$crate::LockHealth> {
                self.mutex.health()
            }
        }

        $crate::core::lock::forward_lock_api!($half);
    };
}
#[allow(unused_imports)] // unused in a build without the backends that use it
pub(crate) use lock_half;
