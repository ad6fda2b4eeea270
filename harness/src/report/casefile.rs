//! `case.yaml`: a replayable case (a minimal failure, or a hand-written scenario): each step
//! with the model's prediction, what was observed, and its serving backend symbolically
//! (B1, B2, ... in order of first appearance) with pid and backend_start beside it.

use crate::check::CaseCheck;
use crate::history::{CaseView, StepView, symbol};
use crate::workload::Step;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One step of a case file: the step, and (when recorded) what was expected and observed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseStep {
    #[serde(flatten)]
    pub step: Step,
    /// The model's prediction, e.g. `true`, `ok`, `error 55P03`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expected: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub observed: Option<String>,
    /// The backend that served it, symbolically (`B1`), and for people its pid and start.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend_pid: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend_start: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub violations: Vec<String>,
}

/// A replayable case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// The topology file, relative to the workspace root (or absolute).
    pub topology: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub description: Option<String>,
    /// The invariant this case violates (minimal failures).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub invariant: Option<String>,
    /// Invariants the case must violate when replayed (scenarios); others must hold.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub expect_violated: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub case_seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub versions: Option<String>,
    /// How the case ran, when not the topology's `run.schedule` default (`sequential`):
    /// a concurrent case replays concurrently, its think times from `case_seed`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub schedule: Option<crate::topology::Schedule>,
    pub steps: Vec<CaseStep>,
}

/// What a step showed, as case files and replays print it: the reply, or `skipped (why)`.
pub fn observed(s: &StepView) -> Option<String> {
    if let Some(d) = &s.done {
        return Some(d.value.to_string());
    }
    s.skip.as_ref().map(|k| format!("skipped ({})", k.reason))
}

impl CaseFile {
    pub fn load(path: &Path) -> Result<CaseFile> {
        let src = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        serde_saphyr::from_str(&src).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn steps(&self) -> Vec<Step> {
        self.steps.iter().map(|s| s.step.clone()).collect()
    }

    /// A case file from a recorded case and the checker's verdict on it.
    pub fn from_case(topology: &str, view: &CaseView, check: &CaseCheck) -> CaseFile {
        let order = view.backend_order();
        CaseFile {
            topology: topology.to_string(),
            description: None,
            invariant: None,
            expect_violated: vec![],
            case_seed: None,
            versions: None,
            schedule: (view.start.schedule == crate::topology::Schedule::Concurrent)
                .then_some(view.start.schedule),
            steps: view
                .steps
                .iter()
                .filter(|s| s.op.is_some())
                .map(|s| CaseStep {
                    step: Step {
                        client: s.client,
                        op: s.op.expect("filtered"),
                        key: s.key,
                        ms: s.ms,
                        guc: s.guc,
                        when: s.when,
                        message: s.message.map(str::to_string),
                    },
                    expected: check.expected_at(s.index).map(ToString::to_string),
                    observed: observed(s),
                    backend: s.backend().map(|b| symbol(&order, b)),
                    backend_pid: s.backend().map(|b| b.pid),
                    backend_start: s.backend().map(|b| b.backend_start()),
                    violations: check
                        .at_step(s.index)
                        .map(|v| format!("{}: {}", v.invariant, v.detail))
                        .collect(),
                })
                .collect(),
        }
    }
}
