//! Measures the cost of each piece of a step on a live topology:
//! `cargo run --release --example latency -- transaction-mode`
use pgchaos::client::LogicalClient;
use pgchaos::observe::Waits;
use pgchaos::run::Runner;
use pgchaos::vocab::{Key, Op};
use std::time::Instant;
const B: std::time::Duration = std::time::Duration::from_secs(5);

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let arg = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "transaction-mode".into());
    let topology = pgchaos::cli::load(&arg)?;
    let cluster = pgchaos::launch::launch(&topology, Default::default()).await?;
    let runner = Runner::new(&cluster).await?;
    let obs = &runner.observer;
    let n = 500;
    let mut c = LogicalClient::new(0);
    c.connect(&cluster.client_config()).await?;
    let k = Key::Big(4242424242);
    let time = |label: &str, t: Instant| {
        println!(
            "{label:<24} {:>8.3} ms/op",
            t.elapsed().as_secs_f64() * 1000.0 / n as f64
        )
    };
    let t = Instant::now();
    for i in 0..n {
        c.run(Op::TryXactLock, Some(k), None, None, i, B).await;
    }
    time("op (try_xact_lock)", t);
    let mut many: Vec<LogicalClient> = (0..4).map(LogicalClient::new).collect();
    for m in many.iter_mut() {
        m.connect(&cluster.client_config()).await?;
    }
    let t = Instant::now();
    for i in 0..n {
        many[i % 4]
            .run(Op::TryLock, Some(k), None, None, i, B)
            .await;
        many[i % 4].run(Op::Unlock, Some(k), None, None, i, B).await;
    }
    println!(
        "{:<24} {:>8.3} ms/op",
        "op, 4 clients in turn",
        t.elapsed().as_secs_f64() * 1000.0 / (2 * n) as f64
    );
    let t = Instant::now();
    for _ in 0..n {
        obs.snapshot().await?;
    }
    time("snapshot", t);
    let direct = pgchaos::launch::connect(&cluster.direct_config("postgres")).await?;
    let snap = pgchaos::sql::snapshot("chaos");
    let t = Instant::now();
    for _ in 0..n {
        pgchaos::client::run_raw(&direct, &snap).await;
    }
    time("snapshot: pg part", t);
    if cluster.console_at().is_some() {
        let admin = cluster.console().await?;
        let t = Instant::now();
        for _ in 0..n {
            admin.look("chaos", false).await?;
        }
        time(
            "the pooler's look (PgBouncer: SHOW SERVERS and SHOW CLIENTS)",
            t,
        );
    }
    let t = Instant::now();
    for _ in 0..n {
        obs.probe(k).await?;
    }
    time("contender probe", t);
    let t = Instant::now();
    for i in 0..n {
        let (_, served) = c.run(Op::TryXactLock, Some(k), None, None, i, B).await;
        let waits = Waits {
            quiet: served.into_iter().collect(),
            ..Default::default()
        };
        obs.settle(None, &waits).await?;
    }
    time("op + settle", t);
    let t = Instant::now();
    for _ in 0..n {
        obs.settle(None, &Waits::default()).await?;
    }
    time("settle alone", t);
    let t = Instant::now();
    for _ in 0..50 {
        obs.reset().await?;
    }
    println!(
        "{:<24} {:>8.3} ms/op",
        "reset",
        t.elapsed().as_secs_f64() * 1000.0 / 50.0
    );
    let t = Instant::now();
    for i in 0..50 {
        obs.reset().await?;
        let mut c = LogicalClient::new(0);
        c.connect(&cluster.client_config()).await?;
        c.run(Op::TryLock, Some(k), None, None, i, B).await;
    }
    println!(
        "{:<24} {:>8.3} ms/op",
        "reset+connect+first op",
        t.elapsed().as_secs_f64() * 1000.0 / 50.0
    );
    Ok(())
}
