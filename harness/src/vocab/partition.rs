//! Seed lists (`--seeds 1-3`, `--seeds 1,5,9`) and `--partition K/N`: which share of a
//! list of work items (a matrix's cells, a chaos run's seeds) this invocation runs.
//!
//! Partitioning is by count, as cargo-nextest's `count:K/N` (nextest-rs/nextest, tag
//! cargo-nextest-0.9.143, nextest-runner/src/partition.rs, `CountPartitioner`): item i of
//! the list, in its fixed order, goes to partition `i mod N + 1`. Chosen over nextest's
//! `hash:K/N` because every partition of a CI run reads the same list (the same checkout),
//! so the count is as stable as a hash there, and it balances: N partitions of M items get
//! M/N items each, rounded, where a hash of twenty-odd profile x topology names can leave
//! one runner twice another's share. What a hash would buy (an item keeping its partition
//! when the list changes) does not matter: `merge` refuses partitions of different lists.

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};
use std::fmt;

/// `1-3` or `1,5,9` (at most 100 seeds in a range).
pub fn parse_seeds(s: &str) -> Result<Vec<u64>> {
    let bad = || anyhow!("--seeds {s:?}: expected a range like `1-3` or a list like `1,5,9`");
    let s = s.trim();
    if let Some((a, b)) = s.split_once('-') {
        let (a, b): (u64, u64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b || b - a >= 100 {
            return Err(bad());
        }
        return Ok((a..=b).collect());
    }
    let seeds: Vec<u64> = s
        .split(',')
        .map(|x| x.trim().parse().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    if seeds.is_empty() {
        return Err(bad());
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(d) = seeds.iter().find(|s| !seen.insert(**s)) {
        return Err(anyhow!("--seeds {s:?}: seed {d} is listed twice"));
    }
    Ok(seeds)
}

/// Partition `k` of `n` (1-based), by count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub k: u32,
    pub n: u32,
}

impl Partition {
    /// `K/N`, or nextest's spelling `count:K/N`.
    pub fn parse(s: &str) -> Result<Partition> {
        let bad = |why: &str| anyhow!("--partition {s:?}: {why}");
        let t = s.trim();
        let t = t.strip_prefix("count:").unwrap_or(t);
        if t.starts_with("hash:") || t.starts_with("slice:") {
            return Err(bad(
                "only count partitions are supported (`K/N` or `count:K/N`): every partition reads the same list, and counting balances it",
            ));
        }
        let (k, n) = t
            .split_once('/')
            .ok_or_else(|| bad("expected K/N, e.g. 2/4"))?;
        let k: u32 = k
            .trim()
            .parse()
            .map_err(|_| bad("K is not a whole number"))?;
        let n: u32 = n
            .trim()
            .parse()
            .map_err(|_| bad("N is not a whole number"))?;
        if n == 0 || k == 0 || k > n {
            return Err(bad("K must be between 1 and N, and N at least 1"));
        }
        Ok(Partition { k, n })
    }

    /// Whether item `index` of the list (0-based) is in this partition.
    pub fn has(&self, index: usize) -> bool {
        index % self.n as usize == (self.k - 1) as usize
    }

    /// This partition's items, in the list's order.
    pub fn pick<T>(&self, items: Vec<T>) -> Vec<T> {
        items
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.has(*i))
            .map(|(_, t)| t)
            .collect()
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_as_ranges_or_lists() {
        assert_eq!(parse_seeds("1-3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_seeds("1, 5,9").unwrap(), vec![1, 5, 9]);
        assert_eq!(parse_seeds("7").unwrap(), vec![7]);
        for bad in ["3-1", "x", "1-", "", "1-500"] {
            let e = parse_seeds(bad).unwrap_err().to_string();
            assert!(e.contains("--seeds"), "{bad}: {e}");
        }
        let e = parse_seeds("1,2,1").unwrap_err().to_string();
        assert!(e.contains("seed 1 is listed twice"), "{e}");
    }

    #[test]
    fn partitions_cover_every_item_once_and_balance() {
        for n in 1..=7u32 {
            for m in 0..=23usize {
                let mut seen = vec![0; m];
                let mut sizes = vec![];
                for k in 1..=n {
                    let p = Partition { k, n };
                    let mine = p.pick((0..m).collect());
                    sizes.push(mine.len());
                    for i in mine {
                        seen[i] += 1;
                    }
                }
                assert!(seen.iter().all(|c| *c == 1), "n {n} m {m}: {seen:?}");
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "n {n} m {m}: {sizes:?}");
            }
        }
        // Count order, as nextest's CountPartitioner: item i in partition i mod N + 1.
        assert_eq!(
            Partition { k: 2, n: 3 }.pick((0..8).collect()),
            vec![1, 4, 7]
        );
    }

    #[test]
    fn partition_specs() {
        assert_eq!(Partition::parse("2/4").unwrap(), Partition { k: 2, n: 4 });
        assert_eq!(
            Partition::parse("count:1/1").unwrap(),
            Partition { k: 1, n: 1 }
        );
        for bad in ["0/4", "5/4", "1/0", "2", "a/b", "hash:1/2", "1/4/2"] {
            let e = Partition::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--partition"), "{bad}: {e}");
        }
        assert!(
            Partition::parse("hash:1/2")
                .unwrap_err()
                .to_string()
                .contains("only count partitions")
        );
    }
}
