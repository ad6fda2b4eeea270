//! One client connection of the tap: its lane. The startup packet is read here whole (an
//! SSLRequest or GSSENCRequest is answered `N`, so the client goes on in plain text; a
//! CancelRequest is relayed on a connection of its own; a protocol version other than 3.0
//! or 3.2 is refused with an ErrorResponse that says so), then a connection to the upstream
//! carries the lane, and two pumps relay the two directions. A pump forwards each chunk as it
//! was read, after the splitter, the codec and the pairing have looked at a copy: a request
//! is known to the pairing before the server can answer it, a reply before the client can
//! react to it.

use super::decode::{self, LaneCodec};
use super::frame::{Frame, Splitter};
use super::pair::{BeKind, FeKind, Pairing};
use super::record::{Body, ClosedBy, Dir, Event, Fe, Recorder};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;

/// The startup packet codes (PostgreSQL's `pqcomm.h`).
const SSL_REQUEST: u32 = 80877103;
const GSSENC_REQUEST: u32 = 80877104;
const CANCEL_REQUEST: u32 = 80877102;
const PROTOCOL_3_0: u32 = 196608;
const PROTOCOL_3_2: u32 = 196610;
/// PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`.
const MAX_STARTUP: u32 = 10_000;
/// Bound on connecting to the upstream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After one direction ended, how long the other may go on.
const DRAIN: Duration = Duration::from_secs(5);
/// Bytes read from a socket at once.
const CHUNK: usize = 64 * 1024;

/// What every lane shares.
pub struct Shared {
    pub upstream: SocketAddr,
    pub rec: Recorder,
    /// The tap's own port (to find a client's socket in /proc).
    pub port: u16,
    /// Look up which process owns each client's socket, looking first at these (and their
    /// descendants); `None`: do not look.
    pub owners: Option<super::Candidates>,
    /// Frontend bodies kept up to this size (SQL texts), backend bodies up to `be_cap`.
    pub fe_cap: usize,
    pub be_cap: usize,
    /// DataRow values are kept for this many rows of each reply.
    pub rows_kept: u32,
}

/// One lane's state, shared by its two pumps.
struct State {
    next: u64,
    pairing: Pairing,
    codec: LaneCodec,
}

impl State {
    fn n(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

/// Serve one client connection until it ends or `stop` fires.
pub async fn serve(lane: u64, client: TcpStream, sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let peer_port = client.peer_addr().map(|a| a.port()).unwrap_or(0);
    sh.rec.emit(Body::LaneOpen { lane, peer_port });
    if let Some(first) = &sh.owners {
        let (rec, tap_port) = (sh.rec.clone(), sh.port);
        let first: Vec<i32> = first.lock().map(|v| v.clone()).unwrap_or_default();
        tokio::task::spawn_blocking(move || {
            if let Some((pid, pgid)) = super::owner::socket_owner(peer_port, tap_port, &first) {
                rec.emit(Body::Owner { lane, pid, pgid });
            }
        });
    }
    let work = run(lane, client, &sh);
    let (by, bytes, error) = tokio::select! {
        r = work => r,
        _ = stop.changed() => (ClosedBy::Tap, (0, 0), Some("the tap stopped".into())),
    };
    sh.rec.emit(Body::LaneClose {
        lane,
        by,
        bytes_fe: bytes.0,
        bytes_be: bytes.1,
        error,
    });
}

type Ended = (ClosedBy, (u64, u64), Option<String>);

async fn run(lane: u64, mut client: TcpStream, sh: &Shared) -> Ended {
    let mut st = State {
        next: 0,
        pairing: Pairing::default(),
        codec: LaneCodec::new(0),
    };
    let (packet, startup, n) = match startup(lane, &mut client, sh, &mut st).await {
        Ok(Some(p)) => p,
        Ok(None) => return (ClosedBy::Tap, (0, 0), None),
        Err(e) => return e,
    };
    let mut up = match connect(sh.upstream).await {
        Ok(up) => up,
        Err(e) => {
            let why = format!("cannot reach the upstream {}: {e}", sh.upstream);
            refuse(lane, &mut client, sh, "08006", &why).await;
            return (ClosedBy::Tap, (packet.len() as u64, 0), Some(why));
        }
    };
    let local_port = up.local_addr().map(|a| a.port()).unwrap_or(0);
    sh.rec.emit(Body::Upstream { lane, local_port });
    let (t, wall) = sh.rec.now();
    st.pairing.frontend(n, FeKind::Startup);
    sh.rec.send(vec![Event {
        t,
        wall,
        body: Body::Fe {
            lane,
            n,
            len: packet.len() as u32,
            msg: startup,
            discarded: false,
            part_of: None,
        },
    }]);
    if let Err(e) = up.write_all(&packet).await {
        return (
            ClosedBy::Server,
            (0, 0),
            Some(format!("writing the startup packet upstream: {e}")),
        );
    }
    relay(lane, client, up, st, sh).await
}

/// The startup packet, after any SSL/GSS requests (answered `N`): the packet's bytes, the
/// decoded StartupMessage and its number in the lane; `None` when the lane ended here (a cancel relayed, a refusal).
async fn startup(
    lane: u64,
    client: &mut TcpStream,
    sh: &Shared,
    st: &mut State,
) -> Result<Option<(Vec<u8>, Fe, u64)>, Ended> {
    let closed = |e: std::io::Error| {
        (
            ClosedBy::Client,
            (0, 0),
            Some(format!("before its startup packet: {e}")),
        )
    };
    loop {
        let mut head = [0u8; 4];
        client.read_exact(&mut head).await.map_err(closed)?;
        let len = u32::from_be_bytes(head);
        if !(8..=MAX_STARTUP).contains(&len) {
            let why = if head[0] == 0x16 {
                "a TLS handshake without an SSLRequest (direct TLS): the tap speaks plain text only"
                    .to_string()
            } else {
                format!("a startup packet of length {len}: not the PostgreSQL protocol")
            };
            sh.rec.emit(Body::TapReply {
                lane,
                reply: "closed".into(),
                refused: Some(why.clone()),
            });
            return Err((ClosedBy::Tap, (4, 0), Some(why)));
        }
        let mut body = vec![0u8; len as usize - 4];
        client.read_exact(&mut body).await.map_err(closed)?;
        let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        let mut packet = head.to_vec();
        packet.extend_from_slice(&body);
        let n = st.n();
        let fe_event = |msg: Fe| {
            let (t, wall) = sh.rec.now();
            Event {
                t,
                wall,
                body: Body::Fe {
                    lane,
                    n,
                    len,
                    msg,
                    discarded: false,
                    part_of: None,
                },
            }
        };
        match code {
            SSL_REQUEST | GSSENC_REQUEST => {
                let msg = if code == SSL_REQUEST {
                    Fe::SslRequest
                } else {
                    Fe::GssEncRequest
                };
                sh.rec.send(vec![fe_event(msg)]);
                client.write_all(b"N").await.map_err(closed)?;
                sh.rec.emit(Body::TapReply {
                    lane,
                    reply: "N".into(),
                    refused: None,
                });
            }
            CANCEL_REQUEST => {
                let pid = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                sh.rec.send(vec![fe_event(Fe::CancelRequest {
                    pid,
                    key_len: body.len().saturating_sub(8),
                })]);
                relay_cancel(lane, &packet, sh).await;
                return Ok(None);
            }
            PROTOCOL_3_0 | PROTOCOL_3_2 => {
                let Some(msg) = decode::startup(&body) else {
                    let why = "a StartupMessage the codec cannot read".to_string();
                    refuse(lane, client, sh, "08P01", &why).await;
                    return Err((ClosedBy::Tap, (len as u64, 0), Some(why)));
                };
                st.codec.minor = (code & 0xffff) as u16;
                return Ok(Some((packet, msg, n)));
            }
            other => {
                let why = format!(
                    "unsupported frontend protocol {}.{}: the pgchaos tap knows 3.0 and 3.2",
                    other >> 16,
                    other & 0xffff
                );
                refuse(lane, client, sh, "0A000", &why).await;
                return Err((ClosedBy::Tap, (len as u64, 0), Some(why)));
            }
        }
    }
}

async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(r) => {
            let s = r?;
            s.set_nodelay(true)?;
            Ok(s)
        }
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {CONNECT_TIMEOUT:?}"),
        )),
    }
}

/// Tell the client why the tap ends its lane (a FATAL ErrorResponse), and record it.
async fn refuse(lane: u64, client: &mut TcpStream, sh: &Shared, code: &str, why: &str) {
    let mut body = Vec::new();
    for (k, v) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', &format!("pgchaos tap: {why}")),
    ] {
        body.push(k);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = vec![b'E'];
    msg.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    msg.extend_from_slice(&body);
    let _ = client.write_all(&msg).await;
    let _ = client.shutdown().await;
    sh.rec.emit(Body::TapReply {
        lane,
        reply: format!("ErrorResponse {code}"),
        refused: Some(why.to_string()),
    });
}

/// A CancelRequest goes upstream on a connection of its own, which the server closes.
async fn relay_cancel(lane: u64, packet: &[u8], sh: &Shared) {
    if let Ok(mut up) = connect(sh.upstream).await {
        let local_port = up.local_addr().map(|a| a.port()).unwrap_or(0);
        sh.rec.emit(Body::Upstream { lane, local_port });
        if up.write_all(packet).await.is_ok() {
            let mut sink = [0u8; 64];
            let _ = tokio::time::timeout(CONNECT_TIMEOUT, up.read(&mut sink)).await;
        }
    }
}

async fn relay(lane: u64, client: TcpStream, up: TcpStream, st: State, sh: &Shared) -> Ended {
    let _ = client.set_nodelay(true);
    let st = Arc::new(Mutex::new(st));
    let (cr, cw) = client.into_split();
    let (ur, uw) = up.into_split();
    let fe = pump(lane, Dir::Fe, cr, uw, st.clone(), sh);
    let be = pump(lane, Dir::Be, ur, cw, st, sh);
    tokio::pin!(fe, be);
    // The first direction to end says who closed; the other gets a bounded drain.
    let (first, by, other) = tokio::select! {
        r = &mut fe => (r, ClosedBy::Client, None),
        r = &mut be => (r, ClosedBy::Server, Some(())),
    };
    let second = if other.is_some() {
        tokio::time::timeout(DRAIN, &mut fe).await
    } else {
        tokio::time::timeout(DRAIN, &mut be).await
    };
    let (fe_r, be_r) = match (by, second) {
        (ClosedBy::Client, Ok(s)) => (first, s),
        (ClosedBy::Client, Err(_)) => (
            first,
            Err(("did not end after the client's side".into(), 0)),
        ),
        (_, Ok(s)) => (s, first),
        (_, Err(_)) => (
            Err(("did not end after the server's side".into(), 0)),
            first,
        ),
    };
    let bytes_of = |r: &Result<u64, (String, u64)>| match r {
        Ok(b) | Err((_, b)) => *b,
    };
    let error = [&fe_r, &be_r]
        .iter()
        .filter_map(|r| r.as_ref().err().map(|(e, _)| e.clone()))
        .reduce(|a, b| format!("{a}; {b}"));
    (by, (bytes_of(&fe_r), bytes_of(&be_r)), error)
}

/// Relay one direction: read, look at a copy, forward the same bytes. Ends at EOF (then the
/// other side's write half is shut down) or an error; the bytes relayed either way.
async fn pump(
    lane: u64,
    dir: Dir,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    st: Arc<Mutex<State>>,
    sh: &Shared,
) -> Result<u64, (String, u64)> {
    let cap = if dir == Dir::Fe { sh.fe_cap } else { sh.be_cap };
    let mut split = Splitter::new(cap);
    let mut buf = vec![0u8; CHUNK];
    let mut frames: Vec<Frame> = Vec::new();
    let mut total = 0u64;
    let side = if dir == Dir::Fe { "client" } else { "server" };
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                let _ = to.shutdown().await;
                return Ok(total);
            }
            Ok(n) => n,
            Err(e) => {
                let _ = to.shutdown().await;
                return Err((format!("reading from the {side}: {e}"), total));
            }
        };
        let was_broken = split.broken().is_some();
        frames.clear();
        split.feed(&buf[..n], &mut frames);
        if !frames.is_empty() {
            let events = {
                let mut s = st.lock().expect("lane state");
                look(lane, dir, &frames, &mut s, sh)
            };
            sh.rec.send(events);
        }
        if !was_broken && let Some(why) = split.broken() {
            sh.rec.emit(Body::Unparsed {
                lane,
                dir,
                why: why.to_string(),
            });
        }
        if let Err(e) = to.write_all(&buf[..n]).await {
            return Err((
                format!(
                    "writing to the {}: {e}",
                    if dir == Dir::Fe { "server" } else { "client" }
                ),
                total,
            ));
        }
        total += n as u64;
    }
}

/// The events of frames read together (one time for all of them).
fn look(lane: u64, dir: Dir, frames: &[Frame], st: &mut State, sh: &Shared) -> Vec<Event> {
    let (t, wall) = sh.rec.now();
    let mut out = Vec::with_capacity(frames.len());
    for f in frames {
        let n = st.n();
        let body = match dir {
            Dir::Fe => {
                let p = st.pairing.frontend(n, FeKind::of_tag(f.tag));
                Body::Fe {
                    lane,
                    n,
                    len: f.len,
                    msg: decode::frontend(f.tag, f.len, f.body.as_deref(), &st.codec),
                    discarded: p.discarded,
                    part_of: p.part_of,
                }
            }
            Dir::Be => {
                let p = st
                    .pairing
                    .backend(BeKind::of_frame(f.tag, f.body.as_deref()));
                let values = p.row.is_some_and(|r| r < sh.rows_kept);
                Body::Be {
                    lane,
                    n,
                    len: f.len,
                    msg: decode::backend(f.tag, f.len, f.body.as_deref(), values, &mut st.codec),
                    answers: p.answers,
                    skipped: p.skipped,
                }
            }
        };
        out.push(Event { t, wall, body });
    }
    out
}
