//! Debian's Curator 5 and `benches/java/CuratorBench.java`, compiled once for a bench run: the
//! classes in a directory of their own, removed on drop, and the command that starts a JVM on
//! them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The result type of the benches.
type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const CURATOR_JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
];

/// Quiets slf4j (Curator logs nothing a bench needs), if Debian's binding is there.
const SLF4J_NOP: &str = "/usr/share/java/slf4j-nop.jar";

/// `CuratorBench` compiled against Debian's Curator jars.
pub struct CuratorJvm {
    classes: PathBuf,
    classpath: String,
}

impl CuratorJvm {
    /// Compiles `CuratorBench.java`; `how` says how to run the bench without Curator, for the
    /// error when a jar or `javac` is missing.
    pub fn compile(how: &str) -> Res<CuratorJvm> {
        if let Some(missing) = CURATOR_JARS.iter().find(|j| !Path::new(j).exists()) {
            return Err(format!(
                "the Curator side needs Debian's Curator ({missing} is missing): apt-get install \
                 libcurator-recipes-java default-jdk-headless, or {how}"
            )
            .into());
        }
        let mut classpath = CURATOR_JARS.join(":");
        if Path::new(SLF4J_NOP).exists() {
            classpath = format!("{classpath}:{SLF4J_NOP}");
        }
        let classes =
            std::env::temp_dir().join(format!("zklock-bench-java-{}", std::process::id()));
        std::fs::create_dir_all(&classes)?;
        let source = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/java/CuratorBench.java"
        );
        let status = Command::new("javac")
            .args(["-nowarn", "-d"])
            .arg(&classes)
            .args(["-cp", &classpath, source])
            .status()
            .map_err(|e| format!("the Curator side needs javac (a JDK): {e}"))?;
        if !status.success() {
            return Err(format!("javac failed on {source}").into());
        }
        Ok(CuratorJvm { classes, classpath })
    }

    /// `java -Xmx<heap> -XX:+UseSerialGC -cp … CuratorBench <args>`, to be given its stdio.
    pub fn command(&self, heap: &str, args: &[&str]) -> Command {
        let mut java = Command::new("java");
        java.arg(format!("-Xmx{heap}"))
            .args(["-XX:+UseSerialGC", "-cp"])
            .arg(format!("{}:{}", self.classes.display(), self.classpath))
            .arg("CuratorBench")
            .args(args);
        java
    }
}

impl Drop for CuratorJvm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.classes);
    }
}
