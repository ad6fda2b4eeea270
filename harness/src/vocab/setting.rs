//! Session settings (GUCs) a client may `SET`, `SET LOCAL` and read back (`show`): one row per
//! setting ([`GUCS`]), and how a session's values move with its transactions
//! ([`SessionSettings`]), the semantics both the model (a backend's settings) and the
//! application's view (what a client expects to read) follow. Confirmed by hand on PostgreSQL
//! 18.6 behind PgBouncer 1.24.1 (docs/session-state.md).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A setting the workload may `SET`: each is a duration in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guc {
    /// What Airflow sets before `pg_advisory_lock`.
    LockTimeout,
    StatementTimeout,
}

/// One setting: its name, and the values a client sets (`base_ms + 100 * n` for client `n`,
/// 1-based, so every client's value is its own and a value read says who set it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GucRow {
    pub guc: Guc,
    pub name: &'static str,
    /// Chosen so that no value ends anything a case does: a `lock_timeout` value is a lock
    /// wait's bound (the run's bounds take the largest into account), a `statement_timeout`
    /// value is a minute past any statement of a case.
    pub base_ms: u64,
}

/// Every setting the workload may set.
pub const GUCS: &[GucRow] = &[
    GucRow {
        guc: Guc::LockTimeout,
        name: "lock_timeout",
        base_ms: 1000,
    },
    GucRow {
        guc: Guc::StatementTimeout,
        name: "statement_timeout",
        base_ms: 60_000,
    },
];

/// What `show` replies when the session has not set the value: the role's or the server's
/// own (`pg_settings.source` is not `session`).
pub const DEFAULT: &str = "default";

impl Guc {
    pub const ALL: [Guc; 2] = [Guc::LockTimeout, Guc::StatementTimeout];

    pub fn row(self) -> &'static GucRow {
        GUCS.iter()
            .find(|r| r.guc == self)
            .expect("every guc has a row")
    }

    /// The SQL name.
    pub fn name(self) -> &'static str {
        self.row().name
    }

    pub fn from_name(s: &str) -> Option<Guc> {
        GUCS.iter().find(|r| r.name == s).map(|r| r.guc)
    }

    /// The value client `client` (0-based) sets.
    pub fn value_of(self, client: usize) -> u64 {
        self.row().base_ms + 100 * (client as u64 + 1)
    }

    /// The client (0-based) whose value this is, if it is one.
    pub fn setter_of(self, ms: u64) -> Option<usize> {
        let base = self.row().base_ms;
        (ms > base && (ms - base).is_multiple_of(100)).then(|| ((ms - base) / 100 - 1) as usize)
    }

    /// The largest value of this setting that clients `0..clients` set.
    pub fn largest(self, clients: usize) -> u64 {
        self.value_of(clients.saturating_sub(1))
    }
}

impl fmt::Display for Guc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A session's settings as PostgreSQL keeps them: values set for the session, values set
/// `LOCAL` to the open transaction, and the session's values at `BEGIN` (a rollback restores
/// them; a commit keeps what `SET` did inside the transaction). A value not set is the
/// default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SessionSettings {
    pub session: BTreeMap<Guc, u64>,
    pub local: BTreeMap<Guc, u64>,
    /// `Some` while a transaction block is open.
    pub at_begin: Option<BTreeMap<Guc, u64>>,
}

impl SessionSettings {
    /// The value `SHOW` reads: the transaction's `LOCAL` one, else the session's; `None`:
    /// the default.
    pub fn show(&self, g: Guc) -> Option<u64> {
        self.local.get(&g).or_else(|| self.session.get(&g)).copied()
    }

    /// `show`'s reply text.
    pub fn shown(&self, g: Guc) -> String {
        self.show(g)
            .map(|v| v.to_string())
            .unwrap_or_else(|| DEFAULT.into())
    }

    pub fn is_default(&self) -> bool {
        self.session.is_empty() && self.local.is_empty()
    }

    /// `SET g = v`: the session's value (it overrides a `SET LOCAL` of the same
    /// transaction, and survives its commit).
    pub fn set(&mut self, g: Guc, v: u64) {
        self.session.insert(g, v);
        self.local.remove(&g);
    }

    /// `SET LOCAL g = v`: only inside a transaction block (outside one PostgreSQL warns and
    /// it lasts no longer than its own statement's message).
    pub fn set_local(&mut self, g: Guc, v: u64) {
        if self.at_begin.is_some() {
            self.local.insert(g, v);
        }
    }

    /// `BEGIN`.
    pub fn begin(&mut self) {
        if self.at_begin.is_none() {
            self.at_begin = Some(self.session.clone());
        }
    }

    /// The transaction block ends: committed (its `SET`s stay), or rolled back / aborted
    /// (the session's values at `BEGIN` come back). `LOCAL` values end either way.
    pub fn end(&mut self, committed: bool) {
        if let Some(before) = self.at_begin.take()
            && !committed
        {
            self.session = before;
        }
        self.local.clear();
    }

    /// `RESET ALL` / `DISCARD ALL` (outside a transaction): every value back to its default.
    pub fn reset_all(&mut self) {
        self.session.clear();
        self.local.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_setter() {
        for g in Guc::ALL {
            assert_eq!(Guc::from_name(g.name()), Some(g));
            for c in 0..8 {
                assert_eq!(g.setter_of(g.value_of(c)), Some(c), "{g} C{}", c + 1);
            }
            assert_eq!(g.setter_of(g.row().base_ms), None);
            assert_eq!(g.setter_of(7), None);
            assert_eq!(g.largest(3), g.value_of(2));
        }
        assert_eq!(Guc::LockTimeout.value_of(0), 1100);
        assert_eq!(Guc::from_name("work_mem"), None);
    }

    #[test]
    fn settings_follow_their_transaction() {
        let g = Guc::LockTimeout;
        let mut s = SessionSettings::default();
        assert_eq!(s.shown(g), DEFAULT);
        s.set_local(g, 5);
        assert_eq!(
            s.show(g),
            None,
            "SET LOCAL outside a transaction does nothing"
        );
        s.set(g, 1);
        assert_eq!(s.shown(g), "1");
        // A rolled-back SET comes undone; SET LOCAL ends with its transaction.
        s.begin();
        s.set(g, 2);
        s.set_local(Guc::StatementTimeout, 3);
        assert_eq!(
            (s.show(g), s.show(Guc::StatementTimeout)),
            (Some(2), Some(3))
        );
        s.end(false);
        assert_eq!((s.show(g), s.show(Guc::StatementTimeout)), (Some(1), None));
        // A committed SET stays, over a SET LOCAL before it.
        s.begin();
        s.set_local(g, 4);
        assert_eq!(s.show(g), Some(4));
        s.set(g, 6);
        s.end(true);
        assert_eq!(s.show(g), Some(6));
        // A SET LOCAL after a SET shows until the commit, then the SET's value.
        s.begin();
        s.set(g, 7);
        s.set_local(g, 8);
        assert_eq!(s.show(g), Some(8));
        s.end(true);
        assert_eq!(s.show(g), Some(7));
        s.reset_all();
        assert!(s.is_default());
    }
}
