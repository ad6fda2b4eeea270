//! The recorder the runner writes into: events stamped on the run's clock, buffered for the
//! case in progress (the engine checks the case, then hands it to the writer).

use super::event::{Body, Event};
use std::time::Instant;

pub struct Recorder {
    t0: Instant,
    buf: Vec<Event>,
}

impl Recorder {
    /// A recorder whose clock starts at `t0` (the run's start).
    pub fn new(t0: Instant) -> Recorder {
        Recorder { t0, buf: vec![] }
    }

    /// Nanoseconds since the run started.
    pub fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    pub fn emit(&mut self, body: Body) {
        let t = self.now();
        self.buf.push(Event { t, body });
    }

    /// Record an event that happened at `t` (e.g. a sample, stamped when it started).
    pub fn emit_at(&mut self, t: u64, body: Body) {
        self.buf.push(Event { t, body });
    }

    /// The events recorded since the last take.
    pub fn take(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.buf)
    }
}
