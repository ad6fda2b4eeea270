//! What a mutation is: its [`Kind`] and the [`Site`] it edits, shared by the edits chosen from
//! the history alone (`mod.rs`) and those chosen from server times (`order.rs`).

use crate::vocab::{BackendId, Key};

/// One kind of edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A boolean reply flipped (`try_lock`, `unlock`, `try_xact_lock`: true <-> false).
    FlipReply,
    /// A grant moved to another backend of the case (the serving identity changed).
    MoveGrant,
    /// A granted row dropped from a look at pg_locks.
    DropHeldRow,
    /// A granted row copied onto another backend of the same look.
    CopyRow,
    /// A release (an unlock that returned true) removed from the history.
    DropRelease,
    /// A statement inside a transaction answered by another backend than the transaction's.
    SplitTransaction,
    /// After a RECONNECT, a server still linked to an open transaction missing from a look.
    DropAfterReconnect,
    /// A session-state read (`show`, `execute`, `execute_protocol`, `read_temp`, `fetch`)
    /// answered with the value of a client that never wrote it in the case (never `set` that
    /// setting, never created that kind of object): well-formed, and certainly impossible.
    ForgeRead,
    /// A session-state read answered with the value of a client whose every write of it was
    /// invoked after the read completed (real-time order: nobody held that value yet).
    ReadFromLater,
    /// A received notification renamed to a `NOTIFY` nobody sent (a client and step that
    /// never notified).
    ForgeNotification,
    /// A received notification delivered a second time to the same connection (PostgreSQL
    /// delivers each to each listening backend once).
    RepeatNotification,
    /// A granted `try_lock` reported refused, wherever it ran (`check::mutate::order`).
    GrantRefused,
    /// A grant reported from another backend of the case, wherever it ran.
    GrantElsewhere,
    /// An unlock that released reported false, wherever it ran.
    UnlockFalse,
    /// An unlock's `true` flipped where a grant of the same key on the same backend overlaps
    /// it in client time and ran before it by the server's clock.
    UnlockBesideGrant,
    /// A grant moved to a backend that the server's clock shows running another client's
    /// statement at that time.
    GrantToBusy,
    /// An unlock that found nothing and the grant of that key right after it on its backend,
    /// swapped in the server's order (their server times exchanged).
    SwapOnBackend,
}

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::FlipReply,
        Kind::MoveGrant,
        Kind::DropHeldRow,
        Kind::CopyRow,
        Kind::DropRelease,
        Kind::SplitTransaction,
        Kind::DropAfterReconnect,
        Kind::ForgeRead,
        Kind::ReadFromLater,
        Kind::ForgeNotification,
        Kind::RepeatNotification,
    ];

    /// The kinds that edit session state other than locks (issue 20): measured on the
    /// session-state histories.
    pub const SESSION_STATE: [Kind; 4] = [
        Kind::ForgeRead,
        Kind::ReadFromLater,
        Kind::ForgeNotification,
        Kind::RepeatNotification,
    ];

    /// The kinds whose detection depends on the order of overlapping ops (issue 36,
    /// `check::mutate::order`): made wherever they fit, or where the server's clock makes
    /// them certainly impossible, and measured with and without the servers' times.
    pub const ORDERED: [Kind; 6] = [
        Kind::GrantRefused,
        Kind::GrantElsewhere,
        Kind::UnlockFalse,
        Kind::UnlockBesideGrant,
        Kind::GrantToBusy,
        Kind::SwapOnBackend,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::GrantRefused => "a granted try_lock reported refused",
            Kind::GrantElsewhere => "a grant reported from another backend",
            Kind::UnlockFalse => "an unlock that released reports false",
            Kind::UnlockBesideGrant => "unlock flipped beside a grant on its backend",
            Kind::GrantToBusy => "a grant moved to a busy backend",
            Kind::SwapOnBackend => "two ops of one backend swapped",
            Kind::FlipReply => "flip a reply",
            Kind::MoveGrant => "move a grant to another backend",
            Kind::DropHeldRow => "drop a held row",
            Kind::CopyRow => "copy a row onto another backend",
            Kind::DropRelease => "drop a release",
            Kind::SplitTransaction => "split a transaction across two backends",
            Kind::DropAfterReconnect => "remove a linked backend after a RECONNECT",
            Kind::ForgeRead => "answer a read with a value nobody wrote",
            Kind::ReadFromLater => "answer a read with a value written only later",
            Kind::ForgeNotification => "rename a notification to a NOTIFY nobody sent",
            Kind::RepeatNotification => "deliver a notification twice",
        }
    }
}

/// Where an edit goes: the event it changes, and what to put there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub event: usize,
    /// The other backend (move, copy, split), or the row's backend (drop a row).
    pub backend: Option<BackendId>,
    pub key: Option<Key>,
    /// The forged value (a read's reply, a notification's payload).
    pub value: Option<String>,
}
