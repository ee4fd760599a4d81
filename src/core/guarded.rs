//! Writes guarded by a hold, what every backend's guards share: a lock's guarded call on its
//! guards ([`LockGuard`](crate::LockGuard), [`ArcLockGuard`](crate::ArcLockGuard)), for the
//! guard's own hold.

/// `fn $method(&self, $arg: $ty) -> $ret` on the guards of each lock named: the lock's own
/// `$method`, while the guard's hold is still the lock's current one. `$does` ends the first
/// sentence of their docs (what the call does with `$arg` for the hold); the doc comments in
/// `example { … }` end the [`LockGuard`](crate::LockGuard) form's docs.
macro_rules! guard_forms {
    (
        fn $method:ident(&self, $arg:ident: $ty:ty) -> $ret:ty;
        $does:literal;
        example $example:tt;
        $($lock:ident),+ $(,)?
    ) => {$(
        $crate::core::guarded::guard_forms!(
            @one $lock, fn $method(&self, $arg: $ty) -> $ret; $does; $example
        );
    )+};
    (
        @one $lock:ident, fn $method:ident(&self, $arg:ident: $ty:ty) -> $ret:ty;
        $does:literal;
        { $(#[$example:meta])* }
    ) => {
        impl $crate::LockGuard<'_, $lock> {
            $crate::core::guarded::guard_forms!(
                @method $lock, fn $method(&self, $arg: $ty) -> $ret; $does; $(#[$example])*
            );
        }

        impl $crate::ArcLockGuard<$lock> {
            $crate::core::guarded::guard_forms!(
                @method $lock, fn $method(&self, $arg: $ty) -> $ret; $does;
            );
        }
    };
    (
        @method $lock:ident, fn $method:ident(&self, $arg:ident: $ty:ty) -> $ret:ty;
        $does:literal; $(#[$example:meta])*
    ) => {
        #[doc = concat!(
            "[`", stringify!($lock), "::", stringify!($method), "`] for this guard's hold: ",
            $does
        )]
        ///
        /// # Blocking and errors
        #[doc = concat!(
            "As [`", stringify!($lock), "::", stringify!($method), "`]; ",
            "[`Error::NotOwner`](crate::Error::NotOwner) before any I/O if the hold was ",
            "released through the lock meanwhile."
        )]
        $(#[$example])*
        pub fn $method(&self, $arg: $ty) -> $ret {
            self.current_lock()
                .ok_or($crate::Error::NotOwner)?
                .$method($arg)
        }
    };
}
pub(crate) use guard_forms;
