//! Session settings (GUCs) a client may `SET`, `SET LOCAL` and read back (`show`): one row per
//! setting ([`GUCS`]), and how a session's values move with its transactions
//! ([`SessionSettings`]), the semantics both the model (a backend's settings) and the
//! application's view (what a client expects to read) follow. Confirmed by hand on PostgreSQL
//! 18.6 behind PgBouncer 1.24.1 (docs/session-state.md).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A setting the workload may `SET`: a duration in milliseconds, or a schema search path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guc {
    /// What Airflow sets before `pg_advisory_lock`.
    LockTimeout,
    StatementTimeout,
    /// A schema leaked to another client resolves its unqualified names elsewhere. The
    /// schemas need not exist (PostgreSQL skips missing ones when it resolves a name).
    SearchPath,
    /// `SET ROLE`: a role leaked to another client is a privilege leaked. The roles are the
    /// harness's (`pgchaos_r<n>`, NOLOGIN, granted to the client role: `sql::client_roles`).
    Role,
}

/// How a setting's values are written in `SET` and read back from `pg_settings.setting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds: `SET g = '1100ms'`, read back as `1100`.
    Ms,
    /// A schema name: `SET g = 'pgchaos_s1'`, read back as `pgchaos_s1`.
    Schema,
    /// A role name: `SET role = 'pgchaos_r1'` (the same as `SET ROLE pgchaos_r1`), read back
    /// from `current_setting('role')` (`pg_settings` has no row for it; unset, it is `none`).
    Role,
}

/// The prefix of a [`Unit::Schema`] value's schema name.
pub const SCHEMA_PREFIX: &str = "pgchaos_s";

/// The prefix of a [`Unit::Role`] value's role name.
pub const ROLE_PREFIX: &str = "pgchaos_r";

impl Unit {
    /// The value as `pg_settings.setting` shows it (and as `show` replies).
    pub fn text(self, v: u64) -> String {
        match self {
            Unit::Ms => v.to_string(),
            Unit::Schema => format!("{SCHEMA_PREFIX}{v}"),
            Unit::Role => format!("{ROLE_PREFIX}{v}"),
        }
    }

    /// The SQL literal `SET` sends.
    pub fn literal(self, v: u64) -> String {
        match self {
            Unit::Ms => format!("'{v}ms'"),
            Unit::Schema | Unit::Role => format!("'{}'", self.text(v)),
        }
    }

    /// The expression `show` reads: the value when this session set it (`SET` or `SET
    /// LOCAL`), else [`DEFAULT`] (the role's or the server's own). A value the session set
    /// equal to its reset value is the default too: a pooler that tracks the setting
    /// (`PoolRules::tracked_settings`) restores a client that never set it with a `SET` of
    /// the default (source `session`, setting = `reset_val`; docs/session-state.md,
    /// "Settings a pooler tracks"). No client sets the default: each sets its own value.
    pub fn show_sql(self, name: &str) -> String {
        match self {
            Unit::Ms | Unit::Schema => format!(
                "(SELECT CASE WHEN source = 'session' AND setting IS DISTINCT FROM reset_val \
                 THEN setting ELSE '{DEFAULT}' END FROM pg_settings WHERE name = '{name}')"
            ),
            Unit::Role => format!(
                "(SELECT CASE WHEN v = 'none' THEN '{DEFAULT}' ELSE v END \
                 FROM current_setting('{name}') v)"
            ),
        }
    }

    /// The value as a step's label shows it (`1100ms`, `pgchaos_s1`).
    pub fn label(self, v: u64) -> String {
        match self {
            Unit::Ms => format!("{v}ms"),
            Unit::Schema | Unit::Role => self.text(v),
        }
    }

    /// The value `text` reads back, if it is one of this unit's.
    pub fn parse(self, text: &str) -> Option<u64> {
        match self {
            Unit::Ms => text.parse().ok(),
            Unit::Schema => text.strip_prefix(SCHEMA_PREFIX)?.parse().ok(),
            Unit::Role => text.strip_prefix(ROLE_PREFIX)?.parse().ok(),
        }
    }
}

/// One setting: its name, its unit, and the values a client sets (`base + step * n` for client
/// `n`, 1-based, so every client's value is its own and a value read says who set it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GucRow {
    pub guc: Guc,
    pub name: &'static str,
    pub unit: Unit,
    /// Chosen so that no value ends anything a case does: a `lock_timeout` value is a lock
    /// wait's bound (the run's bounds take the largest into account), a `statement_timeout`
    /// value is a minute past any statement of a case.
    pub base: u64,
    pub step: u64,
    /// `RESET ALL` resets it (every setting but `role`: RESET ALL keeps the role, DISCARD ALL
    /// and `RESET ROLE` reset it; docs/session-state.md, "SET ROLE and search_path").
    pub reset_all_clears: bool,
    /// PostgreSQL reports its changes to the client (`ParameterStatus`, a `GUC_REPORT`
    /// setting), so a pooler can track each client's value and restore it on whichever server
    /// it links the client to (PgBouncer's `track_extra_parameters`). Observed on 18.6 behind
    /// PgBouncer 1.24.1 (docs/session-state.md, "Settings a pooler tracks"): `search_path` is
    /// reported and follows its client; `role`, `lock_timeout`, `statement_timeout` are not,
    /// and leak even when listed.
    pub reported: bool,
}

/// Every setting the workload may set.
pub const GUCS: &[GucRow] = &[
    GucRow {
        guc: Guc::LockTimeout,
        name: "lock_timeout",
        unit: Unit::Ms,
        base: 1000,
        step: 100,
        reset_all_clears: true,
        reported: false,
    },
    GucRow {
        guc: Guc::StatementTimeout,
        name: "statement_timeout",
        unit: Unit::Ms,
        base: 60_000,
        step: 100,
        reset_all_clears: true,
        reported: false,
    },
    GucRow {
        guc: Guc::SearchPath,
        name: "search_path",
        unit: Unit::Schema,
        base: 0,
        step: 1,
        reset_all_clears: true,
        reported: true,
    },
    GucRow {
        guc: Guc::Role,
        name: "role",
        unit: Unit::Role,
        base: 0,
        step: 1,
        reset_all_clears: false,
        reported: false,
    },
];

/// What `show` replies when the session has not set the value: the role's or the server's
/// own (`pg_settings.source` is not `session`).
pub const DEFAULT: &str = "default";

impl Guc {
    pub const ALL: [Guc; 4] = [
        Guc::LockTimeout,
        Guc::StatementTimeout,
        Guc::SearchPath,
        Guc::Role,
    ];

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
        let r = self.row();
        r.base + r.step * (client as u64 + 1)
    }

    /// The value client `client` sets, as `show` reads it back.
    pub fn text_of(self, client: usize) -> String {
        self.row().unit.text(self.value_of(client))
    }

    /// The client (0-based) whose value this is, if it is one.
    pub fn setter_of(self, v: u64) -> Option<usize> {
        let r = self.row();
        (v > r.base && (v - r.base).is_multiple_of(r.step))
            .then(|| ((v - r.base) / r.step - 1) as usize)
    }

    /// The client (0-based) whose value `shown` (a `show` reply) is, if it is one.
    pub fn setter_of_text(self, shown: &str) -> Option<usize> {
        self.row().unit.parse(shown).and_then(|v| self.setter_of(v))
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

/// The values a pooler keeps for one client connection, of the settings it tracks
/// (`PoolRules::tracked_settings`): what the client last saw reported (`None`: the default).
/// Learned when the client's server goes back to the pool, restored on the next server it is
/// linked to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tracked([Option<u64>; Guc::ALL.len()]);

impl Tracked {
    fn at(g: Guc) -> usize {
        Guc::ALL.iter().position(|x| *x == g).expect("in ALL")
    }

    pub fn get(&self, g: Guc) -> Option<u64> {
        self.0[Self::at(g)]
    }

    /// The client leaves server settings `s` (outside a transaction): the pooler has seen
    /// each tracked setting's value reported.
    pub fn learn(&mut self, tracked: &[Guc], s: &SessionSettings) {
        for g in tracked {
            self.0[Self::at(*g)] = s.show(*g);
        }
    }

    /// The pooler links the client to a server with settings `s`: it sets each tracked
    /// setting to the client's value (a `SET`, or the default's).
    pub fn restore(&self, tracked: &[Guc], s: &mut SessionSettings) {
        for g in tracked {
            match self.get(*g) {
                Some(v) => s.set(*g, v),
                None => s.reset(*g),
            }
        }
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
            .map(|v| g.row().unit.text(v))
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

    /// `RESET g`: back to the default, for the session (inside a transaction until it ends:
    /// a rollback restores the value, as for `SET`).
    pub fn reset(&mut self, g: Guc) {
        self.session.remove(&g);
        self.local.remove(&g);
    }

    /// The settings `f` picks back to their defaults (a reset outside a transaction).
    pub fn reset_where(&mut self, f: impl Fn(Guc) -> bool) {
        self.session.retain(|g, _| !f(*g));
        self.local.retain(|g, _| !f(*g));
    }

    /// `RESET ALL`: every setting whose row says so (not the role).
    pub fn reset_all(&mut self) {
        self.reset_where(|g| g.row().reset_all_clears);
    }

    /// `DISCARD ALL` (outside a transaction): every value back to its default, the role too.
    pub fn discard_all(&mut self) {
        self.reset_where(|_| true);
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
            assert_eq!(g.setter_of(g.row().base), None);
            assert_eq!(g.setter_of_text(&g.text_of(2)), Some(2));
            assert_eq!(g.setter_of_text(DEFAULT), None);
            assert_eq!(g.largest(3), g.value_of(2));
        }
        assert_eq!(Guc::LockTimeout.value_of(0), 1100);
        assert_eq!(Guc::from_name("work_mem"), None);
        assert_eq!(Guc::LockTimeout.setter_of(7), None);
        assert_eq!(Guc::SearchPath.text_of(0), "pgchaos_s1");
        assert_eq!(Guc::SearchPath.row().unit.literal(1), "'pgchaos_s1'");
        assert_eq!(Guc::LockTimeout.row().unit.literal(1100), "'1100ms'");
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

    /// The hand transcript (docs/session-state.md, "SET ROLE and search_path"): RESET ALL
    /// keeps the role, DISCARD ALL resets it, a rolled-back RESET ROLE is undone.
    #[test]
    fn the_role_survives_reset_all_but_not_discard_all() {
        let mut s = SessionSettings::default();
        assert_eq!(s.shown(Guc::Role), DEFAULT);
        s.set(Guc::Role, Guc::Role.value_of(0));
        s.set(Guc::SearchPath, Guc::SearchPath.value_of(0));
        assert_eq!(s.shown(Guc::Role), "pgchaos_r1");
        s.reset_all();
        assert_eq!(s.shown(Guc::Role), "pgchaos_r1");
        assert_eq!(s.shown(Guc::SearchPath), DEFAULT);
        s.begin();
        s.reset(Guc::Role);
        assert_eq!(s.shown(Guc::Role), DEFAULT);
        s.end(false);
        assert_eq!(s.shown(Guc::Role), "pgchaos_r1");
        s.discard_all();
        assert!(s.is_default());
    }
}
