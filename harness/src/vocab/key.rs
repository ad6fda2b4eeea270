//! Advisory lock keys: one bigint, or a pair of int4 (PostgreSQL keeps the two spaces apart).
//!
//! Owns the mapping between a key, its SQL arguments and its `pg_locks` columns.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An advisory lock key as the application passes it to `pg_advisory_*`.
///
/// In YAML a bigint key is a plain integer (`4242424242`) and a pair is a two-element
/// sequence (`[1, 612001]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Key {
    /// `pg_advisory_lock(bigint)`: pg_locks `objsubid = 1`.
    Big(i64),
    /// `pg_advisory_lock(int4, int4)`: pg_locks `classid = a, objid = b, objsubid = 2`.
    Pair(i32, i32),
}

impl Key {
    /// The argument list for the lock functions, e.g. `4242424242` or `1, 612001`.
    pub fn sql_args(&self) -> String {
        match self {
            Key::Big(k) => k.to_string(),
            Key::Pair(a, b) => format!("{a}, {b}"),
        }
    }

    /// Rebuilds a key from `pg_locks` (`classid`, `objid` are `oid`, i.e. u32; `objsubid` 1 or 2).
    pub fn from_lock_row(classid: u32, objid: u32, objsubid: i16) -> Option<Key> {
        match objsubid {
            1 => Some(Key::Big(((classid as u64) << 32 | objid as u64) as i64)),
            2 => Some(Key::Pair(classid as i32, objid as i32)),
            _ => None,
        }
    }

    /// The `pg_locks` columns `(classid, objid, objsubid)` this key occupies.
    pub fn lock_row(&self) -> (u32, u32, i16) {
        match *self {
            Key::Big(k) => ((k as u64 >> 32) as u32, (k as u64 & 0xffff_ffff) as u32, 1),
            Key::Pair(a, b) => (a as u32, b as u32, 2),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Big(k) => write!(f, "{k}"),
            Key::Pair(a, b) => write!(f, "({a},{b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigint_keys_round_trip_through_pg_locks_columns() {
        for k in [0i64, 1, 612001, 4242424242, -1, i64::MIN, i64::MAX] {
            let (c, o, s) = Key::Big(k).lock_row();
            assert_eq!(s, 1);
            assert_eq!(Key::from_lock_row(c, o, s), Some(Key::Big(k)), "key {k}");
        }
        // The documented split: classid = k >> 32, objid = k & 0xffffffff.
        assert_eq!(Key::Big(4242424242).lock_row(), (0, 4242424242, 1));
        assert_eq!(Key::Big(1 << 32 | 7).lock_row(), (1, 7, 1));
    }

    #[test]
    fn pair_keys_are_a_distinct_space() {
        let pair = Key::Pair(0, 5);
        let big = Key::Big(5);
        assert_eq!(pair.lock_row(), (0, 5, 2));
        assert_ne!(pair.lock_row(), big.lock_row());
        assert_eq!(Key::from_lock_row(u32::MAX, 3, 2), Some(Key::Pair(-1, 3)));
    }

    #[test]
    fn yaml_forms() {
        let keys: Vec<Key> = serde_json::from_str("[4242424242, [1, 612001]]").unwrap();
        assert_eq!(keys, vec![Key::Big(4242424242), Key::Pair(1, 612001)]);
        assert_eq!(Key::Pair(1, 2).sql_args(), "1, 2");
    }
}
