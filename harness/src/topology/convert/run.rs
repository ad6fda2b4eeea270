//! `run` and `expect` into the model: cases, seeds, time limits, shrinking, the search's
//! budget, and the expected verdicts.

use super::*;

impl Cx<'_> {
    pub(in crate::topology) fn run(&self, raw: &RawRun) -> Res<RunSpec> {
        let cases = self.u32_or(&raw.cases, "run.cases", 1, u32::MAX, DEFAULT_CASES)?;
        let seed = self.run_seed(raw)?;
        let time_limit = self.duration_or(
            &raw.time_limit,
            "run.time_limit",
            None,
            Duration::from_secs(DEFAULT_TIME_LIMIT_SECS),
        )?;
        let max_shrink_runs = self.u32_or(
            &raw.max_shrink_runs,
            "run.max_shrink_runs",
            0,
            u32::MAX,
            DEFAULT_MAX_SHRINK_RUNS,
        )?;
        let schedule = self.run_schedule(raw)?;
        let sample_every = self.duration_or(
            &raw.sample_every,
            "run.sample_every",
            Some(Duration::from_secs(10)),
            Duration::from_millis(DEFAULT_SAMPLE_EVERY_MS),
        )?;
        let op_deadline = self.duration_or(
            &raw.op_deadline,
            "run.op_deadline",
            Some(Duration::from_secs(600)),
            Duration::from_millis(DEFAULT_OP_DEADLINE_MS),
        )?;
        let case_time_limit = self.duration_or(
            &raw.case_time_limit,
            "run.case_time_limit",
            Some(Duration::from_secs(3600)),
            Duration::from_secs(DEFAULT_CASE_TIME_LIMIT_SECS),
        )?;
        let shrink_replays = self.u32_or(
            &raw.shrink_replays,
            "run.shrink_replays",
            1,
            100,
            DEFAULT_SHRINK_REPLAYS,
        )?;
        let shrink_quorum = self.u32_or(
            &raw.shrink_quorum,
            "run.shrink_quorum",
            1,
            100,
            DEFAULT_SHRINK_QUORUM.min(shrink_replays),
        )?;
        if shrink_quorum > shrink_replays {
            return Err(self.err(
                &raw.shrink_quorum.referenced,
                format!("`run.shrink_quorum` ({shrink_quorum}) exceeds `run.shrink_replays` ({shrink_replays})"),
                vec!["a candidate counts as failing when it fails in `shrink_quorum` of `shrink_replays` replays".into()],
            ));
        }
        let search_states = self.u32_or(
            &raw.search_states,
            "run.search_states",
            100,
            10_000_000,
            DEFAULT_SEARCH_STATES,
        )? as usize;
        let search_work = u64::from(self.u32_or(
            &raw.search_work,
            "run.search_work",
            1_000,
            4_000_000_000,
            DEFAULT_SEARCH_WORK,
        )?);
        let search_time = self.duration_or(
            &raw.search_time,
            "run.search_time",
            Some(Duration::from_secs(600)),
            Duration::from_millis(DEFAULT_SEARCH_TIME_MS),
        )?;
        let shrink_time = self.duration_or(
            &raw.shrink_time,
            "run.shrink_time",
            None,
            Duration::from_secs(DEFAULT_SHRINK_TIME_SECS),
        )?;
        let time_scale_milli = self.time_scale_milli(raw)?;
        Ok(RunSpec {
            time_scale_milli,
            cases,
            seed,
            time_limit,
            shrink_time,
            max_shrink_runs,
            schedule,
            sample_every,
            op_deadline,
            case_time_limit,
            shrink_replays,
            shrink_quorum,
            search_states,
            search_work,
            search_time,
        })
    }

    /// `run.seed`: `random` (or absent) for none, else an integer.
    fn run_seed(&self, raw: &RawRun) -> Res<Option<u64>> {
        Ok(match &raw.seed.value {
            Node::Absent => None,
            Node::Str(s) if s == "random" => None,
            Node::Int(_) => Some(self.int(&raw.seed, "run.seed", 0, u64::MAX.into())? as u64),
            _ => {
                return Err(self.err(
                    &raw.seed.referenced,
                    format!(
                        "`run.seed` must be `random` or an integer, found {}",
                        self.found(&raw.seed)
                    ),
                    vec![format!("a seed is `random` or 0 to {}", u64::MAX)],
                ));
            }
        })
    }

    /// `run.schedule`: a schedule's name, sequential when absent.
    fn run_schedule(&self, raw: &RawRun) -> Res<Schedule> {
        Ok(match &raw.schedule.value {
            Node::Absent => Schedule::Sequential,
            Node::Str(s) => Schedule::from_name(s).ok_or_else(|| {
                self.err(
                    &raw.schedule.referenced,
                    format!("unknown schedule `{s}`"),
                    vec!["valid schedules: sequential, concurrent".into()],
                )
            })?,
            _ => {
                return Err(self.err(
                    &raw.schedule.referenced,
                    format!(
                        "`run.schedule` must be a schedule, found {}",
                        self.found(&raw.schedule)
                    ),
                    vec!["valid schedules: sequential, concurrent".into()],
                ));
            }
        })
    }

    /// `run.time_scale`, in thousandths: a number from `MIN_TIME_SCALE` to
    /// `MAX_TIME_SCALE`, 1 when absent.
    fn time_scale_milli(&self, raw: &RawRun) -> Res<u32> {
        Ok(match &raw.time_scale.value {
            Node::Absent => 1000,
            Node::Float(f) if (MIN_TIME_SCALE..=MAX_TIME_SCALE).contains(f) => {
                (f * 1000.0).round() as u32
            }
            Node::Int(i) if (1..=MAX_TIME_SCALE as i128).contains(i) => *i as u32 * 1000,
            _ => {
                return Err(self.err(
                    &raw.time_scale.referenced,
                    format!(
                        "`run.time_scale` must be a number from {MIN_TIME_SCALE} to {MAX_TIME_SCALE}, found {}",
                        self.found(&raw.time_scale)
                    ),
                    vec!["every duration of the workload (its script's sleeps, migrations and pg_sleeps, `lock_timeout`, `think`) is multiplied by it: 0.5 runs the protocol twice as fast".into()],
                ));
            }
        })
    }

    /// An `expect:`-like section: each invariant's verdict, and the share of cases that
    /// violated it when measured (`violated ~5%`: what a shorter run is told it missed).
    #[allow(clippy::type_complexity)]
    pub(in crate::topology) fn expect(
        &self,
        leaf: &Leaf,
        section: &str,
    ) -> Res<(BTreeMap<String, Verdict>, BTreeMap<String, f64>)> {
        let app_names: Vec<&str> = self
            .catalog
            .iter()
            .filter(|i| i.tier == Tier::App)
            .map(|i| i.name)
            .collect();
        let mut out = BTreeMap::new();
        let mut rates = BTreeMap::new();
        for (name, value) in self.entries(leaf, section)? {
            let n = name.value.as_str();
            match self.catalog.iter().find(|i| i.name == n).map(|i| i.tier) {
                Some(Tier::App) => {}
                Some(Tier::Pg) => {
                    return Err(self.err(
                        &name.referenced,
                        format!("`{n}` cannot be listed in `{section}`: pg.* invariants must always hold"),
                        vec![
                            "a pg.* violation is a bug in PostgreSQL or in the harness, never an expectation".into(),
                            format!("expectable invariants: {}", app_names.join(", ")),
                        ],
                    ));
                }
                None => {
                    let mut hints = Vec::new();
                    let close = close_matches(n, app_names.iter().copied());
                    if !close.is_empty() {
                        hints.push(did_you_mean(&close));
                    }
                    hints.push(format!("expectable invariants: {}", app_names.join(", ")));
                    return Err(self.err(
                        &name.referenced,
                        format!("unknown invariant `{n}`"),
                        hints,
                    ));
                }
            }
            // `either` in both: a run against faults of real servers is timing-dependent in
            // either schedule (whether a host's restart lands in a case's window).
            let (word, rate) = match &value.value {
                Node::Str(s) => match s.split_once(char::is_whitespace) {
                    Some((w, r)) => (w, Some(r.trim())),
                    None => (s.as_str(), None),
                },
                _ => ("", None),
            };
            let verdict = match word {
                "holds" => Verdict::Holds,
                "violated" => Verdict::Violated,
                "either" => Verdict::Either,
                _ => {
                    return Err(self.err(
                        &value.referenced,
                        format!(
                            "the verdict for `{n}` must be `holds`, `violated` or `either` (`violated ~5%` gives its rate), found {}",
                            self.found(value)
                        ),
                        Vec::new(),
                    ));
                }
            };
            if let Some(r) = rate {
                let pct = r
                    .strip_prefix('~')
                    .and_then(|r| r.strip_suffix('%'))
                    .and_then(|r| r.trim().parse::<f64>().ok())
                    .filter(|p| *p > 0.0 && *p <= 100.0);
                match pct {
                    Some(p) if verdict == Verdict::Violated => {
                        rates.insert(n.to_string(), p);
                    }
                    _ => {
                        return Err(self.err(
                            &value.referenced,
                            format!(
                                "`{}`: after the verdict only a measured rate may follow, `violated ~5%`",
                                value_text(&value.value)
                            ),
                            vec![
                                "the rate is the share of cases that violated it in the runs the expectation comes from (over 0, at most 100)".into(),
                            ],
                        ));
                    }
                }
            }
            out.insert(n.to_string(), verdict);
        }
        Ok((out, rates))
    }
}
