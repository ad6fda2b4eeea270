//! What a launcher offers beyond its core (start the servers, watch them, read their logs,
//! tear everything down): each optional capability, what a topology may ask of it (its
//! faults, its features), which launcher offers which, and the refusal of a topology that
//! asks for a capability its launcher lacks. The refusal comes when the topology is checked
//! (`pgchaos check`) and before anything is provisioned or started (`launch`), never mid-run.
//!
//! Jepsen's `db.clj` has the same shape: a `DB` protocol every database implements, and
//! optional `Kill`, `Pause`, `Primary` protocols a database may also implement.

use crate::topology::{LauncherKind, Topology};
use crate::vocab::Op;
use crate::vocab::fault::{self, HostAction};

/// An optional capability of a launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Capability {
    /// Stop, kill, pause, resume and restart a server's processes (the process faults):
    /// [`super::Processes`].
    Processes,
    /// Send a signal to one PostgreSQL backend by its pid (the backend faults):
    /// [`super::BackendSignals`].
    BackendSignals,
    /// A streaming standby to fail over to (`postgres.standby`, the `promote` fault):
    /// [`super::Failover`].
    Failover,
    /// The link proxy between the pooler and PostgreSQL (the link faults): [`super::Servers::link`].
    Links,
    /// Each server on a host of its own, which a fault freezes, kills or restarts whole
    /// (the host faults).
    Hosts,
    /// A host cut off from its peers, every packet dropped (the partition faults):
    /// [`super::Partitions`].
    Partitions,
    /// Replicas of the pooler (`replicas:` in the pooler's section).
    PoolerReplicas,
}

impl Capability {
    /// What a topology asks for with it, in the words of a refusal ("the host faults ...").
    fn asked(self) -> &'static str {
        match self {
            Capability::Processes => "the process faults",
            Capability::BackendSignals => "the backend faults",
            Capability::Failover => "the failover",
            Capability::Links => "the link faults",
            Capability::Hosts => "the host faults",
            Capability::Partitions => "the partition faults",
            Capability::PoolerReplicas => "replicas of the pooler",
        }
    }

    /// What the capability is, as a refusal explains it.
    fn needs(self) -> &'static str {
        match self {
            Capability::Processes => "control of the servers' processes",
            Capability::BackendSignals => "signals to PostgreSQL's backends on their host",
            Capability::Failover => "a standby that pgchaos started beside the primary",
            Capability::Links => "the link proxy, a loopback process of the harness",
            Capability::Hosts => "each server on a host of its own",
            Capability::Partitions => "each server on a host of its own, with a network to cut",
            Capability::PoolerReplicas => "pooler processes that pgchaos starts",
        }
    }
}

/// What each launcher offers.
pub fn offers(kind: LauncherKind) -> &'static [Capability] {
    use Capability::*;
    match kind {
        LauncherKind::Native => &[Processes, BackendSignals, Failover, Links, PoolerReplicas],
        LauncherKind::Docker => &[
            Processes,
            BackendSignals,
            Failover,
            Hosts,
            Partitions,
            PoolerReplicas,
        ],
        // A deployment pgchaos did not start: its pooler's console faults only.
        LauncherKind::External => &[],
    }
}

/// The capability a fault of the servers needs of its launcher; `None` for a console fault
/// (the pooler's own, see [`crate::pooler::Pooler::console_fault`]) and for any other op.
pub fn needed_by(op: Op) -> Option<Capability> {
    if let Some((_, action)) = fault::host(op) {
        return Some(match action {
            HostAction::Partition(_) => Capability::Partitions,
            HostAction::Freeze | HostAction::Kill | HostAction::Restart => Capability::Hosts,
        });
    }
    if fault::needs_link(op) {
        return Some(Capability::Links);
    }
    if fault::needs_standby(op) {
        return Some(Capability::Failover);
    }
    match op {
        Op::PoolerRestart | Op::PoolerCrash | Op::PoolerFreeze | Op::PgRestart | Op::PgCrash => {
            Some(Capability::Processes)
        }
        Op::BackendKill | Op::BackendFreeze => Some(Capability::BackendSignals),
        _ => None,
    }
}

/// Every capability the topology asks of its launcher, each with what asks for it (the
/// fault names, or the feature's key).
pub fn asked(t: &Topology) -> Vec<(Capability, Vec<String>)> {
    let mut asked: std::collections::BTreeMap<Capability, Vec<String>> = Default::default();
    for op in t.faults.kinds.keys() {
        if let Some(c) = needed_by(*op) {
            asked.entry(c).or_default().push(op.to_string());
        }
    }
    if t.postgres.standby {
        asked
            .entry(Capability::Failover)
            .or_default()
            .push("postgres.standby".into());
    }
    if let Some(p) = t.pooler.as_ref().filter(|p| p.replicas > 1) {
        asked
            .entry(Capability::PoolerReplicas)
            .or_default()
            .push(format!("{}.replicas", p.kind));
    }
    asked.into_iter().collect()
}

/// Why launcher `kind` cannot run topology `t`, if it cannot: the file, the first capability
/// it asks for that the launcher lacks, the faults or features that ask for it, and the
/// launchers that offer it.
pub fn refusal(t: &Topology, kind: LauncherKind) -> Option<String> {
    let (cap, by) = asked(t)
        .into_iter()
        .find(|(c, _)| !offers(kind).contains(c))?;
    let others: Vec<&str> = LauncherKind::ALL
        .into_iter()
        .filter(|k| *k != kind && offers(*k).contains(&cap))
        .map(LauncherKind::as_str)
        .collect();
    let instead = match others.as_slice() {
        [] => String::new(),
        some => format!("; use launcher {}", some.join(" or ")),
    };
    Some(format!(
        "{}: launcher {} cannot run {} {} (they need {}){instead}",
        t.source.display(),
        kind.as_str(),
        cap.asked(),
        by.join(", "),
        cap.needs(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_of_the_servers_needs_a_capability_or_is_a_console_fault() {
        // The console faults are the pooler's; every other fault of the servers needs a
        // capability of its launcher.
        let console = [
            Op::PoolerPause,
            Op::PoolerKill,
            Op::PoolerReconnect,
            Op::PoolerReload,
        ];
        for op in Op::ALL
            .iter()
            .copied()
            .filter(|op| fault::meaning(*op).is_some())
        {
            assert_eq!(
                needed_by(op).is_none(),
                console.contains(&op),
                "{op}: needs {:?}",
                needed_by(op)
            );
        }
    }

    #[test]
    fn every_capability_is_offered_by_some_launcher() {
        use Capability::*;
        for c in [
            Processes,
            BackendSignals,
            Failover,
            Links,
            Hosts,
            Partitions,
            PoolerReplicas,
        ] {
            assert!(
                LauncherKind::ALL.iter().any(|k| offers(*k).contains(&c)),
                "{c:?}"
            );
        }
    }
}
