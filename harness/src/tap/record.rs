//! The tap's record: what it saw, one JSON event per line in `tap.jsonl.gz`, written by a
//! thread of its own (a bounded channel: a slow disk slows the relay rather than letting
//! memory grow). Every event carries two times: `t`, nanoseconds on a monotonic clock since
//! the record began (order and durations), and `wall`, nanoseconds since the Unix epoch (to
//! line the record up with server logs). The lane tasks and the `run` command's observer write
//! into the same record through clones of one [`Recorder`].
//!
//! Secrets never enter it: password and SASL messages are kept as their kind and length (the
//! SASL mechanism name is kept), authentication challenges and cancel keys as lengths.
//! Big things are kept as sizes: a DataRow's values only for the first rows of each reply,
//! each value cut to [`VALUE_CAP`] bytes; COPY data as lengths. docs/tap.md describes every
//! field for the step that turns the record into a history.

use crate::history::Observation;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

/// The record's file name in a run directory.
pub const FILE: &str = "tap.jsonl.gz";
/// The record's format; a reader refuses another.
pub const FORMAT: u32 = 1;
/// A value in a DataRow or a Bind is kept up to this many bytes (and its full length).
pub const VALUE_CAP: usize = 256;

/// Which way a message went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// Client to server.
    Fe,
    /// Server to client.
    Be,
}

/// A value of a Bind parameter or a DataRow column, as far as it was kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Value {
    /// The bytes as text when they are UTF-8, else in hex (`hex`).
    pub v: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hex: bool,
    /// The full length when the value was cut to [`VALUE_CAP`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<usize>,
}

impl Value {
    pub fn from_bytes(b: &[u8]) -> Value {
        let kept = &b[..b.len().min(VALUE_CAP)];
        let (v, hex) = match std::str::from_utf8(kept) {
            Ok(s) => (s.to_string(), false),
            Err(_) => (kept.iter().map(|x| format!("{x:02x}")).collect(), true),
        };
        Value {
            v,
            hex,
            cut: (b.len() > VALUE_CAP).then_some(b.len()),
        }
    }

    /// The kept bytes back.
    pub fn bytes(&self) -> Vec<u8> {
        if !self.hex {
            return self.v.as_bytes().to_vec();
        }
        (0..self.v.len() / 2)
            .filter_map(|i| u8::from_str_radix(self.v.get(2 * i..2 * i + 2)?, 16).ok())
            .collect()
    }
}

/// What a password-family message ('p') was, by the authentication request it answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PasswordKind {
    Password,
    SaslInitial,
    Sasl,
    Gss,
    Unknown,
}

/// A frontend message as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Fe {
    SslRequest,
    GssEncRequest,
    Startup {
        major: u16,
        minor: u16,
        params: BTreeMap<String, String>,
    },
    /// The cancel key is not kept, only its length.
    CancelRequest {
        pid: i32,
        key_len: usize,
    },
    /// Redacted: its kind, the SASL mechanism, nothing else.
    Password {
        kind: PasswordKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mechanism: Option<String>,
    },
    Query {
        sql: String,
    },
    Parse {
        name: String,
        sql: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        types: Vec<u32>,
    },
    Bind {
        portal: String,
        statement: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        formats: Vec<i16>,
        params: Vec<Option<Value>>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        result_formats: Vec<i16>,
    },
    /// `what`: `S` (a statement) or `P` (a portal).
    Describe {
        what: char,
        name: String,
    },
    Execute {
        portal: String,
        max_rows: i32,
    },
    Close {
        what: char,
        name: String,
    },
    Sync,
    Flush,
    Terminate,
    CopyData,
    CopyDone,
    CopyFail {
        message: String,
    },
    FunctionCall,
    /// A frame the codec did not read (its type byte), or a body over the cap.
    Other {
        tag: char,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
}

/// A backend message as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Be {
    /// `code`: PostgreSQL's authentication request code (0 ok, 3 cleartext, 5 MD5, 10 SASL,
    /// 11 SASL continue, 12 SASL final, ...); SASL data is not kept.
    Authentication {
        code: i32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        mechanisms: Vec<String>,
    },
    ParameterStatus {
        name: String,
        value: String,
    },
    /// The secret key is not kept, only its length.
    BackendKeyData {
        pid: i32,
        key_len: usize,
    },
    NegotiateProtocolVersion {
        newest_minor: i32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unsupported: Vec<String>,
    },
    RowDescription {
        fields: Vec<Field>,
    },
    /// `values`: the row's columns for the first rows of a reply (see the module doc).
    DataRow {
        columns: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        values: Option<Vec<Option<Value>>>,
    },
    CommandComplete {
        tag: String,
    },
    EmptyQueryResponse,
    ErrorResponse(Notice),
    NoticeResponse(Notice),
    NotificationResponse {
        pid: i32,
        channel: String,
        payload: String,
    },
    /// `status`: `I` idle, `T` in a transaction, `E` in a failed transaction.
    ReadyForQuery {
        status: char,
    },
    ParseComplete,
    BindComplete,
    CloseComplete,
    NoData,
    PortalSuspended,
    ParameterDescription {
        types: Vec<u32>,
    },
    CopyInResponse {
        format: i8,
        columns: i16,
    },
    CopyOutResponse {
        format: i8,
        columns: i16,
    },
    CopyBothResponse {
        format: i8,
        columns: i16,
    },
    CopyData,
    CopyDone,
    FunctionCallResponse,
    Other {
        tag: char,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
}

/// A column of a RowDescription.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    #[serde(rename = "type")]
    pub type_oid: u32,
    /// 0 text, 1 binary.
    pub format: i16,
}

/// An ErrorResponse's or NoticeResponse's main fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub severity: String,
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// How a lane ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClosedBy {
    /// The client closed its side (after a Terminate, or not).
    Client,
    /// The upstream (the pooler) closed its side.
    Server,
    /// The tap ended it (refused it, or stopped).
    Tap,
}

/// One event of the record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Body {
    /// The record's first event.
    Begin {
        format: u32,
        listen: String,
        upstream: String,
    },
    /// A client connected to the tap; `peer_port`: its port.
    LaneOpen {
        lane: u64,
        peer_port: u16,
    },
    /// The lane's connection to the upstream is up; `local_port`: its port, which the pooler
    /// sees as the client's (PgBouncer's `SHOW CLIENTS` column `port`).
    Upstream {
        lane: u64,
        local_port: u16,
    },
    /// The process that owns the client's socket (read from /proc), and its process group.
    Owner {
        lane: u64,
        pid: i32,
        pgid: i32,
    },
    /// The tap answered the client itself (`N` to an SSL or GSS request) or refused it.
    TapReply {
        lane: u64,
        reply: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
    /// A frontend message. `n`: its place in the lane (both directions, in the order the
    /// tap handled them); `len`: its length field. A message sent while the server discards
    /// after an error (extended protocol, until Sync) is `discarded`; COPY data a client
    /// sends is `part_of` the request that started the COPY.
    Fe {
        lane: u64,
        n: u64,
        len: u32,
        msg: Fe,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        discarded: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        part_of: Option<u64>,
    },
    /// A backend message: which frontend message it `answers` (none: nothing was waiting for
    /// a reply, or it is asynchronous: a notification), and for an error in the extended
    /// protocol the requests it made the server discard (`skipped`).
    Be {
        lane: u64,
        n: u64,
        len: u32,
        msg: Be,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answers: Option<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<u64>,
    },
    /// The splitter stopped on bytes that are not the protocol (the relay went on).
    Unparsed {
        lane: u64,
        dir: Dir,
        why: String,
    },
    LaneClose {
        lane: u64,
        by: ClosedBy,
        bytes_fe: u64,
        bytes_be: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A look at the servers, taken while the clients ran (the `run` command's observer).
    Look {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round: Option<u32>,
        obs: Box<Observation>,
    },
    /// A round of `pgchaos run` began or ended (`database`: the one it ran on).
    Round {
        round: u32,
        database: String,
        end: bool,
    },
    /// A replica started (its process group) or ended.
    Replica {
        round: u32,
        replica: u32,
        pgid: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<String>,
    },
    End {
        lanes: u64,
    },
}

/// One line of the record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub t: u64,
    pub wall: u64,
    #[serde(flatten)]
    pub body: Body,
}

/// Where events go (cheap to clone; see the module doc). The relay's message batches are
/// gathered in a buffer shared by every clone and handed to the writer thread in blocks
/// ([`BLOCK`] events, or at [`Recorder::flush`]: the tap flushes every few milliseconds and
/// when it stops), so that thread wakes tens of times a second rather than at every chunk
/// relayed; other events ([`Recorder::emit`]) go out at once, after what is buffered.
#[derive(Clone)]
pub struct Recorder {
    tx: SyncSender<Vec<Event>>,
    epoch: Instant,
    buf: std::sync::Arc<std::sync::Mutex<Vec<Event>>>,
}

/// Buffered events handed to the writer at once.
pub const BLOCK: usize = 1024;

impl Recorder {
    /// The two times of an event happening now.
    pub fn now(&self) -> (u64, u64) {
        let t = self.epoch.elapsed().as_nanos() as u64;
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (t, wall)
    }

    /// Record one event happening now (after everything buffered).
    pub fn emit(&self, body: Body) {
        let (t, wall) = self.now();
        let mut batch = self.take();
        batch.push(Event { t, wall, body });
        self.deliver(batch);
    }

    /// Record a batch of the relay's events: buffered, handed over by the block.
    pub fn send(&self, batch: Vec<Event>) {
        if batch.is_empty() {
            return;
        }
        let full = {
            let mut b = self.buf.lock().unwrap_or_else(|e| e.into_inner());
            b.extend(batch);
            (b.len() >= BLOCK).then(|| std::mem::take(&mut *b))
        };
        if let Some(full) = full {
            self.deliver(full);
        }
    }

    /// Hand what is buffered to the writer.
    pub fn flush(&self) {
        let batch = self.take();
        self.deliver(batch);
    }

    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// To the writer (blocks while it is behind). A writer that stopped (a disk error) drops
    /// the batch: its `finish` reports the error.
    fn deliver(&self, batch: Vec<Event>) {
        if !batch.is_empty() {
            let _ = self.tx.send(batch);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The writer thread of one record.
pub struct RecordWriter {
    handle: Option<JoinHandle<Result<u64>>>,
    path: PathBuf,
}

impl RecordWriter {
    /// Create `path` and start writing; the writer ends when every [`Recorder`] is dropped.
    pub fn create(path: &Path) -> Result<(RecordWriter, Recorder)> {
        let file = File::create(path)
            .with_context(|| format!("creating the tap's record {}", path.display()))?;
        let (tx, rx) = sync_channel::<Vec<Event>>(1024);
        let shown = path.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("pgchaos-tap-record".into())
            .spawn(move || {
                write_loop(file, rx).with_context(|| format!("writing {}", shown.display()))
            })
            .context("starting the tap's record writer")?;
        Ok((
            RecordWriter {
                handle: Some(handle),
                path: path.to_path_buf(),
            },
            Recorder {
                tx,
                epoch: Instant::now(),
                buf: Default::default(),
            },
        ))
    }

    /// Wait until every recorder is dropped and the file is complete; the events written.
    pub fn finish(mut self) -> Result<u64> {
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(anyhow!(
                "the record writer of {} panicked",
                self.path.display()
            )),
            None => Ok(0),
        }
    }
}

fn write_loop(file: File, rx: Receiver<Vec<Event>>) -> Result<u64> {
    let gz = flate2::write::GzEncoder::new(
        BufWriter::with_capacity(1 << 16, file),
        flate2::Compression::fast(),
    );
    let mut out = BufWriter::with_capacity(1 << 16, gz);
    let mut n = 0u64;
    for batch in rx {
        for ev in batch {
            serde_json::to_writer(&mut out, &ev)?;
            out.write_all(b"\n")?;
            n += 1;
        }
    }
    let gz = out
        .into_inner()
        .map_err(|e| anyhow!("flushing: {}", e.error()))?;
    gz.finish()?.flush()?;
    Ok(n)
}

/// Read a record back (a gzip file, or plain JSON lines).
pub fn read(path: &Path) -> Result<Vec<Event>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::GzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    parse_lines(reader.lines().map(|l| l.map_err(anyhow::Error::from)))
        .with_context(|| format!("reading {}", path.display()))
}

/// Events from JSON lines; the first must be `begin` of this [`FORMAT`].
pub fn parse_lines(lines: impl Iterator<Item = Result<String>>) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    for (i, line) in lines.enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let ev: Event = serde_json::from_str(&line).map_err(|e| anyhow!("line {}: {e}", i + 1))?;
        if out.is_empty() {
            match &ev.body {
                Body::Begin { format, .. } if *format == FORMAT => {}
                Body::Begin { format, .. } => {
                    bail!("line 1: record format {format}; this pgchaos reads format {FORMAT}")
                }
                _ => bail!("line 1: not a tap record (it does not begin with a `begin` event)"),
            }
        }
        out.push(ev);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_text_or_hex_and_the_length_of_what_was_cut() {
        assert_eq!(Value::from_bytes(b"t").v, "t");
        // Binary that happens to be UTF-8 stays text; other binary goes to hex.
        let bin = Value::from_bytes(&[0, 0, 0, 0, 0, 0, 0, 42]);
        assert_eq!((bin.v.as_str(), bin.hex), ("\0\0\0\0\0\0\0*", false));
        assert_eq!(bin.bytes(), vec![0, 0, 0, 0, 0, 0, 0, 42]);
        let bin = Value::from_bytes(&[0, 0x6e, 0x81, 0x17]);
        assert_eq!((bin.v.as_str(), bin.hex), ("006e8117", true));
        assert_eq!(bin.bytes(), vec![0, 0x6e, 0x81, 0x17]);
        // A text value that looks like hex stays the text it is.
        assert_eq!(Value::from_bytes(b"\\x41").bytes(), b"\\x41".to_vec());
        let big = Value::from_bytes(&[b'a'; 1000]);
        assert_eq!((big.v.len(), big.cut), (VALUE_CAP, Some(1000)));
    }

    #[test]
    fn a_record_reads_back_as_written_and_refuses_what_is_not_one() {
        let dir = std::env::temp_dir().join(format!("pgchaos-tap-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        let (w, rec) = RecordWriter::create(&path).unwrap();
        rec.emit(Body::Begin {
            format: FORMAT,
            listen: "127.0.0.1:1".into(),
            upstream: "127.0.0.1:2".into(),
        });
        rec.emit(Body::Fe {
            lane: 1,
            n: 1,
            len: 13,
            msg: Fe::Query {
                sql: "SELECT 1".into(),
            },
            discarded: false,
            part_of: None,
        });
        rec.emit(Body::Be {
            lane: 1,
            n: 2,
            len: 5,
            msg: Be::CopyData,
            answers: Some(1),
            skipped: vec![],
        });
        drop(rec);
        assert_eq!(w.finish().unwrap(), 3);
        let back = read(&path).unwrap();
        assert_eq!(back.len(), 3);
        assert!(back[0].t <= back[2].t);
        match &back[2].body {
            // A backend CopyData stays a backend message (the frontend has one too).
            Body::Be {
                msg: Be::CopyData,
                answers,
                ..
            } => assert_eq!(*answers, Some(1)),
            other => panic!("{other:?}"),
        }
        let e = parse_lines(
            ["{\"t\":1,\"wall\":1,\"ev\":\"end\",\"lanes\":0}".to_string()]
                .into_iter()
                .map(Ok),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a tap record"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
