//! The settings that close or cancel connections on a timer, and what each means for the
//! model: one row per setting ([`TIMEOUTS`]), read by the topology (which settings are
//! timeouts, and their units) and by the model (what may happen once a timer has run out).
//! Effects from PgBouncer's documentation and source (janitor.c: `pool_server_maint`,
//! `pool_client_maint`) and PostgreSQL's (postgres.c, proc.c), confirmed by hand in
//! docs/ground-truth-model.md.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Whose setting it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Pgbouncer,
    Postgres,
}

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

/// One timeout setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout {
    pub name: &'static str,
    pub owner: Owner,
    pub effect: Effect,
}

/// Every timeout the model knows, by setting.
pub const TIMEOUTS: &[Timeout] = &[
    t("server_lifetime", Owner::Pgbouncer, Effect::RetireOld),
    t("server_idle_timeout", Owner::Pgbouncer, Effect::RetireIdle),
    t(
        "idle_transaction_timeout",
        Owner::Pgbouncer,
        Effect::CloseIdleInTransaction,
    ),
    t(
        "transaction_timeout",
        Owner::Pgbouncer,
        Effect::CloseLongTransaction,
    ),
    t(
        "client_idle_timeout",
        Owner::Pgbouncer,
        Effect::CloseIdleClient,
    ),
    t("query_timeout", Owner::Pgbouncer, Effect::EndLongStatement),
    t("query_wait_timeout", Owner::Pgbouncer, Effect::EndLongWait),
    t(
        "statement_timeout",
        Owner::Postgres,
        Effect::CancelLongStatement,
    ),
    t(
        "idle_in_transaction_session_timeout",
        Owner::Postgres,
        Effect::EndIdleInTransaction,
    ),
    t(
        "idle_session_timeout",
        Owner::Postgres,
        Effect::EndIdleSession,
    ),
    t(
        "transaction_timeout",
        Owner::Postgres,
        Effect::EndLongTransaction,
    ),
];

const fn t(name: &'static str, owner: Owner, effect: Effect) -> Timeout {
    Timeout {
        name,
        owner,
        effect,
    }
}

/// The timeout settings of `owner`.
pub fn of(owner: Owner) -> impl Iterator<Item = &'static Timeout> {
    TIMEOUTS.iter().filter(move |t| t.owner == owner)
}

/// The timeouts a run has on (0 is off), by effect, in milliseconds: recorded in the history
/// so that `analyze` judges with the values the run had.
pub type Timeouts = BTreeMap<Effect, u64>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_effect_belongs_to_one_setting() {
        let mut effects: Vec<Effect> = TIMEOUTS.iter().map(|t| t.effect).collect();
        effects.sort();
        effects.dedup();
        assert_eq!(effects.len(), TIMEOUTS.len());
        // Names are unique per owner (`transaction_timeout` exists in both).
        for o in [Owner::Pgbouncer, Owner::Postgres] {
            let mut names: Vec<&str> = of(o).map(|t| t.name).collect();
            let n = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), n);
        }
        assert_eq!(of(Owner::Postgres).count(), 4);
    }
}
