//! ZooKeeper's answers as zklock's one [`Error`].

use crate::core::error::Error;

impl Error {
    /// Maps a wire-client error for the operation on `path`.
    pub(crate) fn from_zk(err: zookeeper_client::Error, path: &str) -> Error {
        use zookeeper_client::Error as Zk;
        match err {
            // OperationTimeout and SessionMoved are retried like Curator does (RetryLoop).
            Zk::ConnectionLoss | Zk::Timeout | Zk::SessionMoved => Error::ConnectionLoss,
            // The wire client fails in-flight requests with the socket's own error (a reset,
            // an idle timeout) when a connection dies: the outcome is unknown, as with
            // ConnectionLoss.
            Zk::Custom(e) => {
                tracing::debug!("{path:?}: connection failed: {e}");
                Error::ConnectionLoss
            }
            Zk::SessionExpired => Error::SessionExpired,
            Zk::ClientClosed => Error::Closed,
            Zk::NoNode => Error::NoNode(path.to_owned()),
            Zk::NodeExists => Error::NodeExists(path.to_owned()),
            Zk::NotEmpty => Error::NotEmpty(path.to_owned()),
            Zk::BadVersion => Error::BadVersion(path.to_owned()),
            Zk::NoAuth => Error::NoAuth(path.to_owned()),
            Zk::InvalidAcl => Error::InvalidArgument(format!(
                "{path:?}: the server refused the ACL (InvalidACL); an `auth` entry such as \
                 Acl::creator_all() needs a session with credentials"
            )),
            Zk::AuthFailed => Error::AuthFailed(
                "the server refused the session's authentication (AuthFailed)".to_owned(),
            ),
            Zk::BadArguments(msg) => Error::InvalidArgument(format!("{path:?}: {msg}")),
            Zk::NoChildrenForEphemerals => Error::NoChildrenForEphemerals(path.to_owned()),
            other => Error::ZooKeeper(format!("{path:?}: {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_errors_map_by_what_the_caller_can_do() {
        use zookeeper_client::Error as Zk;
        assert_eq!(
            Error::from_zk(Zk::ConnectionLoss, "/a"),
            Error::ConnectionLoss
        );
        assert_eq!(
            Error::from_zk(Zk::SessionMoved, "/a"),
            Error::ConnectionLoss
        );
        assert_eq!(
            Error::from_zk(Zk::SessionExpired, "/a"),
            Error::SessionExpired
        );
        assert_eq!(Error::from_zk(Zk::NoNode, "/a"), Error::NoNode("/a".into()));
        assert_eq!(Error::from_zk(Zk::NoAuth, "/a"), Error::NoAuth("/a".into()));
        assert!(matches!(
            Error::from_zk(Zk::AuthFailed, "/a"),
            Error::AuthFailed(_)
        ));
        assert!(matches!(
            Error::from_zk(Zk::InvalidAcl, "/a"),
            Error::InvalidArgument(_)
        ));
        assert_eq!(
            Error::from_zk(Zk::NoChildrenForEphemerals, "/a/b"),
            Error::NoChildrenForEphemerals("/a/b".into())
        );
        assert!(matches!(
            Error::from_zk(Zk::Unimplemented, "/a"),
            Error::ZooKeeper(_)
        ));
        assert!(Error::ConnectionLoss.is_retryable());
        assert!(!Error::SessionExpired.is_retryable());
    }
}
