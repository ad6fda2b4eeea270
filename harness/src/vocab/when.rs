//! When a scripted step runs: the control flow of a client profile (a failed try raises, a
//! retry runs only while the lock is not held, `ensure` unlocks only what was taken). A
//! replica keeps a [`Replica`] state from its own replies; each step's [`When`] reads it.
//! Only `raise` fails a replica, so a script written before guards (none of its steps
//! guarded, no `raise`) runs every step as it always did.
//! Pure logic: the runner decides with it, and the history records the guard of every step
//! (run or skipped), so a case file replays the same protocol.

use super::{Op, Reply};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A step's guard. The default (`ok`) runs unless the replica has failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Unless the replica has failed (it ran a `raise`). An error reply alone fails
    /// nothing: a script without `raise` runs every step, as before guards existed.
    #[default]
    Ok,
    /// Unless failed, and only while it holds no lock it asked for (a retry).
    NotHeld,
    /// Only while it holds a lock it took (an `ensure` unlock: runs even after a failure).
    Held,
    /// Only right after a step that ran and failed: a try that returned false, an unlock
    /// that returned false, an error reply (the tool checks the result: a `raise` here).
    /// Runs even after a failure.
    LastFailed,
    /// Only once the replica has failed (a rollback on the error path).
    Failed,
    /// Only while its last unlock returned false (an unlock retried until it releases:
    /// goose's session locker). Runs even after a failure.
    Unreleased,
    /// Always (closing the connection at exit).
    Always,
}

impl When {
    pub const ALL: [When; 7] = [
        When::Ok,
        When::NotHeld,
        When::Held,
        When::LastFailed,
        When::Failed,
        When::Unreleased,
        When::Always,
    ];

    pub fn name(self) -> &'static str {
        match self {
            When::Ok => "ok",
            When::NotHeld => "not_held",
            When::Held => "held",
            When::LastFailed => "last_failed",
            When::Failed => "failed",
            When::Unreleased => "unreleased",
            When::Always => "always",
        }
    }

    pub fn from_name(s: &str) -> Option<When> {
        When::ALL.into_iter().find(|w| w.name() == s)
    }

    pub fn is_default(&self) -> bool {
        *self == When::Ok
    }

    /// Whether a step with this guard runs in this state.
    pub fn admits(self, r: &Replica) -> bool {
        match self {
            When::Ok => !r.failed,
            When::NotHeld => !r.failed && !r.held(),
            When::Held => r.held(),
            When::LastFailed => r.last_failed == Some(true),
            When::Failed => r.failed,
            When::Unreleased => r.unreleased,
            When::Always => true,
        }
    }

    /// Why a step with this guard was skipped, for the history.
    pub fn skip_reason(self, r: &Replica) -> String {
        let state = if r.failed {
            "the replica has failed"
        } else if r.held() {
            "the replica holds its lock"
        } else {
            "the replica holds no lock"
        };
        match self {
            When::LastFailed => "when: last_failed, and the step before did not fail".into(),
            When::Unreleased => "when: unreleased, and its last unlock did not return false".into(),
            w => format!("when: {}, and {state}", w.name()),
        }
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a replica knows of itself, from its own replies only (no look at the servers: that
/// is what a tool knows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replica {
    /// A session lock it was granted and has not unlocked (nor lost its connection).
    pub session: bool,
    /// A transaction lock it was granted in the open transaction.
    pub xact: bool,
    /// It raised: the tool is on its error path.
    pub failed: bool,
    /// The step before: `Some(true)` it ran and failed (false or an error), `Some(false)` it
    /// ran and succeeded, `None` it was skipped.
    pub last_failed: Option<bool>,
    /// Its last unlock returned false (or failed) and no unlock has succeeded since.
    pub unreleased: bool,
}

impl Replica {
    pub fn held(&self) -> bool {
        self.session || self.xact
    }

    /// A step was skipped by its guard.
    pub fn skipped(&mut self) {
        self.last_failed = None;
    }

    /// A step ran and replied.
    pub fn after(&mut self, op: Op, reply: &Reply) {
        // A false is a failure of a lock call (not granted) or an unlock (nothing to
        // release); a `migrate` that found its migration applied did its job.
        let failed = match reply {
            Reply::Bool { value } => !value && (op.acquires() || op == Op::Unlock),
            Reply::Ok | Reply::Text { .. } => false,
            Reply::Error { .. } => true,
        };
        let granted = op.acquires() && !failed;
        match op {
            Op::TryLock | Op::Lock if granted => self.session = true,
            Op::TryXactLock | Op::XactLock if granted => self.xact = true,
            Op::Unlock => {
                self.session = false;
                self.unreleased = failed;
            }
            Op::UnlockAll => self.session = false,
            Op::Commit | Op::Rollback => self.xact = false,
            Op::Disconnect | Op::Reconnect | Op::Release => {
                self.session = false;
                self.xact = false;
                self.unreleased = false;
            }
            _ => {}
        }
        if reply.ended_by_server() {
            // Its connection is gone: it knows its locks went with it.
            self.session = false;
            self.xact = false;
            self.unreleased = false;
        }
        if op == Op::Raise {
            self.failed = true;
        }
        self.last_failed = Some(failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Reply {
        Reply::Bool { value: true }
    }
    fn f() -> Reply {
        Reply::Bool { value: false }
    }

    #[test]
    fn names_round_trip() {
        for w in When::ALL {
            assert_eq!(When::from_name(w.name()), Some(w));
        }
        assert_eq!(When::from_name("sometimes"), None);
    }

    /// Rails: one try; on false, raise; ensure unlocks only what it took, and raises when
    /// the unlock returns false.
    #[test]
    fn a_failed_try_raises_and_skips_the_work() {
        let mut r = Replica::default();
        r.after(Op::TryLock, &f());
        assert!(When::LastFailed.admits(&r), "the raise runs");
        r.after(Op::Raise, &Reply::error(super::super::reply::code::RAISED));
        assert!(r.failed);
        assert!(!When::Ok.admits(&r), "the migration is skipped");
        r.skipped();
        assert!(!When::Held.admits(&r), "nothing to unlock");
        assert!(!When::LastFailed.admits(&r), "a skipped step did not fail");
        assert!(When::Always.admits(&r));
    }

    #[test]
    fn a_granted_try_runs_the_work_and_the_checked_unlock() {
        let mut r = Replica::default();
        r.after(Op::TryLock, &t());
        assert!(!When::LastFailed.admits(&r));
        r.skipped(); // the raise
        assert!(When::Ok.admits(&r));
        r.after(Op::Begin, &Reply::Ok);
        r.after(Op::Migrate, &f());
        assert!(
            !When::LastFailed.admits(&r),
            "a migration found applied is no failure"
        );
        r.after(Op::Commit, &Reply::Ok);
        assert!(When::Held.admits(&r), "commit keeps a session lock");
        r.after(Op::Unlock, &f());
        assert!(!r.held());
        assert!(
            When::LastFailed.admits(&r),
            "an unlock that returned false is checked"
        );
    }

    /// Flyway: retries run only while not held; the raise after the last one only when that
    /// last try ran and failed.
    #[test]
    fn retries_stop_once_granted() {
        let mut r = Replica::default();
        r.after(Op::Begin, &Reply::Ok);
        r.after(Op::TryXactLock, &f());
        assert!(When::NotHeld.admits(&r));
        r.after(Op::Sleep, &Reply::Ok);
        r.after(Op::TryXactLock, &t());
        assert!(!When::NotHeld.admits(&r), "granted: no more retries");
        r.skipped();
        r.skipped();
        assert!(!When::LastFailed.admits(&r), "no raise");
        r.after(Op::Commit, &Reply::Ok);
        assert!(!r.held(), "commit ends a transaction lock");
    }

    /// Only a `raise` fails a replica (scripts without one run every step, as before
    /// guards existed); an error is seen by the next step's `last_failed`; a lost
    /// connection takes the replica's locks with it.
    #[test]
    fn only_a_raise_fails_and_a_lost_connection_drops_the_locks() {
        let mut r = Replica::default();
        r.after(Op::Lock, &Reply::Ok);
        assert!(r.session);
        r.after(
            Op::Migrate,
            &Reply::error(super::super::reply::code::CLOSED),
        );
        assert!(!r.held(), "the connection is gone");
        assert!(!r.failed && When::Ok.admits(&r) && When::LastFailed.admits(&r));
        let mut r = Replica::default();
        r.after(Op::Lock, &Reply::error("55P03"));
        assert!(!r.held() && When::LastFailed.admits(&r));
        r.after(Op::Raise, &Reply::error(super::super::reply::code::RAISED));
        assert!(r.failed && When::Failed.admits(&r) && !When::Ok.admits(&r));
    }

    /// goose: the unlock retried while it returns false; the raise after the last retry
    /// only when that one ran and failed.
    #[test]
    fn an_unlock_is_retried_until_it_releases() {
        let mut r = Replica::default();
        r.after(Op::TryLock, &t());
        r.after(Op::Unlock, &f());
        assert!(When::Unreleased.admits(&r) && When::LastFailed.admits(&r));
        r.after(Op::Sleep, &Reply::Ok);
        assert!(When::Unreleased.admits(&r), "a pause keeps it unreleased");
        r.after(Op::Unlock, &t());
        assert!(!When::Unreleased.admits(&r), "released: no more retries");
        r.skipped();
        assert!(
            !When::LastFailed.admits(&r),
            "no raise after skipped retries"
        );
        r.after(Op::Unlock, &f());
        r.after(Op::Raise, &Reply::error(super::super::reply::code::RAISED));
        assert!(
            When::Unreleased.admits(&r),
            "an ensure runs after a failure"
        );
        r.after(Op::Disconnect, &Reply::Ok);
        assert!(!When::Unreleased.admits(&r), "the connection is gone");
    }
}
