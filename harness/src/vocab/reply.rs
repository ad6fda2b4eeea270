//! What an operation returned, at the level the model predicts, and how a history classes it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// SQLSTATEs the model predicts, and the harness's own codes.
pub mod code {
    pub const LOCK_NOT_AVAILABLE: &str = "55P03";
    pub const IN_FAILED_TRANSACTION: &str = "25P02";
    pub const ACTIVE_TRANSACTION: &str = "25001";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const QUERY_CANCELED: &str = "57014";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    /// `terminating connection due to administrator command` (pg_terminate_backend, and a
    /// fast shutdown).
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    /// `terminating connection because of crash of another server process`.
    pub const CRASH_SHUTDOWN: &str = "57P02";
    /// `the database system is starting up` / `shutting down` / `in recovery mode`.
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    /// PgBouncer's own fatal errors (`server conn crashed?`, `database removed`, ...) carry
    /// `protocol_violation`.
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    /// pgpool-II's fatal `unable to read data from DB node N` (`internal_error`, pool_stream.c)
    /// when the backend under a client ended: the child closes the client's connection
    /// (docs/pgpool.md §10, K5).
    pub const INTERNAL_ERROR: &str = "XX000";
    /// Not a SQLSTATE: the client's connection is gone.
    pub const CLOSED: &str = "closed";
    /// Not a SQLSTATE: no reply within the bound (a cancel was sent).
    pub const TIMEOUT: &str = "timeout";
    /// Not a SQLSTATE: a client profile took its tool's own error path (`raise`).
    pub const RAISED: &str = "raised";
    /// Not a SQLSTATE: `execute_protocol` with no protocol-level statement prepared on the
    /// client's connection: nothing was sent.
    pub const NO_STATEMENT: &str = "no_statement";
    /// Not a SQLSTATE: the client's connection did not open (its `open` timed out or was
    /// refused): the step's op sent nothing.
    pub const NOT_CONNECTED: &str = "not_connected";
    /// Not a SQLSTATE: the reply was not what the op returns (a harness defect).
    pub const HARNESS: &str = "harness";
    /// Not a SQLSTATE: the reply answers another statement than the one the client sent: the
    /// identity row echoes another step, or the reply has the wrong shape (no identity row
    /// where one is always due, a row where none is). The pooler's replies slipped out of
    /// step with the statements (PgBouncer 1.24.1 after a notification raced a client's
    /// leaving: docs/session-state.md, "Replies out of step"). What the statement did is
    /// unknown, and the client closes the connection: [`super::Reply::is_closed`].
    pub const OUT_OF_STEP: &str = "out_of_step";
}

/// What an op returned (error messages are kept for people but not compared).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    Bool {
        value: bool,
    },
    Ok,
    /// A value read (`show`: a setting's value, or `default`).
    Text {
        value: String,
    },
    /// `code` is the SQLSTATE, or `closed` (connection gone), `timeout`, `harness`.
    Error {
        code: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        message: String,
    },
}

/// How a history classes a completion (Jepsen's `:ok`, `:fail`, `:info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The op took effect as its reply says.
    Ok,
    /// The op failed with a definite error: PostgreSQL's own semantics say what it did.
    Fail,
    /// Outcome unknown: the connection died under it, or no reply came in time.
    Info,
}

impl Reply {
    pub fn error(code: &str) -> Reply {
        Reply::Error {
            code: code.into(),
            message: String::new(),
        }
    }

    /// Equal as the model sees it: kind, boolean value, error code.
    pub fn same_as(&self, other: &Reply) -> bool {
        match (self, other) {
            (Reply::Bool { value: a }, Reply::Bool { value: b }) => a == b,
            (Reply::Ok, Reply::Ok) => true,
            (Reply::Text { value: a }, Reply::Text { value: b }) => a == b,
            (Reply::Error { code: a, .. }, Reply::Error { code: b, .. }) => a == b,
            _ => false,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error { .. })
    }

    /// The SQLSTATE or harness code of an error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Reply::Error { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The connection was gone (`closed`), or the client closed it because a reply came out
    /// of step (`out_of_step`): either way the statement's effect is unknown and the client
    /// has no connection after it.
    pub fn is_closed(&self) -> bool {
        matches!(self.code(), Some(code::CLOSED | code::OUT_OF_STEP))
    }

    /// Only a statement that reached a server gives this reply, never a refused connect: a
    /// cancel (57014) interrupts a running statement; a lock wait (55P03), a division by zero
    /// (22012), a failed or active transaction block (25P02, 25001) are a statement's errors.
    /// A step whose connect failed records the refusal's SQLSTATE instead (53300, 08P01,
    /// 57P03, ...), or `closed`/`timeout`.
    pub fn ran_a_statement(&self) -> bool {
        matches!(
            self.code(),
            Some(
                code::QUERY_CANCELED
                    | code::LOCK_NOT_AVAILABLE
                    | code::DIVISION_BY_ZERO
                    | code::IN_FAILED_TRANSACTION
                    | code::ACTIVE_TRANSACTION
            )
        )
    }

    /// The reply answered another statement (`out_of_step`).
    pub fn is_out_of_step(&self) -> bool {
        self.code() == Some(code::OUT_OF_STEP)
    }

    /// The connection was ended under the statement: found `closed`, or the server's last
    /// word read first and passed on: PostgreSQL's 57P01 (`pg_terminate_backend`, a fast
    /// shutdown), 57P02 (a crash reset), 57P03 (shutting down, starting up), PgBouncer's
    /// fatal 08P01, or pgpool-II's fatal XX000.
    pub fn ended_by_server(&self) -> bool {
        self.is_closed()
            || matches!(
                self.code(),
                Some(
                    code::ADMIN_SHUTDOWN
                        | code::CRASH_SHUTDOWN
                        | code::CANNOT_CONNECT_NOW
                        | code::PROTOCOL_VIOLATION
                        | code::INTERNAL_ERROR
                )
            )
    }

    /// `ok` for a result, `fail` for a server error, `info` when the outcome is unknown.
    pub fn outcome(&self) -> Outcome {
        match self.code() {
            None => Outcome::Ok,
            Some(code::CLOSED | code::TIMEOUT | code::OUT_OF_STEP) => Outcome::Info,
            Some(_) => Outcome::Fail,
        }
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Bool { value } => write!(f, "{value}"),
            Reply::Ok => write!(f, "ok"),
            Reply::Text { value } => write!(f, "{value}"),
            Reply::Error { code, .. } => write!(f, "error {code}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_compare_by_kind_value_and_code() {
        assert!(Reply::Bool { value: true }.same_as(&Reply::Bool { value: true }));
        assert!(!Reply::Bool { value: true }.same_as(&Reply::Bool { value: false }));
        let a = Reply::Error {
            code: "55P03".into(),
            message: "x".into(),
        };
        assert!(a.same_as(&Reply::error("55P03")));
        assert!(!a.same_as(&Reply::error("25P02")));
        assert!(!a.same_as(&Reply::Ok));
    }

    #[test]
    fn outcomes_follow_jepsen() {
        assert_eq!(Reply::Ok.outcome(), Outcome::Ok);
        assert_eq!(Reply::Bool { value: false }.outcome(), Outcome::Ok);
        assert_eq!(Reply::error("55P03").outcome(), Outcome::Fail);
        assert_eq!(Reply::error(code::CLOSED).outcome(), Outcome::Info);
        assert_eq!(Reply::error(code::TIMEOUT).outcome(), Outcome::Info);
        let out = Reply::error(code::OUT_OF_STEP);
        assert_eq!(out.outcome(), Outcome::Info);
        assert!(out.is_closed() && out.ended_by_server() && out.is_out_of_step());
        assert!(!Reply::error(code::CLOSED).is_out_of_step());
    }

    #[test]
    fn serialised_compactly() {
        let j = serde_json::to_string(&Reply::error("55P03")).unwrap();
        assert_eq!(j, r#"{"kind":"error","code":"55P03"}"#);
        assert_eq!(
            serde_json::from_str::<Reply>(&j).unwrap(),
            Reply::error("55P03")
        );
    }
}
