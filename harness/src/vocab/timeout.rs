//! The settings that close or cancel connections on a timer, and what each means for the
//! model: the [`Effect`]s the model knows, and PostgreSQL's settings ([`POSTGRES`]). A pooler's
//! own rows live in its folder (PgBouncer: `pooler::pgbouncer::settings::PGBOUNCER_TIMEOUTS`),
//! read by the topology (which settings are timeouts, and their units) and recorded in the
//! history by effect, which is all the model reads. PostgreSQL's effects from its source
//! (postgres.c, proc.c), confirmed by hand in docs/ground-truth-model.md.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What running out does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The pooler closes a server connection that is not linked to a client, once it has
    /// existed this long (`server_lifetime`).
    RetireOld,
    /// The pooler closes a server connection idle in the pool this long.
    RetireIdle,
    /// The pooler closes a client (and its server) idle inside a transaction this long.
    CloseIdleInTransaction,
    /// The pooler closes a client whose transaction has been open this long (and its server).
    CloseLongTransaction,
    /// The pooler closes a client connection idle this long.
    CloseIdleClient,
    /// A statement running this long is ended with its connection (the client reads an error).
    EndLongStatement,
    /// A client waiting this long for a server is disconnected with an error.
    EndLongWait,
    /// PostgreSQL cancels a statement running this long (57014).
    CancelLongStatement,
    /// PostgreSQL ends a backend idle inside a transaction this long (FATAL 25P03).
    EndIdleInTransaction,
    /// PostgreSQL ends a backend idle outside a transaction this long (FATAL 57P05).
    EndIdleSession,
    /// PostgreSQL ends a backend whose transaction has been open this long (FATAL 25P04).
    EndLongTransaction,
}

impl Effect {
    /// What ran out, in words: PostgreSQL's setting by name, a pooler's by what it does (its
    /// name is the pooler's: PgBouncer's `server_lifetime`, pgpool-II's `connection_life_time`).
    pub fn describe(self) -> &'static str {
        if let Some(t) = POSTGRES.iter().find(|t| t.effect == self) {
            return t.name;
        }
        match self {
            Effect::RetireOld => "the pooler's server lifetime",
            Effect::RetireIdle => "the pooler's idle-server timeout",
            Effect::CloseIdleInTransaction => "the pooler's idle-in-transaction timeout",
            Effect::CloseLongTransaction => "the pooler's transaction timeout",
            Effect::CloseIdleClient => "the pooler's idle-client timeout",
            Effect::EndLongStatement => "the pooler's query timeout",
            Effect::EndLongWait => "the pooler's wait timeout",
            // Found in POSTGRES above.
            Effect::CancelLongStatement
            | Effect::EndIdleInTransaction
            | Effect::EndIdleSession
            | Effect::EndLongTransaction => "a PostgreSQL timeout",
        }
    }
}

/// One timeout setting: its name and what running out does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout {
    pub name: &'static str,
    pub effect: Effect,
}

/// PostgreSQL's timeouts that end sessions or statements (`lock_timeout` has its own key,
/// `workload.lock_timeout`).
pub const POSTGRES: &[Timeout] = &[
    t("statement_timeout", Effect::CancelLongStatement),
    t(
        "idle_in_transaction_session_timeout",
        Effect::EndIdleInTransaction,
    ),
    t("idle_session_timeout", Effect::EndIdleSession),
    t("transaction_timeout", Effect::EndLongTransaction),
];

/// A row of a timeout table.
pub const fn t(name: &'static str, effect: Effect) -> Timeout {
    Timeout { name, effect }
}

/// The row of `name` in `table`.
pub fn find(table: &[Timeout], name: &str) -> Option<Timeout> {
    table.iter().find(|t| t.name == name).copied()
}

/// The timeouts a run has on (0 is off), by effect, in milliseconds: recorded in the history
/// so that `analyze` judges with the values the run had.
pub type Timeouts = BTreeMap<Effect, u64>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_postgres_setting_has_one_effect_of_its_own() {
        let mut effects: Vec<Effect> = POSTGRES.iter().map(|t| t.effect).collect();
        effects.sort();
        effects.dedup();
        assert_eq!(effects.len(), POSTGRES.len());
        let mut names: Vec<&str> = POSTGRES.iter().map(|t| t.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 4);
        assert_eq!(
            find(POSTGRES, "statement_timeout").map(|t| t.effect),
            Some(Effect::CancelLongStatement)
        );
        assert_eq!(find(POSTGRES, "lock_timeout"), None);
        assert_eq!(Effect::EndIdleSession.describe(), "idle_session_timeout");
        assert_eq!(Effect::RetireOld.describe(), "the pooler's server lifetime");
    }
}
