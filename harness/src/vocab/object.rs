//! Named objects a backend owns (issue 20): prepared statements (SQL `PREPARE` and the
//! protocol's named Parse), temporary tables and `WITH HOLD` cursors. They are one kind of
//! thing: a name on a backend, created, used and dropped by statements, living until the
//! session ends or a `DISCARD ALL`, and either transactional (a rollback of the transaction
//! that created it undoes it) or not. A pooler may clear them (its reset query) or carry them
//! with the client (PgBouncer's `max_prepared_statements` re-prepares a client's protocol-level
//! statements on whatever server it hands the client). One row of [`KINDS`] per kind says all
//! of that; the model ([`SessionObjects`], `check::model`) and a client's own expectation
//! (`check::beliefs`) follow the rows. Confirmed by hand on PostgreSQL 18.6 behind PgBouncer
//! 1.24.1 (docs/session-state.md, "Named objects").
//!
//! Every client uses the same name for a kind (`pgchaos_ps`, `pgchaos_tmp`, `pgchaos_cur`) and
//! puts its own label in the object (the statement selects `'C1'`, the table's row is `'C1'`,
//! the cursor's row is `'C1'`), so a use that finds another client's object names its creator,
//! and a create that finds one fails with the kind's duplicate error. Protocol-level
//! statements are named by the client library (tokio-postgres: `s0`, `s1`, ... unique in the
//! process), so another client's is never found: only a client's own, or none.

use super::Op;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A kind of named object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `PREPARE pgchaos_ps AS ...` / `EXECUTE` / `DEALLOCATE`.
    Prepared,
    /// A protocol-level named prepared statement (Parse; Bind/Execute).
    ProtocolPrepared,
    /// `CREATE TEMP TABLE pgchaos_tmp` (`ON COMMIT PRESERVE ROWS`, the default).
    TempTable,
    /// `DECLARE pgchaos_cur SCROLL CURSOR WITH HOLD`.
    HoldCursor,
}

/// What an op does to its kind's object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Create,
    Use,
    Drop,
}

/// Whether a pooler may carry a kind of object with the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carry {
    /// Never: it is the server's alone (SQL `PREPARE` is a statement PgBouncer passes on).
    Never,
    /// When the pooler tracks protocol-level prepared statements
    /// (`PoolRules::tracks_prepared`: PgBouncer's `max_prepared_statements` > 0).
    Tracked,
}

/// One kind of object: its ops, its SQL name, the errors PostgreSQL answers, its lifetime and
/// the pooler's rule for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindRow {
    pub kind: Kind,
    /// In reports.
    pub label: &'static str,
    /// The name every client gives it (protocol-level: the client library names it).
    pub name: &'static str,
    pub create: Op,
    pub uses: Op,
    pub drop: Option<Op>,
    /// SQLSTATE of a use or drop that finds none: `26000` invalid_sql_statement_name,
    /// `42P01` undefined_table, `34000` invalid_cursor_name.
    pub missing: &'static str,
    /// SQLSTATE of a create that finds one: `42P05` duplicate_prepared_statement,
    /// `42P07` duplicate_table, `42P03` duplicate_cursor.
    pub duplicate: &'static str,
    /// A rollback of the transaction that created it undoes it (and one that dropped it
    /// brings it back); otherwise creating and dropping outlive a rollback.
    pub transactional: bool,
    pub carry: Carry,
    /// The invariant that judges a client's uses of it (`app.*`).
    pub follows: &'static str,
}

/// Every kind of object.
pub const KINDS: &[KindRow] = &[
    KindRow {
        kind: Kind::Prepared,
        label: "prepared statement",
        name: "pgchaos_ps",
        create: Op::Prepare,
        uses: Op::Execute,
        drop: Some(Op::Deallocate),
        missing: "26000",
        duplicate: "42P05",
        transactional: false,
        carry: Carry::Never,
        follows: "app.prepared_statements_follow",
    },
    KindRow {
        kind: Kind::ProtocolPrepared,
        label: "protocol-level prepared statement",
        name: "s<n>",
        create: Op::PrepareProtocol,
        uses: Op::ExecuteProtocol,
        drop: None,
        missing: "26000",
        duplicate: "42P05",
        transactional: false,
        carry: Carry::Tracked,
        follows: "app.prepared_statements_follow",
    },
    KindRow {
        kind: Kind::TempTable,
        label: "temporary table",
        name: "pgchaos_tmp",
        create: Op::CreateTemp,
        uses: Op::ReadTemp,
        drop: None,
        missing: "42P01",
        duplicate: "42P07",
        transactional: true,
        carry: Carry::Never,
        follows: "app.temp_state_follows",
    },
    KindRow {
        kind: Kind::HoldCursor,
        label: "WITH HOLD cursor",
        name: "pgchaos_cur",
        create: Op::DeclareHold,
        uses: Op::Fetch,
        drop: None,
        missing: "34000",
        duplicate: "42P03",
        transactional: true,
        carry: Carry::Never,
        follows: "app.temp_state_follows",
    },
];

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Prepared,
        Kind::ProtocolPrepared,
        Kind::TempTable,
        Kind::HoldCursor,
    ];

    pub fn row(self) -> &'static KindRow {
        KINDS
            .iter()
            .find(|r| r.kind == self)
            .expect("every kind has a row")
    }

    /// Each client has its own object of this kind (the library names it), rather than one
    /// shared name.
    pub fn per_client(self) -> bool {
        self == Kind::ProtocolPrepared
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.row().label)
    }
}

impl Op {
    /// The object kind an op acts on and how (`None`: not an object op).
    pub fn object(self) -> Option<(Kind, Role)> {
        KINDS.iter().find_map(|r| {
            if r.create == self {
                Some((r.kind, Role::Create))
            } else if r.uses == self {
                Some((r.kind, Role::Use))
            } else if r.drop == Some(self) {
                Some((r.kind, Role::Drop))
            } else {
                None
            }
        })
    }
}

/// The label a client puts in its objects, and reads back: `C1` for client 0.
pub fn label_of(client: usize) -> String {
    format!("C{}", client + 1)
}

/// The client (0-based) a label names.
pub fn client_of(label: &str) -> Option<usize> {
    label
        .strip_prefix('C')?
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .map(|n| n - 1)
}

/// A reply the model predicts only for an object op: a client's label, or a kind's missing
/// or duplicate error.
pub fn predicts_object(r: &super::Reply) -> bool {
    match r {
        super::Reply::Text { value } => client_of(value).is_some(),
        super::Reply::Error { code, .. } => KINDS
            .iter()
            .any(|k| k.missing == code || k.duplicate == code),
        _ => false,
    }
}

/// One object on a backend: who created it, and (protocol-level) which of its statements it
/// is (the client's `nth`-th prepare: an older one has a name the client no longer uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Obj {
    pub creator: usize,
    pub nth: u32,
}

/// Where an object lives in [`SessionObjects`]: its kind, and for per-client kinds its client.
pub type Slot = (Kind, Option<usize>);

/// The slot an op of `client` on `kind` names.
pub fn slot(kind: Kind, client: usize) -> Slot {
    (kind, kind.per_client().then_some(client))
}

/// A session's named objects as PostgreSQL keeps them, and those at `BEGIN` (a rollback
/// restores the transactional kinds' to them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SessionObjects {
    pub now: BTreeMap<Slot, Obj>,
    pub at_begin: Option<BTreeMap<Slot, Obj>>,
}

impl SessionObjects {
    pub fn is_empty(&self) -> bool {
        self.now.is_empty()
    }

    pub fn get(&self, s: Slot) -> Option<Obj> {
        self.now.get(&s).copied()
    }

    /// Create: fails with the kind's duplicate error if the name is taken.
    pub fn create(&mut self, s: Slot, o: Obj) -> Result<(), &'static str> {
        if self.now.contains_key(&s) && !s.0.per_client() {
            return Err(s.0.row().duplicate);
        }
        self.now.insert(s, o);
        Ok(())
    }

    /// Use: the object, or the kind's missing error.
    pub fn use_(&self, s: Slot, nth: u32) -> Result<Obj, &'static str> {
        match self.now.get(&s) {
            Some(o) if !s.0.per_client() || o.nth == nth => Ok(*o),
            _ => Err(s.0.row().missing),
        }
    }

    /// Drop: the kind's missing error if there is none.
    pub fn drop(&mut self, s: Slot) -> Result<(), &'static str> {
        self.now
            .remove(&s)
            .map(|_| ())
            .ok_or_else(|| s.0.row().missing)
    }

    /// `BEGIN`.
    pub fn begin(&mut self) {
        if self.at_begin.is_none() {
            self.at_begin = Some(self.now.clone());
        }
    }

    /// The transaction block ends: committed, or rolled back / aborted (the transactional
    /// kinds' objects come back to what they were at `BEGIN`; the others stay as they are).
    pub fn end(&mut self, committed: bool) {
        let Some(before) = self.at_begin.take() else {
            return;
        };
        if committed {
            return;
        }
        self.now.retain(|s, _| !s.0.row().transactional);
        self.now
            .extend(before.into_iter().filter(|(s, _)| s.0.row().transactional));
    }

    /// `DISCARD ALL` (outside a transaction): every object gone (`DEALLOCATE ALL`,
    /// `CLOSE ALL`, `DISCARD TEMP`).
    pub fn discard_all(&mut self) {
        self.now.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_row_and_its_ops_name_it() {
        for k in Kind::ALL {
            let r = k.row();
            assert_eq!(r.create.object(), Some((k, Role::Create)));
            assert_eq!(r.uses.object(), Some((k, Role::Use)));
            if let Some(d) = r.drop {
                assert_eq!(d.object(), Some((k, Role::Drop)));
            }
            assert!(r.follows.starts_with("app."));
        }
        assert_eq!(KINDS.len(), Kind::ALL.len());
        assert_eq!(Op::TryLock.object(), None);
        assert_eq!(client_of(&label_of(4)), Some(4));
        assert_eq!(client_of("C0"), None);
        assert_eq!(client_of("default"), None);
    }

    #[test]
    fn objects_follow_their_kind_s_lifetime() {
        let ps = slot(Kind::Prepared, 0);
        let tmp = slot(Kind::TempTable, 0);
        let cur = slot(Kind::HoldCursor, 1);
        let a = Obj { creator: 0, nth: 0 };
        let b = Obj { creator: 1, nth: 0 };
        let mut s = SessionObjects::default();
        assert_eq!(s.use_(ps, 0), Err("26000"));
        assert_eq!(s.use_(tmp, 0), Err("42P01"));
        assert_eq!(s.use_(cur, 0), Err("34000"));
        s.create(ps, a).unwrap();
        assert_eq!(s.create(slot(Kind::Prepared, 1), b), Err("42P05"));
        assert_eq!(
            s.use_(slot(Kind::Prepared, 1), 0),
            Ok(a),
            "one name for all"
        );
        // A rollback undoes the temp table and cursor it created, not the PREPARE.
        s.drop(ps).unwrap();
        s.begin();
        s.create(ps, b).unwrap();
        s.create(tmp, b).unwrap();
        s.create(cur, b).unwrap();
        s.end(false);
        assert_eq!(s.use_(ps, 0), Ok(b));
        assert_eq!(s.use_(tmp, 0), Err("42P01"));
        assert_eq!(s.use_(cur, 0), Err("34000"));
        // A commit keeps them; a rollback keeps what was there before it.
        s.begin();
        s.create(tmp, a).unwrap();
        s.create(cur, a).unwrap();
        s.end(true);
        s.begin();
        assert_eq!(s.drop(ps), Ok(()));
        s.end(false);
        assert_eq!(s.use_(ps, 0), Err("26000"), "DEALLOCATE is not undone");
        assert_eq!((s.use_(tmp, 0), s.use_(cur, 0)), (Ok(a), Ok(a)));
        s.discard_all();
        assert!(s.is_empty());
        // Protocol-level: each client its own, and only the latest is the one it uses.
        let p0 = slot(Kind::ProtocolPrepared, 0);
        let p1 = slot(Kind::ProtocolPrepared, 1);
        s.create(p0, Obj { creator: 0, nth: 1 }).unwrap();
        s.create(p1, Obj { creator: 1, nth: 1 }).unwrap();
        assert!(s.use_(p0, 1).is_ok());
        assert_eq!(s.use_(p0, 2), Err("26000"));
    }
}
