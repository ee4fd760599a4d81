//! A server whose wall clock the test steps, and the machine's left alone: a small shared
//! library, built with the system's C compiler and preloaded into the server (`LD_PRELOAD`),
//! that adds an offset read from a file to every reading of the wall clock (`clock_gettime` of
//! `CLOCK_REALTIME`, `gettimeofday`, `time`). The monotonic clocks pass through unchanged, as a
//! real step leaves them. The file is read at every call, so a new offset counts from the
//! server's next reading.
//!
//! libfaketime (Debian's `faketime`) does the same but cannot start Debian's `redis-server`:
//! the server's allocator, jemalloc, reads the clock while libfaketime is still looking its
//! functions up, and libfaketime gives up. This library looks nothing up: it reads the clock
//! and the file with raw system calls.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The library's source.
const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_us(void) {
    const char *path = getenv("ZKLOCK_CLOCK_OFFSET_FILE");
    if (!path) return 0;
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[32];
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    return strtoll(buf, NULL, 10);
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, clock, ts);
    if (r == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_us() * 1000LL;
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return (int)r;
}

int gettimeofday(struct timeval *__restrict tv, void *__restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
"#;

/// The library and its offset file in `dir` (`dir/clock.so`, `dir/clock-offset`), built there.
pub(super) struct SteppedClock {
    library: PathBuf,
    offset: PathBuf,
}

impl SteppedClock {
    /// Builds the library in `dir` with `CC` (else `cc`), the offset at zero.
    pub(super) fn build(dir: &Path) -> io::Result<SteppedClock> {
        let source = dir.join("clock.c");
        let library = dir.join("clock.so");
        std::fs::write(&source, SOURCE)?;
        let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
        let built = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&source)
            .output()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot run the C compiler {cc:?} to build the clock library \
                         (install gcc, or set CC): {e}"
                    ),
                )
            })?;
        if !built.status.success() {
            return Err(io::Error::other(format!(
                "the C compiler {cc:?} did not build the clock library: {}",
                String::from_utf8_lossy(&built.stderr)
            )));
        }
        let clock = SteppedClock {
            library,
            offset: dir.join("clock-offset"),
        };
        clock.set(0)?;
        Ok(clock)
    }

    /// The environment a process started with reads the stepped clock.
    pub(super) fn env(&self) -> [(&'static str, &Path); 2] {
        [
            ("LD_PRELOAD", &self.library),
            ("ZKLOCK_CLOCK_OFFSET_FILE", &self.offset),
        ]
    }

    /// The wall clock reads the host's plus `offset_us` µs from now on (written to a new
    /// file and renamed over the old, so that no reading sees half a number).
    pub(super) fn set(&self, offset_us: i128) -> io::Result<()> {
        let next = self.offset.with_extension("new");
        std::fs::write(&next, offset_us.to_string())?;
        std::fs::rename(&next, &self.offset)
    }
}

/// How far a testing server's wall clock reads from the host's: ahead of it or behind it.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::testing::{ClockOffset, TestingSentinel};
///
/// // A set whose replica `nodes()[1]` reads an hour ahead of the host, and is the one a
/// // failover promotes.
/// let set = TestingSentinel::start_with_replica_clock(ClockOffset::Ahead(Duration::from_secs(3600)))?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockOffset {
    /// The server's wall clock reads the host's plus this.
    Ahead(Duration),
    /// The server's wall clock reads the host's minus this.
    Behind(Duration),
}

impl ClockOffset {
    /// The offset in µs, signed.
    pub(super) fn micros(self) -> i128 {
        match self {
            ClockOffset::Ahead(by) => by.as_micros() as i128,
            ClockOffset::Behind(by) => -(by.as_micros() as i128),
        }
    }
}
