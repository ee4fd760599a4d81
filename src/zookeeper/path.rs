//! Path validation and the node-name conventions shared with Curator.

use crate::core::error::{Error, Result};

/// Curator's protection marker: `_c_` + UUID + `-` before the node name.
pub(crate) const PROTECTED_PREFIX: &str = "_c_";
#[cfg(test)]
const PROTECTED_ID_LEN: usize = PROTECTED_PREFIX.len() + 36 + 1;

/// Checks `path` as ZooKeeper's `PathUtils.validatePath` does, before any I/O.
/// A sequential node's path may end in `/` (the server appends the sequence).
pub(crate) fn validate(path: &str, sequential: bool) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("empty path");
    }
    if !path.starts_with('/') {
        return bad("must start with '/'");
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') && !sequential {
        return bad("must not end with '/'");
    }
    let body = if sequential {
        path.strip_suffix('/').unwrap_or(path)
    } else {
        path
    };
    for c in path.chars() {
        match c {
            '\0' => return bad("contains a NUL character"),
            '\u{1}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => return bad("contains a control character"),
            '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}' => {
                return bad("contains a character ZooKeeper refuses")
            }
            _ => {}
        }
    }
    for part in body[1..].split('/') {
        match part {
            "" => return bad("empty path component ('//')"),
            "." | ".." => return bad("relative components '.' and '..' are not allowed"),
            _ => {}
        }
    }
    Ok(())
}

/// Parent of an absolute, validated path (`/` for top-level nodes).
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Last component of a path.
pub(crate) fn name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `parent/child`, without doubling the root's slash.
pub(crate) fn join(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// A fresh protection id: `_c_<uuid v4, lower-case>-`.
pub(crate) fn new_protected_id() -> String {
    format!("{PROTECTED_PREFIX}{}-", uuid::Uuid::new_v4())
}

/// Whose node-name conventions a recipe's nodes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Layout {
    /// Curator's: protection id `_c_<uuid>-`; missing parents made as containers.
    #[default]
    Curator,
    /// kazoo's: protection id the UUID's 32 hex digits; missing parents made persistent, as
    /// kazoo's `ensure_path` does. A kazoo lock makes sure of its path once and then creates
    /// under it for as long as it lives, so a parent the server reaped would fail it.
    Kazoo,
}

impl Layout {
    /// A fresh protection id for a node name in this layout.
    pub(crate) fn new_id(self) -> String {
        match self {
            Layout::Curator => new_protected_id(),
            Layout::Kazoo => uuid::Uuid::new_v4().simple().to_string(),
        }
    }
}

/// The protected form of `path`: the protection id put before the last component.
pub(crate) fn protected(path: &str, id: &str) -> String {
    join(parent(path), &format!("{id}{}", name(path)))
}

/// Checks a namespace (chroot without the leading slash, as Curator takes it).
pub(crate) fn validate_namespace(ns: &str) -> Result<String> {
    let path = format!("/{ns}");
    validate(&path, false)?;
    if path == "/" {
        return Err(Error::invalid("namespace must not be empty"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_zookeeper_rejects() {
        for p in [
            "", "a", "a/b", "/a/", "//", "/a//b", "/a/./b", "/a/..", "/.", "/a\0b", "/a\u{1}",
        ] {
            assert!(
                matches!(validate(p, false), Err(Error::InvalidPath { .. })),
                "{p:?} should be refused"
            );
        }
        for p in ["/", "/a", "/a/b", "/a.b/..c", "/zk-é"] {
            validate(p, false).unwrap();
        }
        validate("/locks/", true).unwrap();
        assert!(validate("/locks//", true).is_err());
    }

    #[test]
    fn path_parts() {
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b/c"), "/a/b");
        assert_eq!(name("/a/b/c"), "c");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }

    #[test]
    fn protected_names_have_curators_shape() {
        let id = new_protected_id();
        assert_eq!(id.len(), PROTECTED_ID_LEN);
        assert!(id.starts_with("_c_") && id.ends_with('-'));
        assert_eq!(id, id.to_lowercase());
        let p = protected("/locks/lock-", &id);
        assert_eq!(p, format!("/locks/{id}lock-"));
    }

    #[test]
    fn kazoo_ids_are_32_lower_case_hex_digits() {
        let id = Layout::Kazoo.new_id();
        assert_eq!(id.len(), 32);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(protected("/l/__lock__", &id), format!("/l/{id}__lock__"));
    }
}
