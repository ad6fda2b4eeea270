//! The PostgreSQL wire-protocol tap: one TCP listener on loopback between clients and the
//! pooler, each client connection its own lane with a connection of its own to the upstream.
//! It records, never judges, and never alters what it relays: every chunk is forwarded as it
//! was read, and the record is made from a copy. Part of the `run` stage's observation side:
//! `pgchaos run` puts it in front of the pooler while the user's command runs as replicas.
//!
//! Files: `frame.rs` (the splitter: type byte + length), `decode.rs` (frames into the
//! record's messages, with `pgwire`'s codecs), `pair.rs` (which request each reply answers),
//! `lane.rs` (one connection: startup, SSL `N`, cancel, the two pumps), `owner.rs` (the local
//! process that owns a client's socket), `record.rs` (the record and its writer),
//! `sqlscan.rs` (a tokenizer that finds function calls and a statement's first words) and
//! `extract.rs` (the typed list of what matters, from a record: pure).
//!
//! It runs on a thread of its own with its own single-threaded runtime, so the harness's
//! runtime and the relay do not wait for each other; the record is written by another thread.
//! May import `history` (the observation type a look carries) and `vocab`; the CLI starts it.

pub mod decode;
pub mod extract;
#[cfg(test)]
mod extract_tests;
pub mod frame;
pub mod lane;
pub mod owner;
pub mod pair;
pub mod record;
pub mod sqlscan;

use anyhow::{Context, Result};
use record::{Body, Recorder};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::sync::watch;

/// What the tap needs.
#[derive(Clone, Debug)]
pub struct TapOptions {
    /// Where lanes connect (the pooler, or PostgreSQL).
    pub upstream: SocketAddr,
    /// Look up which local process owns each client's socket (`record::Body::Owner`),
    /// looking first at the processes listed here (and their descendants); `None`: do not.
    pub owners: Option<Candidates>,
}

/// Processes to look at first for a socket's owner (`pgchaos run`: the replicas' pids).
pub type Candidates = Arc<std::sync::Mutex<Vec<i32>>>;

/// Frontend bodies (SQL texts, Bind parameters) are kept up to 1 MiB, backend ones up to
/// 64 KiB; longer frames are relayed and recorded by type and length.
pub const FE_CAP: usize = 1 << 20;
pub const BE_CAP: usize = 64 << 10;
/// How often the relay's buffered events go to the record's writer.
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(20);
/// DataRow values are kept for the first rows of each reply.
pub const ROWS_KEPT: u32 = 16;

/// A running tap (see the module doc). Stopping it (or dropping it) ends every lane.
pub struct Tap {
    port: u16,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Tap {
    /// Listen on 127.0.0.1 (a free port) and relay to `opts.upstream`, recording into `rec`
    /// (its first event, `begin`, is written here).
    pub fn start(opts: TapOptions, rec: Recorder) -> Result<Tap> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .context("tap: binding a loopback port")?;
        listener
            .set_nonblocking(true)
            .context("tap: a non-blocking listener")?;
        let port = listener.local_addr().context("tap: its address")?.port();
        rec.emit(Body::Begin {
            format: record::FORMAT,
            listen: format!("127.0.0.1:{port}"),
            upstream: opts.upstream.to_string(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(lane::Shared {
            upstream: opts.upstream,
            rec,
            port,
            owners: opts.owners,
            fe_cap: FE_CAP,
            be_cap: BE_CAP,
            rows_kept: ROWS_KEPT,
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("tap: starting its runtime")?;
        let thread = std::thread::Builder::new()
            .name("pgchaos-tap".into())
            .spawn(move || rt.block_on(accept(listener, shared, stop_rx)))
            .context("tap: starting its thread")?;
        Ok(Tap {
            port,
            stop,
            thread: Some(thread),
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// End every lane and the listener; the number of lanes served. The tap's clone of the
    /// recorder is dropped when this returns.
    pub fn stop(mut self) -> u64 {
        self.halt()
    }

    fn halt(&mut self) -> u64 {
        let _ = self.stop.send(true);
        self.thread
            .take()
            .map(|t| t.join().unwrap_or(0))
            .unwrap_or(0)
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.halt();
    }
}

async fn accept(
    listener: std::net::TcpListener,
    sh: Arc<lane::Shared>,
    mut stop: watch::Receiver<bool>,
) -> u64 {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(_) => return 0,
    };
    let mut lanes = tokio::task::JoinSet::new();
    let mut n = 0u64;
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    loop {
        tokio::select! {
            _ = flush.tick() => sh.rec.flush(),
            r = listener.accept() => {
                let Ok((sock, _)) = r else { continue };
                n += 1;
                lanes.spawn(lane::serve(n, sock, sh.clone(), stop.clone()));
            }
            _ = stop.changed() => break,
            Some(_) = lanes.join_next(), if !lanes.is_empty() => {}
        }
    }
    drop(listener);
    // Every lane sees the stop and records its end.
    while lanes.join_next().await.is_some() {}
    sh.rec.emit(Body::End { lanes: n });
    sh.rec.flush();
    n
}
