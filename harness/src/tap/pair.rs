//! Reply pairing: which frontend message each backend message answers, in one lane.
//!
//! The protocol answers requests in order, so a queue of the requests still waiting is enough
//! (pipelined requests simply queue). What ends a request's reply:
//! - StartupMessage and password messages: an authentication request that asks the client for
//!   something (cleartext, MD5, SASL, SASL continue, GSS) ends the message it answers; after
//!   AuthenticationOk the rest (ParameterStatus, BackendKeyData, ...) answers the same one
//!   until ReadyForQuery.
//! - Query and FunctionCall: everything up to and including ReadyForQuery (several statements'
//!   RowDescription, DataRow, CommandComplete in one reply; a COPY's CopyInResponse, after
//!   which the client's CopyData/CopyDone/CopyFail are `part_of` the Query).
//! - Extended protocol, each message its own request: Parse -> ParseComplete, Bind ->
//!   BindComplete, Close -> CloseComplete, Describe -> [ParameterDescription] RowDescription
//!   or NoData, Execute -> DataRow* then CommandComplete, EmptyQueryResponse or
//!   PortalSuspended (or a COPY), Sync -> ReadyForQuery. Flush and Terminate get no reply.
//!   An ErrorResponse ends the request it answers, and the server discards every extended
//!   message until the next Sync: those already queued are `skipped` by that error, those
//!   sent later are `discarded` as they pass.
//! - NotificationResponse answers nothing; NoticeResponse and ParameterStatus belong to the
//!   request in progress (a WARNING of an unlock, a SET's new value), if any.
//!   A reply when nothing waits answers nothing (`None`): an unsolicited message.
//!
//! Pure: fed message kinds in the order the tap handled them, it says what answers what.

use std::collections::VecDeque;

/// A frontend message, as far as pairing cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeKind {
    Startup,
    Password,
    Query,
    FunctionCall,
    Parse,
    Bind,
    Describe,
    Execute,
    Close,
    Sync,
    Flush,
    Terminate,
    CopyData,
    CopyDone,
    CopyFail,
    Other,
}

impl FeKind {
    pub fn of_tag(tag: u8) -> FeKind {
        match tag {
            b'p' => FeKind::Password,
            b'Q' => FeKind::Query,
            b'F' => FeKind::FunctionCall,
            b'P' => FeKind::Parse,
            b'B' => FeKind::Bind,
            b'D' => FeKind::Describe,
            b'E' => FeKind::Execute,
            b'C' => FeKind::Close,
            b'S' => FeKind::Sync,
            b'H' => FeKind::Flush,
            b'X' => FeKind::Terminate,
            b'd' => FeKind::CopyData,
            b'c' => FeKind::CopyDone,
            b'f' => FeKind::CopyFail,
            _ => FeKind::Other,
        }
    }

    fn extended(self) -> bool {
        matches!(
            self,
            FeKind::Parse | FeKind::Bind | FeKind::Describe | FeKind::Execute | FeKind::Close
        )
    }
}

/// A backend message, as far as pairing cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BeKind {
    /// An authentication message; `challenge`: it asks the client for an answer.
    Auth {
        challenge: bool,
    },
    ParameterStatus,
    Error,
    Notice,
    Notification,
    Ready,
    ParseComplete,
    BindComplete,
    CloseComplete,
    RowDescription,
    NoData,
    DataRow,
    /// CommandComplete, EmptyQueryResponse, PortalSuspended.
    Done,
    CopyIn,
    Other,
}

impl BeKind {
    /// From a frame's type byte and body (an authentication code is its first 4 bytes).
    pub fn of_frame(tag: u8, body: Option<&[u8]>) -> BeKind {
        match tag {
            b'R' => {
                let code = body
                    .filter(|b| b.len() >= 4)
                    .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                // 0 ok, 12 SASL final: nothing asked of the client.
                BeKind::Auth {
                    challenge: !matches!(code, Some(0) | Some(12)),
                }
            }
            b'S' => BeKind::ParameterStatus,
            b'E' => BeKind::Error,
            b'N' => BeKind::Notice,
            b'A' => BeKind::Notification,
            b'Z' => BeKind::Ready,
            b'1' => BeKind::ParseComplete,
            b'2' => BeKind::BindComplete,
            b'3' => BeKind::CloseComplete,
            b'T' => BeKind::RowDescription,
            b'n' => BeKind::NoData,
            b'D' => BeKind::DataRow,
            b'C' | b'I' | b's' => BeKind::Done,
            b'G' => BeKind::CopyIn,
            _ => BeKind::Other,
        }
    }
}

/// What pairing says of a frontend message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeOut {
    /// Sent while the server discards after an error: it gets no reply.
    pub discarded: bool,
    /// COPY data of this request.
    pub part_of: Option<u64>,
}

/// What pairing says of a backend message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BeOut {
    pub answers: Option<u64>,
    /// Requests this error made the server discard.
    pub skipped: Vec<u64>,
    /// A DataRow's index in its request's reply.
    pub row: Option<u32>,
}

#[derive(Debug)]
struct Pending {
    n: u64,
    kind: FeKind,
    rows: u32,
}

/// One lane's pairing state (see the module doc).
#[derive(Debug, Default)]
pub struct Pairing {
    queue: VecDeque<Pending>,
    copy_in: Option<u64>,
    discarding: bool,
}

impl Pairing {
    /// Requests waiting for (the rest of) their reply.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// A frontend message `n` passed.
    pub fn frontend(&mut self, n: u64, kind: FeKind) -> FeOut {
        let copy = matches!(kind, FeKind::CopyData | FeKind::CopyDone | FeKind::CopyFail);
        if copy && let Some(h) = self.copy_in {
            if kind != FeKind::CopyData {
                self.copy_in = None;
            }
            return FeOut {
                discarded: false,
                part_of: Some(h),
            };
        }
        match kind {
            FeKind::Flush | FeKind::Terminate | FeKind::Other => FeOut::default(),
            _ if copy => FeOut::default(),
            k if k.extended() && self.discarding => FeOut {
                discarded: true,
                part_of: None,
            },
            k => {
                if k == FeKind::Sync {
                    self.discarding = false;
                }
                self.queue.push_back(Pending {
                    n,
                    kind: k,
                    rows: 0,
                });
                FeOut::default()
            }
        }
    }

    /// A backend message passed.
    pub fn backend(&mut self, kind: BeKind) -> BeOut {
        let mut out = BeOut::default();
        if kind == BeKind::Notification {
            return out;
        }
        let Some(head) = self.queue.front_mut() else {
            return out;
        };
        out.answers = Some(head.n);
        let hk = head.kind;
        let pop = match kind {
            BeKind::Notice | BeKind::ParameterStatus | BeKind::Notification | BeKind::Other => {
                false
            }
            BeKind::DataRow => {
                out.row = Some(head.rows);
                head.rows += 1;
                false
            }
            BeKind::CopyIn => {
                self.copy_in = Some(head.n);
                false
            }
            BeKind::Auth { challenge } => challenge,
            BeKind::Ready => true,
            BeKind::ParseComplete | BeKind::BindComplete | BeKind::CloseComplete => true,
            BeKind::RowDescription | BeKind::NoData => hk == FeKind::Describe,
            BeKind::Done => hk == FeKind::Execute,
            BeKind::Error => {
                self.copy_in = None;
                // A simple query, a function call or a Sync still get their ReadyForQuery.
                !matches!(hk, FeKind::Query | FeKind::FunctionCall | FeKind::Sync)
            }
        };
        if pop {
            self.queue.pop_front();
        }
        if kind == BeKind::Error && hk.extended() {
            while self.queue.front().is_some_and(|p| p.kind.extended()) {
                out.skipped.push(self.queue.pop_front().expect("checked").n);
            }
            if !self.queue.iter().any(|p| p.kind == FeKind::Sync) {
                self.discarding = true;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(p: &mut Pairing, kinds: &[BeKind]) -> Vec<Option<u64>> {
        kinds.iter().map(|k| p.backend(*k).answers).collect()
    }

    /// Two pipelined simple queries: each reply up to its ReadyForQuery answers its own.
    #[test]
    fn pipelined_simple_queries_are_answered_in_order() {
        let mut p = Pairing::default();
        p.frontend(1, FeKind::Query);
        p.frontend(2, FeKind::Query);
        use BeKind::*;
        let got = answers(
            &mut p,
            &[RowDescription, DataRow, Done, Ready, Done, Ready, Ready],
        );
        assert_eq!(
            got,
            vec![Some(1), Some(1), Some(1), Some(1), Some(2), Some(2), None]
        );
    }

    /// Parse/Bind/Describe/Execute/Sync: each reply to its own message, rows counted.
    #[test]
    fn extended_replies_go_to_their_messages() {
        let mut p = Pairing::default();
        for (n, k) in [
            (1, FeKind::Parse),
            (2, FeKind::Bind),
            (3, FeKind::Describe),
            (4, FeKind::Execute),
            (5, FeKind::Flush),
            (6, FeKind::Sync),
        ] {
            assert_eq!(p.frontend(n, k), FeOut::default());
        }
        use BeKind::*;
        let rows: Vec<Option<u32>> = [
            ParseComplete,
            BindComplete,
            RowDescription,
            DataRow,
            DataRow,
        ]
        .iter()
        .map(|k| p.backend(*k).row)
        .collect();
        assert_eq!(rows, vec![None, None, None, Some(0), Some(1)]);
        assert_eq!(answers(&mut p, &[Done, Ready]), vec![Some(4), Some(6)]);
        assert_eq!(p.waiting(), 0);
    }

    /// An error on Bind: the Execute already queued is skipped by it; a Describe sent after
    /// the error but before the Sync is discarded; the Sync gets the ReadyForQuery.
    #[test]
    fn an_extended_error_skips_to_sync() {
        let mut p = Pairing::default();
        p.frontend(1, FeKind::Parse);
        p.frontend(2, FeKind::Bind);
        p.frontend(3, FeKind::Execute);
        use BeKind::*;
        assert_eq!(p.backend(ParseComplete).answers, Some(1));
        let e = p.backend(Error);
        assert_eq!((e.answers, e.skipped), (Some(2), vec![3]));
        assert!(p.frontend(4, FeKind::Describe).discarded);
        assert!(!p.frontend(5, FeKind::Sync).discarded);
        assert_eq!(p.backend(Ready).answers, Some(5));
        // After the Sync, messages count again.
        assert!(!p.frontend(6, FeKind::Parse).discarded);
        assert_eq!(p.backend(ParseComplete).answers, Some(6));
    }

    /// A simple query's error does not end it: its ReadyForQuery does.
    #[test]
    fn a_simple_query_error_waits_for_ready() {
        let mut p = Pairing::default();
        p.frontend(1, FeKind::Query);
        p.frontend(2, FeKind::Query);
        use BeKind::*;
        assert_eq!(
            answers(&mut p, &[Error, Ready, Done, Ready]),
            vec![Some(1), Some(1), Some(2), Some(2)]
        );
    }

    /// SCRAM: the startup gets the SASL request, the initial response the continue, the final
    /// response everything from SASL final to ReadyForQuery.
    #[test]
    fn authentication_pairs_each_challenge_with_its_message() {
        let mut p = Pairing::default();
        p.frontend(1, FeKind::Startup);
        let sasl = BeKind::Auth { challenge: true };
        assert_eq!(p.backend(sasl).answers, Some(1));
        p.frontend(3, FeKind::Password);
        assert_eq!(p.backend(sasl).answers, Some(3));
        p.frontend(5, FeKind::Password);
        use BeKind::*;
        let got = answers(
            &mut p,
            &[
                Auth { challenge: false },
                Auth { challenge: false },
                ParameterStatus,
                Other,
                Ready,
            ],
        );
        assert_eq!(got, vec![Some(5); 5]);
        assert_eq!(p.waiting(), 0);
    }

    /// COPY FROM STDIN in a simple query: the client's data is part of the query, the
    /// CommandComplete and ReadyForQuery answer it.
    #[test]
    fn copy_in_data_belongs_to_its_query() {
        let mut p = Pairing::default();
        p.frontend(1, FeKind::Query);
        assert_eq!(p.backend(BeKind::CopyIn).answers, Some(1));
        assert_eq!(p.frontend(3, FeKind::CopyData).part_of, Some(1));
        assert_eq!(p.frontend(4, FeKind::CopyDone).part_of, Some(1));
        // After CopyDone the next CopyData is not part of anything.
        assert_eq!(p.frontend(5, FeKind::CopyData).part_of, None);
        assert_eq!(
            answers(&mut p, &[BeKind::Done, BeKind::Ready]),
            vec![Some(1), Some(1)]
        );
    }

    /// A notification answers nothing, even while a query waits; a notice belongs to it.
    #[test]
    fn notifications_are_asynchronous() {
        let mut p = Pairing::default();
        p.frontend(1, FeKind::Query);
        assert_eq!(p.backend(BeKind::Notification).answers, None);
        assert_eq!(p.backend(BeKind::Notice).answers, Some(1));
        assert_eq!(p.backend(BeKind::Ready).answers, Some(1));
        assert_eq!(p.backend(BeKind::Notice).answers, None);
    }
}

#[cfg(test)]
mod recorded {
    use super::*;
    use crate::tap::record::{Be, Body, Fe, parse_lines};

    /// The request kinds a reply may answer (the protocol's, written here independently of
    /// the pairing rules).
    fn fits(fe: &Fe, be: &Be) -> bool {
        use Be as B;
        match be {
            B::Authentication { .. } | B::BackendKeyData { .. } => {
                matches!(fe, Fe::Startup { .. } | Fe::Password { .. })
            }
            B::ParseComplete => matches!(fe, Fe::Parse { .. }),
            B::BindComplete => matches!(fe, Fe::Bind { .. }),
            B::CloseComplete => matches!(fe, Fe::Close { .. }),
            B::ParameterDescription { .. } | B::NoData => matches!(fe, Fe::Describe { .. }),
            B::RowDescription { .. } => matches!(fe, Fe::Describe { .. } | Fe::Query { .. }),
            B::DataRow { .. } | B::CommandComplete { .. } | B::EmptyQueryResponse => {
                matches!(fe, Fe::Execute { .. } | Fe::Query { .. })
            }
            B::ReadyForQuery { .. } => matches!(
                fe,
                Fe::Sync | Fe::Query { .. } | Fe::Password { .. } | Fe::Startup { .. }
            ),
            _ => true,
        }
    }

    /// Real transcripts (psql, psycopg 3, Rails 6.1 through PgBouncer) fed again to a fresh
    /// pairing in the order the tap saw them: every reply answers a request it can answer,
    /// and what the pairing says now is what the tap recorded.
    #[test]
    fn recorded_transcripts_pair_each_reply_with_a_request_that_fits() {
        for name in [
            "psql-session-mode.jsonl",
            "psycopg3-transaction-mode.jsonl",
            "rails61-transaction-mode.jsonl",
        ] {
            let path = format!("{}/tests/fixtures/tap/{name}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let events = parse_lines(text.lines().map(|l| Ok(l.to_string()))).unwrap();
            let mut lanes: std::collections::HashMap<
                u64,
                (Pairing, std::collections::HashMap<u64, Fe>),
            > = Default::default();
            let mut checked = 0;
            for e in &events {
                match &e.body {
                    Body::Fe { lane, n, msg, .. } => {
                        let (p, sent) = lanes.entry(*lane).or_default();
                        let kind = match msg {
                            Fe::Startup { .. } => FeKind::Startup,
                            Fe::SslRequest => continue,
                            Fe::Password { .. } => FeKind::Password,
                            Fe::Query { .. } => FeKind::Query,
                            Fe::Parse { .. } => FeKind::Parse,
                            Fe::Bind { .. } => FeKind::Bind,
                            Fe::Describe { .. } => FeKind::Describe,
                            Fe::Execute { .. } => FeKind::Execute,
                            Fe::Close { .. } => FeKind::Close,
                            Fe::Sync => FeKind::Sync,
                            Fe::Terminate => FeKind::Terminate,
                            _ => FeKind::Other,
                        };
                        p.frontend(*n, kind);
                        sent.insert(*n, msg.clone());
                    }
                    Body::Be {
                        lane, msg, answers, ..
                    } => {
                        let (p, sent) = lanes.get_mut(lane).unwrap();
                        let kind = match msg {
                            Be::Authentication { code, .. } => BeKind::Auth {
                                challenge: !matches!(code, 0 | 12),
                            },
                            Be::ErrorResponse(_) => BeKind::Error,
                            Be::NoticeResponse(_) => BeKind::Notice,
                            Be::ReadyForQuery { .. } => BeKind::Ready,
                            Be::ParseComplete => BeKind::ParseComplete,
                            Be::BindComplete => BeKind::BindComplete,
                            Be::CloseComplete => BeKind::CloseComplete,
                            Be::RowDescription { .. } => BeKind::RowDescription,
                            Be::NoData => BeKind::NoData,
                            Be::DataRow { .. } => BeKind::DataRow,
                            Be::CommandComplete { .. }
                            | Be::EmptyQueryResponse
                            | Be::PortalSuspended => BeKind::Done,
                            _ => BeKind::Other,
                        };
                        let got = p.backend(kind).answers;
                        assert_eq!(got, *answers, "{name}: {e:?}");
                        let fe = sent
                            .get(&got.expect("every reply here answers something"))
                            .unwrap();
                        assert!(fits(fe, msg), "{name}: {msg:?} answers {fe:?}");
                        checked += 1;
                    }
                    _ => {}
                }
            }
            assert!(checked > 20, "{name}: {checked}");
        }
    }
}
