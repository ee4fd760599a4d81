//! A holder process for a takeover case: this bench run again as a zklock holder, or a Python
//! peer's; signalled (kill -9, SIGSTOP) by the case, and killed and reaped when dropped.

use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};

use crate::common::{Python, Res};

/// The body of a zklock holder process: `lock` takes the lock; then it says "held" and holds
/// until it is killed or its stdin closes.
pub fn hold<G>(lock: impl FnOnce() -> Res<G>) -> Res<()> {
    let _held = lock()?;
    println!("held");
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read_line(&mut String::new());
    Ok(())
}

/// A holder process: zklock's or a Python peer's.
pub enum Holder {
    Zklock(Child),
    Python(Python),
}

impl Holder {
    /// This bench run again with `var` set to `args` (it runs [`hold`]), once it holds.
    pub fn zklock(var: &str, args: &str) -> Res<Holder> {
        let mut child = Command::new(std::env::current_exe()?)
            .env(var, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        if line.trim() != "held" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the holder process said {line:?}, not \"held\"").into());
        }
        Ok(Holder::Zklock(child))
    }

    /// The Python peer `py` (started in its `hold` mode), once it says it holds.
    pub fn python(mut py: Python, who: &str) -> Res<Holder> {
        py.go()?;
        match py.line()?.as_str() {
            "held" => Ok(Holder::Python(py)),
            other => Err(format!("the {who} holder said {other:?}, not \"held\"").into()),
        }
    }

    pub fn signal(&self, signal: rustix::process::Signal) -> Res<()> {
        let pid = match self {
            Holder::Zklock(child) => child.id(),
            Holder::Python(py) => py.pid(),
        };
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid)?).ok_or("pid 0")?;
        rustix::process::kill_process(pid, signal)?;
        Ok(())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.signal(rustix::process::Signal::CONT);
        if let Holder::Zklock(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
