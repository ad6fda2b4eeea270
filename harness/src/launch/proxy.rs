//! A loopback TCP proxy that pgchaos owns and runs inside its own process, so the nemesis
//! can fault one network link (the idea of PgBouncer's own socat test fixture: PgBouncer
//! connects to PostgreSQL through it).
//!
//! What it owns: one listening socket on 127.0.0.1, one listener task, and every
//! connection pair it accepted (client side accepted here, upstream side connected from
//! here to 127.0.0.1:`upstream_port`). All of them are tokio tasks (no thread per
//! connection); the listener task holds the connection tasks in a `JoinSet`, so ending
//! the listener ends every connection. [`Proxy::shutdown`] (or dropping the [`Proxy`])
//! signals a `watch` channel every task selects on and aborts the listener task: no task
//! is left forwarding.
//!
//! The link is faulted with [`Proxy::set_mode`]; a mode applies at once to connections
//! already open as well as to new ones. Everything runs on the caller's runtime (the
//! crate uses a current-thread runtime), so a change made by a synchronous call takes
//! effect when the runtime next runs, i.e. at the caller's next `.await`.

use anyhow::{Context, Result};
use std::future::pending;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until, timeout};

/// Every connect to the upstream is bounded by this.
pub const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest chunk read from one side before it is queued for the other.
const CHUNK: usize = 16 * 1024;

/// Chunks queued per direction before the reading side stops reading (back-pressure).
const QUEUE: usize = 64;

/// What the link does to traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Forward both directions as fast as the sockets allow (the healed link).
    Forward,
    /// Close both sides of every open connection; new connections are accepted and
    /// closed at once.
    Cut,
    /// Keep every socket open and forward nothing, in either direction (bytes, EOF and
    /// errors alike): half-open connections. New connections are accepted; their upstream
    /// connect waits until the blackhole ends.
    Blackhole,
    /// Forward every chunk this long after it was read, both directions, order preserved.
    Delay(Duration),
}

/// The proxy: see the module doc for what it owns.
pub struct Proxy {
    port: u16,
    mode: watch::Sender<LinkMode>,
    stop: watch::Sender<bool>,
    open: Arc<AtomicUsize>,
    listener: JoinHandle<()>,
}

impl Proxy {
    /// Listen on 127.0.0.1:`listen_port` (0 = pick a free port), forward to
    /// 127.0.0.1:`upstream_port`. Starts in [`LinkMode::Forward`]. Must be called inside a
    /// tokio runtime; the tasks run whenever that runtime runs.
    pub async fn start(listen_port: u16, upstream_port: u16) -> Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, listen_port))
            .await
            .with_context(|| format!("proxy: binding 127.0.0.1:{listen_port}"))?;
        let port = listener
            .local_addr()
            .context("proxy: local address")?
            .port();
        let (mode, mode_rx) = watch::channel(LinkMode::Forward);
        let (stop, stop_rx) = watch::channel(false);
        let open = Arc::new(AtomicUsize::new(0));
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let listener = tokio::spawn(listen(
            listener,
            upstream,
            mode_rx,
            stop_rx,
            Arc::clone(&open),
        ));
        Ok(Proxy {
            port,
            mode,
            stop,
            open,
            listener,
        })
    }

    /// The port the proxy listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Change what the link does, for open connections and new ones alike.
    ///
    /// - `Cut`: close both sides of every open connection now and refuse
    ///   (accept-then-close) new ones until the mode changes.
    /// - `Blackhole`: keep every socket open and forward nothing in either direction.
    ///   New connections are accepted but nothing is forwarded (and no upstream connect is
    ///   made) until the mode changes.
    /// - `Delay(d)`: forward every chunk `d` after it was read, both directions, order
    ///   preserved. Chunks already queued are re-timed against the new delay.
    /// - `Forward`: heal. Bytes held by a blackhole are NOT dropped: they (and any EOF
    ///   held with them) are delivered in order once healed, as TCP retransmission would
    ///   deliver them after a real partition heals. Connections closed by `Cut` stay
    ///   closed.
    pub fn set_mode(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> LinkMode {
        *self.mode.borrow()
    }

    /// How many accepted client connections the proxy holds open now (with their upstream
    /// side, once connected; a connection accepted during a blackhole counts while it
    /// waits). Closes made by a mode change or `shutdown` are counted once the runtime has
    /// run the tasks.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Stop listening and close every connection (when the runtime next runs). Idempotent;
    /// `Drop` does it too.
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
        self.listener.abort();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Counts one held connection for as long as it lives (also when its task is aborted).
struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: &Arc<AtomicUsize>) -> OpenGuard {
        open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(Arc::clone(open))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The listener task: accepts until stopped, owns every connection task in a `JoinSet`
/// (dropping it, by return or abort, aborts them all).
async fn listen(
    listener: TcpListener,
    upstream: SocketAddr,
    mut mode: watch::Receiver<LinkMode>,
    mut stop: watch::Receiver<bool>,
    open: Arc<AtomicUsize>,
) {
    let mut conns = JoinSet::new();
    loop {
        if *stop.borrow_and_update() {
            break;
        }
        tokio::select! {
            biased;
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    if *mode.borrow_and_update() == LinkMode::Cut {
                        drop(client); // accept-then-close
                        continue;
                    }
                    let guard = OpenGuard::new(&open);
                    conns.spawn(serve(client, upstream, mode.clone(), stop.clone(), guard));
                }
                // Transient (EMFILE, ECONNABORTED...): do not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
    conns.shutdown().await;
}

/// Resolves when the connection must close: the mode is `Cut`, or the proxy stops.
async fn until_closed(mut mode: watch::Receiver<LinkMode>, mut stop: watch::Receiver<bool>) {
    loop {
        if *mode.borrow_and_update() == LinkMode::Cut || *stop.borrow_and_update() {
            return;
        }
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { return },
            changed = stop.changed() => if changed.is_err() { return },
        }
    }
}

/// One connection pair, from the accepted client to its end.
async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    mode: watch::Receiver<LinkMode>,
    stop: watch::Receiver<bool>,
    _open: OpenGuard,
) {
    let closed = until_closed(mode.clone(), stop);
    tokio::pin!(closed);
    let upstream = tokio::select! {
        biased;
        _ = &mut closed => return,
        connected = connect_upstream(upstream, mode.clone()) => match connected {
            Ok(stream) => stream,
            Err(_) => return, // dropping the client closes it
        },
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let both = futures_util::future::try_join(
        pump(client_read, upstream_write, mode.clone()),
        pump(upstream_read, client_write, mode),
    );
    tokio::select! {
        biased;
        _ = &mut closed => {}
        _ = both => {}
    }
    // Every half is dropped here: both sockets close.
}

/// Connect to the upstream once the link is not blackholed, bounded by the timeout.
async fn connect_upstream(
    upstream: SocketAddr,
    mut mode: watch::Receiver<LinkMode>,
) -> io::Result<TcpStream> {
    while *mode.borrow_and_update() == LinkMode::Blackhole {
        if mode.changed().await.is_err() {
            return pending().await;
        }
    }
    match timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(connected) => connected,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "proxy: upstream connect timed out",
        )),
    }
}

/// What one side produced, queued for the other side.
enum Item {
    Data(Vec<u8>),
    Eof,
    Failed(io::Error),
}

/// One direction: read chunks from `from`, write each to `to` when the mode lets it go.
/// Returns when the EOF has been passed on (Ok) or either side failed (Err).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<LinkMode>,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Item)>(QUEUE);
    let read = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let item = match from.read(&mut buf).await {
                Ok(0) => Item::Eof,
                Ok(n) => Item::Data(buf[..n].to_vec()),
                Err(e) => Item::Failed(e),
            };
            let last = !matches!(item, Item::Data(_));
            if tx.send((Instant::now(), item)).await.is_err() || last {
                break;
            }
        }
        // The writer ends the pump; the reader just stops here.
        pending::<()>().await;
    };
    let write = async move {
        while let Some((read_at, item)) = rx.recv().await {
            let_through(read_at, &mut mode).await;
            match item {
                Item::Data(bytes) => to.write_all(&bytes).await?,
                Item::Eof => {
                    // Half-close: pass the EOF on, the other direction goes on.
                    let _ = to.shutdown().await;
                    return Ok(());
                }
                Item::Failed(e) => return Err(e),
            }
        }
        Ok(())
    };
    tokio::select! {
        _ = read => unreachable!("the reader never completes"),
        done = write => done,
    }
}

/// Wait until an item read at `read_at` may be forwarded under the current mode
/// (re-evaluated whenever the mode changes). `Cut` never lets through: the connection
/// closes around it.
async fn let_through(read_at: Instant, mode: &mut watch::Receiver<LinkMode>) {
    loop {
        let current = *mode.borrow_and_update();
        let due = match current {
            LinkMode::Forward => return,
            LinkMode::Delay(d) => Some(read_at + d),
            LinkMode::Blackhole | LinkMode::Cut => None,
        };
        match due {
            Some(due) if Instant::now() >= due => return,
            Some(due) => tokio::select! {
                _ = sleep_until(due) => return,
                changed = mode.changed() => if changed.is_err() { pending::<()>().await },
            },
            None => {
                if mode.changed().await.is_err() {
                    pending::<()>().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant as StdInstant;

    /// A loopback echo server; returns its port. Each connection echoes until EOF, then
    /// closes its write side.
    async fn echo_server() -> u16 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        port
    }

    async fn connect(port: u16) -> TcpStream {
        TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .unwrap()
    }

    /// Write `msg` and read the same number of bytes back (bounded by 5 s).
    async fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        stream.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        timeout(Duration::from_secs(5), stream.read_exact(&mut back))
            .await
            .expect("echo within 5 s")
            .unwrap();
        back
    }

    /// True if the peer closed the stream (EOF or error) within `within`; panics if data
    /// arrives instead.
    async fn closes_within(stream: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 64];
        match timeout(within, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(n)) => panic!("expected a close, got {n} bytes"),
            Err(_) => false,
        }
    }

    /// Wait (bounded) until the proxy reports `n` open connections.
    async fn wait_open(proxy: &Proxy, n: usize) {
        let deadline = StdInstant::now() + Duration::from_secs(2);
        while proxy.open_connections() != n {
            assert!(
                StdInstant::now() < deadline,
                "open_connections stayed {} (wanted {n})",
                proxy.open_connections()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn forwards_both_ways_and_passes_eof() {
        let proxy = Proxy::start(0, echo_server().await).await.unwrap();
        assert_ne!(proxy.port(), 0);
        assert_eq!(proxy.mode(), LinkMode::Forward);
        let mut c = connect(proxy.port()).await;
        assert_eq!(round_trip(&mut c, b"hello").await, b"hello");
        wait_open(&proxy, 1).await;

        // A payload larger than the queue, written while reading, comes back intact.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = c.into_split();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&sent).await.unwrap();
            w.shutdown().await.unwrap(); // EOF towards the echo server
            w
        });
        let mut back = Vec::new();
        timeout(Duration::from_secs(10), r.read_to_end(&mut back))
            .await
            .expect("echo and EOF within 10 s")
            .unwrap();
        let _w = writer.await.unwrap();
        assert_eq!(back.len(), big.len());
        assert!(back == big, "echoed bytes differ");
        // read_to_end returned: the echo server's EOF came back through the proxy.
        drop((r, _w));
        wait_open(&proxy, 0).await;
    }

    #[tokio::test]
    async fn delay_applies_to_open_connections_both_ways() {
        let proxy = Proxy::start(0, echo_server().await).await.unwrap();
        let mut c = connect(proxy.port()).await;
        assert_eq!(round_trip(&mut c, b"warm").await, b"warm");

        let d = Duration::from_millis(150);
        proxy.set_mode(LinkMode::Delay(d));
        assert_eq!(proxy.mode(), LinkMode::Delay(d));
        let t = StdInstant::now();
        assert_eq!(round_trip(&mut c, b"late").await, b"late");
        let took = t.elapsed();
        // Delayed once on the way out and once on the way back.
        assert!(
            took >= 2 * d,
            "round trip took {took:?}, want >= {:?}",
            2 * d
        );

        // Several chunks in a row keep their order.
        for i in 0..5u8 {
            c.write_all(&[i]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut back = [0u8; 5];
        timeout(Duration::from_secs(5), c.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, [0, 1, 2, 3, 4]);

        proxy.set_mode(LinkMode::Forward);
        assert_eq!(round_trip(&mut c, b"fast").await, b"fast");
    }

    #[tokio::test]
    async fn cut_closes_open_connections_and_refuses_new_ones() {
        let proxy = Proxy::start(0, echo_server().await).await.unwrap();
        let mut c = connect(proxy.port()).await;
        assert_eq!(round_trip(&mut c, b"before").await, b"before");
        wait_open(&proxy, 1).await;

        proxy.set_mode(LinkMode::Cut);
        assert!(
            closes_within(&mut c, Duration::from_secs(2)).await,
            "open connection not closed by cut"
        );
        wait_open(&proxy, 0).await;

        // A new connection is accepted and closed at once (or refused outright).
        if let Ok(mut n) = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port())).await {
            let _ = n.write_all(b"anyone?").await;
            assert!(
                closes_within(&mut n, Duration::from_secs(2)).await,
                "new connection not closed during cut"
            );
        }
        assert_eq!(proxy.open_connections(), 0);

        proxy.set_mode(LinkMode::Forward);
        let mut h = connect(proxy.port()).await;
        assert_eq!(round_trip(&mut h, b"healed").await, b"healed");
    }

    #[tokio::test]
    async fn blackhole_holds_sockets_open_and_forwards_nothing() {
        let proxy = Proxy::start(0, echo_server().await).await.unwrap();
        let mut c = connect(proxy.port()).await;
        assert_eq!(round_trip(&mut c, b"before").await, b"before");

        proxy.set_mode(LinkMode::Blackhole);
        c.write_all(b"lost?").await.unwrap();
        let mut buf = [0u8; 16];
        let r = timeout(Duration::from_millis(200), c.read(&mut buf)).await;
        assert!(r.is_err(), "expected silence (no echo, no EOF), got {r:?}");

        // A new connection is accepted, stays open, and gets nothing either.
        let mut n = connect(proxy.port()).await;
        n.write_all(b"new").await.unwrap();
        let r = timeout(Duration::from_millis(200), n.read(&mut buf)).await;
        assert!(
            r.is_err(),
            "expected silence on a new connection, got {r:?}"
        );
        wait_open(&proxy, 2).await;

        proxy.set_mode(LinkMode::Forward);
        // Held bytes are delivered after the heal, in order (documented: not dropped).
        let mut held = [0u8; 5];
        timeout(Duration::from_secs(5), c.read_exact(&mut held))
            .await
            .expect("held bytes delivered after heal")
            .unwrap();
        assert_eq!(&held, b"lost?");
        let mut held = [0u8; 3];
        timeout(Duration::from_secs(5), n.read_exact(&mut held))
            .await
            .expect("held bytes of the new connection delivered after heal")
            .unwrap();
        assert_eq!(&held, b"new");
        // And new connections work.
        let mut h = connect(proxy.port()).await;
        assert_eq!(round_trip(&mut h, b"healed").await, b"healed");
    }

    #[tokio::test]
    async fn unreachable_upstream_closes_the_client() {
        // A port with nothing listening: bind, note the port, close.
        let dead = {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
            l.local_addr().unwrap().port()
        };
        let proxy = Proxy::start(0, dead).await.unwrap();
        let mut c = connect(proxy.port()).await;
        assert!(
            closes_within(
                &mut c,
                Duration::from_secs(UPSTREAM_CONNECT_TIMEOUT.as_secs() + 2)
            )
            .await,
            "client not closed when the upstream is unreachable"
        );
        wait_open(&proxy, 0).await;
    }

    #[tokio::test]
    async fn shutdown_closes_everything_and_the_port() {
        let proxy = Proxy::start(0, echo_server().await).await.unwrap();
        let port = proxy.port();
        let mut c = connect(port).await;
        assert_eq!(round_trip(&mut c, b"before").await, b"before");
        wait_open(&proxy, 1).await;

        proxy.shutdown();
        proxy.shutdown(); // idempotent
        assert!(
            closes_within(&mut c, Duration::from_secs(2)).await,
            "open connection not closed by shutdown"
        );
        wait_open(&proxy, 0).await;
        assert!(
            TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .await
                .is_err(),
            "port still accepts after shutdown"
        );
    }

    #[tokio::test]
    async fn drop_closes_everything_and_the_port() {
        let proxy = Proxy::start(0, echo_server().await).await.unwrap();
        let port = proxy.port();
        let mut c = connect(port).await;
        assert_eq!(round_trip(&mut c, b"before").await, b"before");
        drop(proxy);
        assert!(
            closes_within(&mut c, Duration::from_secs(2)).await,
            "open connection not closed by drop"
        );
        assert!(
            TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .await
                .is_err(),
            "port still accepts after drop"
        );
    }
}
