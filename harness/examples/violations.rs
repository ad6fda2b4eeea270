//! Print every violation the checker finds in a stored run, case by case (a debugging aid:
//! `cargo run --release --example violations -- RUN_DIR [INVARIANT_PREFIX]`).
use pgchaos::check::{CheckContext, check_case};
use pgchaos::history::{Body, HistoryReader};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::Path::new(&args[1]);
    let prefix = args.get(2).cloned().unwrap_or_default();
    let mut cx = None;
    let mut case: Vec<pgchaos::history::Event> = vec![];
    let flush = |cx: &Option<CheckContext>, case: &mut Vec<pgchaos::history::Event>| {
        if let (Some(cx), Some(first)) = (cx, case.first()) {
            let label = format!("{:?}", first.body)
                .chars()
                .take(120)
                .collect::<String>();
            if let Ok(check) = check_case(cx, case) {
                for v in check
                    .violations
                    .iter()
                    .filter(|v| v.invariant.starts_with(&prefix))
                {
                    println!(
                        "{label}\n  step {} {}: {}",
                        v.step + 1,
                        v.invariant,
                        v.detail
                    );
                }
            }
        }
        case.clear();
    };
    for ev in HistoryReader::open(dir)? {
        let ev = ev?;
        match &ev.body {
            Body::Run(h) => cx = Some(CheckContext::of(h)),
            Body::Case(_) => {
                flush(&cx, &mut case);
                case.push(ev);
            }
            Body::RunEnd(_) => flush(&cx, &mut case),
            _ => case.push(ev),
        }
    }
    flush(&cx, &mut case);
    Ok(())
}
