//! The history on disk: `history.jsonl.gz`, one JSON event per line, gzip-compressed as it
//! is written (read it with `zcat`, or `pgchaos history RUN`).
//!
//! Written by a thread of its own, a case at a time, so the step loop never waits for
//! compression or the disk; the channel is bounded, so a slow disk slows the run rather than
//! letting memory grow. An observation is written whole once, then as what changed since
//! the previous one (`"delta"`, see `history::delta`), or `"same":true` when nothing did; the
//! reader restores each whole.

use super::delta::ObsDelta;
use super::event::{Body, Event, FORMAT, READS};
use super::observation::Observation;
use anyhow::{Context, Result, anyhow, bail};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// The history file's name in a run directory.
pub const FILE: &str = "history.jsonl.gz";

/// What the writer wrote.
#[derive(Clone, Copy, Debug, Default)]
pub struct Written {
    pub events: u64,
    /// Compressed bytes on disk.
    pub bytes: u64,
}

/// Streams events to a history file from a thread of its own.
pub struct HistoryWriter {
    tx: Option<SyncSender<Vec<Event>>>,
    handle: Option<JoinHandle<Result<Written>>>,
    path: PathBuf,
}

impl HistoryWriter {
    /// Create `path` and start the writer thread (it inherits the CPU the caller runs on).
    pub fn create(path: &Path) -> Result<HistoryWriter> {
        let file = File::create(path)
            .with_context(|| format!("creating the history file {}", path.display()))?;
        let (tx, rx) = sync_channel::<Vec<Event>>(64);
        let shown = path.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("pgchaos-history".into())
            .spawn(move || {
                write_loop(file, rx).with_context(|| format!("writing {}", shown.display()))
            })
            .context("starting the history writer thread")?;
        Ok(HistoryWriter {
            tx: Some(tx),
            handle: Some(handle),
            path: path.to_path_buf(),
        })
    }

    /// Queue a batch (a case's events); blocks while 64 batches are queued.
    pub fn write(&self, events: Vec<Event>) -> Result<()> {
        let tx = self.tx.as_ref().expect("writer not finished");
        if tx.send(events).is_err() {
            // The thread ended early: its error says why.
            bail!("the history writer for {} stopped", self.path.display());
        }
        Ok(())
    }

    /// Flush everything and close the file.
    pub fn finish(mut self) -> Result<Written> {
        self.tx = None;
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(anyhow!("the history writer thread panicked")),
            None => Ok(Written::default()),
        }
    }
}

impl Drop for HistoryWriter {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Counts what passes through (the compressed size).
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn write_loop(file: File, rx: Receiver<Vec<Event>>) -> Result<Written> {
    let gz = flate2::write::GzEncoder::new(
        Counting {
            inner: BufWriter::with_capacity(1 << 16, file),
            bytes: 0,
        },
        flate2::Compression::fast(),
    );
    let mut out = BufWriter::with_capacity(1 << 16, gz);
    let mut last: Option<Observation> = None;
    let mut events = 0u64;
    for batch in rx {
        for mut ev in batch {
            if let Body::Obs(o) = &mut ev.body {
                let next = std::mem::take(&mut o.obs);
                match &last {
                    Some(prev) => match ObsDelta::between(prev, &next) {
                        None => o.same = true,
                        Some(d) => o.delta = Some(d),
                    },
                    None => o.obs = next.clone(),
                }
                last = Some(next);
            }
            serde_json::to_writer(&mut out, &ev)?;
            out.write_all(b"\n")?;
            events += 1;
        }
    }
    let gz = out.into_inner().map_err(|e| e.into_error())?;
    let mut counting = gz.finish()?;
    counting.flush()?;
    Ok(Written {
        events,
        bytes: counting.bytes,
    })
}

/// Reads a history file back, event by event, restoring whole observations. Takes the
/// gzip-compressed file a run writes, or the same lines uncompressed (`*.jsonl`, e.g. a
/// hand-written fixture, or `zcat history.jsonl.gz > history.jsonl`).
pub struct HistoryReader {
    lines: std::io::Lines<Box<dyn BufRead>>,
    last: Option<Observation>,
    line: usize,
    path: PathBuf,
}

impl HistoryReader {
    /// Open a history file, or the history of a run directory.
    pub fn open(path: &Path) -> Result<HistoryReader> {
        let path = if path.is_dir() {
            path.join(FILE)
        } else {
            path.to_path_buf()
        };
        let mut file =
            File::open(&path).with_context(|| format!("opening the history {}", path.display()))?;
        let mut magic = [0u8; 2];
        let gz = std::io::Read::read(&mut file, &mut magic).is_ok_and(|n| n == 2)
            && magic == [0x1f, 0x8b];
        std::io::Seek::rewind(&mut file)
            .with_context(|| format!("reading the history {}", path.display()))?;
        let reader: Box<dyn BufRead> = if gz {
            Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
        } else {
            Box::new(BufReader::new(file))
        };
        Ok(HistoryReader {
            lines: reader.lines(),
            last: None,
            line: 0,
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Iterator for HistoryReader {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        let line = match self.lines.next()? {
            Ok(l) => l,
            Err(e) => {
                return Some(Err(anyhow!(
                    "{}: reading line {}: {e}",
                    self.path.display(),
                    self.line + 1
                )));
            }
        };
        self.line += 1;
        let mut ev: Event = match serde_json::from_str(&line) {
            Ok(e) => e,
            Err(e) => {
                return Some(Err(anyhow!(
                    "{}:{}:{}: not a history event: {e}",
                    self.path.display(),
                    self.line,
                    e.column()
                )));
            }
        };
        match &mut ev.body {
            Body::Run(h) if !READS.contains(&h.format.as_str()) => {
                return Some(Err(anyhow!(
                    "{}: history format {:?}, this pgchaos reads {FORMAT:?}",
                    self.path.display(),
                    h.format
                )));
            }
            Body::Obs(o) if o.same || o.delta.is_some() => {
                let Some(prev) = &self.last else {
                    return Some(Err(anyhow!(
                        "{}:{}: an observation relative to none before it",
                        self.path.display(),
                        self.line
                    )));
                };
                let whole = match o.delta.take() {
                    None => prev.clone(),
                    Some(d) => match d.apply(prev) {
                        Ok(w) => w,
                        Err(e) => {
                            return Some(Err(anyhow!(
                                "{}:{}: {e}",
                                self.path.display(),
                                self.line
                            )));
                        }
                    },
                };
                o.same = false;
                o.obs = whole.clone();
                self.last = Some(whole);
            }
            Body::Obs(o) => self.last = Some(o.obs.clone()),
            _ => {}
        }
        Some(Ok(ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::event::{At, ObsEvent, RunEnd};
    use crate::history::observation::BackendRow;
    use crate::vocab::BackendId;

    fn obs(state: &str) -> Body {
        Body::Obs(ObsEvent {
            step: Some(0),
            at: At::After,
            same: false,
            delta: None,
            obs: Observation {
                backends: vec![BackendRow {
                    id: BackendId {
                        pid: 1,
                        start_us: 2,
                    },
                    backend_start: "x".into(),
                    state: state.into(),
                    query: String::new(),
                    xact_start: None,
                    wait_event_type: None,
                    wait_event: None,
                    blocked_by: vec![],
                    locks: vec![],
                }],
                ..Default::default()
            },
        })
    }

    #[test]
    fn round_trip_with_repeated_observations_written_once() {
        let dir = std::env::temp_dir().join(format!("pgchaos-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        let events: Vec<Event> = [obs("idle"), obs("idle"), obs("active"), obs("idle")]
            .into_iter()
            .chain([Body::RunEnd(RunEnd {
                cases: 1,
                stopped_by_time_limit: false,
                run_ms: 3,
            })])
            .enumerate()
            .map(|(i, body)| Event { t: i as u64, body })
            .collect();
        let w = HistoryWriter::create(&path).unwrap();
        w.write(events[..2].to_vec()).unwrap();
        w.write(events[2..].to_vec()).unwrap();
        let written = w.finish().unwrap();
        assert_eq!(written.events, 5);
        assert_eq!(written.bytes, std::fs::metadata(&path).unwrap().len());
        // On disk the second observation is a marker, the others deltas, not copies.
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(File::open(&path).unwrap()),
            &mut text,
        )
        .unwrap();
        assert_eq!(
            text.lines().filter(|l| l.contains("\"same\":true")).count(),
            1
        );
        assert_eq!(text.lines().filter(|l| l.contains("\"delta\":")).count(), 2);
        let back: Vec<Event> = HistoryReader::open(&dir)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(back, events);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_broken_line_is_named_by_file_and_line() {
        let dir = std::env::temp_dir().join(format!("pgchaos-history-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        let mut gz = flate2::write::GzEncoder::new(
            File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(b"{\"t\":1,\"type\":\"run_end\",\"cases\":0,\"stopped_by_time_limit\":false,\"run_ms\":0}\n{\"t\":2,\"type\":\"bogus\"}\n").unwrap();
        gz.finish().unwrap();
        let all: Vec<Result<Event>> = HistoryReader::open(&path).unwrap().collect();
        assert!(all[0].is_ok());
        let e = all[1].as_ref().unwrap_err().to_string();
        assert!(e.contains(&format!("{}:2:", path.display())), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
