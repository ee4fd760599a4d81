//! The layers: the Client (`src/zookeeper/client/`) never reaches up into the lock
//! recipes or leader election; they build on it, not the other way round.

use std::fs;
use std::path::Path;

#[test]
fn the_client_layer_imports_nothing_from_the_layers_above() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/zookeeper/client");
    let mut offenders = Vec::new();
    let mut files = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            files += 1;
            let text = fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                if ["crate::zookeeper::locks", "crate::zookeeper::leader"]
                    .iter()
                    .any(|upper| line.contains(upper))
                {
                    offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(files >= 5, "src/zookeeper/client/ not found where expected");
    assert!(
        offenders.is_empty(),
        "the client layer imports from above it:\n{}",
        offenders.join("\n")
    );
}
