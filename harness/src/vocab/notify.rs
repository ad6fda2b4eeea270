//! `LISTEN` / `NOTIFY`: the one channel the workload uses, and the payload a `notify` sends,
//! which names the sender (client and step) so a notification received says who sent it.
//! Semantics confirmed by hand on PostgreSQL 18.6 behind PgBouncer 1.24.1
//! (docs/session-state.md, "LISTEN and NOTIFY").

/// The channel every `listen`, `unlisten` and `notify` names: one shared channel, so every
/// client that listens should hear every notification (and one that never listened none).
pub const CHANNEL: &str = "pgchaos";

/// Who sent a notification: the sender's client (0-based) and the case step of its `notify`.
pub type Note = (usize, usize);

/// The payload of client `client`'s (0-based) `notify` at step `step`: `C1 s7`.
pub fn payload(client: usize, step: usize) -> String {
    format!("C{} s{step}", client + 1)
}

/// The sender a payload names, if it is one of [`payload`]'s.
pub fn sender(payload: &str) -> Option<Note> {
    let (c, s) = payload.split_once(' ')?;
    let c: usize = c.strip_prefix('C')?.parse().ok()?;
    let s: usize = s.strip_prefix('s')?.parse().ok()?;
    (c >= 1).then(|| (c - 1, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_their_sender() {
        assert_eq!(payload(0, 7), "C1 s7");
        for (c, s) in [(0, 0), (3, 12), (7, 255)] {
            assert_eq!(sender(&payload(c, s)), Some((c, s)));
        }
        for bad in ["", "C0 s1", "C1", "x s1", "C1 7", "C1 s"] {
            assert_eq!(sender(bad), None, "{bad:?}");
        }
    }
}
