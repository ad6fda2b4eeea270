//! `import`'s tests.

use super::*;
use crate::pooler::pgpool::PgpoolSpec;

const REALISTIC: &str = "\
# pgpool.conf of the orders service (production)
backend_clustering_mode = 'streaming_replication'
listen_addresses = '*'
port = 9999
socket_dir = '/var/run/postgresql'
pcp_port = 9898

backend_hostname0 = '10.0.3.17'
backend_port0 = 5432
backend_weight0 = 1
backend_flag0 = 'ALLOW_TO_FAILOVER'

enable_pool_hba = on
pool_passwd = 'pool_passwd'
sr_check_user = 'pgpool'
sr_check_password = 'hunter2'
health_check_period = 10

num_init_children = 64          # more children than the default
max_pool = 2
child_life_time = '5min'
child_life_time = '10 min'
connection_life_time = 30
reset_query_list = 'ABORT; DISCARD ALL'
load_balance_mode = off
write_function_list = 'nextval,setval'
log_per_node_statement = on
memory_cache_enabled = off
failover_on_backend_shutdown = on
frobnicate = 3
";

fn origin() -> Origin<'static> {
    Origin {
        ini: Path::new("/etc/pgpool2/pgpool.conf"),
        when: "2026-12-03 18:00:00+00",
        name: "orders",
        version: None,
        select: Default::default(),
    }
}

fn run(src: &str) -> Result<Imported> {
    convert(src, Path::new("pgpool.conf"), &origin())
}

fn topo(src: &str) -> (PgpoolSpec, Topology, String) {
    let y = run(src).unwrap_or_else(|e| panic!("{e}")).yaml;
    let t = Topology::parse(&y, Path::new("orders.yaml"), &crate::catalog())
        .unwrap_or_else(|e| panic!("{e}\n---\n{y}"));
    let p = t
        .pooler
        .as_ref()
        .unwrap()
        .config::<PgpoolSpec>()
        .expect("a pgpool section")
        .clone();
    (p, t, y)
}

/// The error's `(line, column, message, as shown)`.
fn err(src: &str) -> (usize, usize, String, String) {
    let e = run(src).err().expect("an error");
    let ce = e.downcast_ref::<ConfError>().expect("a ConfError");
    (ce.line, ce.column, ce.message.clone(), e.to_string())
}

#[test]
fn a_realistic_conf_round_trips() {
    // A time with a unit; the later line is the one that counts.
    let (p, t, y) = topo(REALISTIC);
    assert_eq!(t.name, "orders");
    assert_eq!(p.version, "4.3.5");
    assert_eq!(
        (
            p.num_init_children,
            p.max_pool,
            p.child_life_time,
            p.connection_life_time
        ),
        (64, 2, 600, 30)
    );
    assert_eq!(p.reset_query_list, "ABORT; DISCARD ALL");
    assert!(t.postgres.settings.is_empty(), "64 + 6 fit the default 100");
    assert!(t.expect.is_empty());
    for line in [
        "# child_life_time is set at line 21 and again at line 22: the later counts",
        "# dropped listen_addresses = *: pgchaos listens on loopback only",
        "# dropped port = 9999: ",
        "# dropped backend_hostname0 (value not shown): pgchaos points pgpool-II at the PostgreSQL it starts",
        "# dropped sr_check_password (value not shown): ",
        "# dropped health_check_period = 10: ",
        "# ignored write_function_list = nextval,setval: it decides which node",
        "# dropped failover_on_backend_shutdown = on: pgchaos runs pgpool-II with it off",
        "# ignored frobnicate: not a pgpool-II 4.3.5 setting",
    ] {
        assert!(y.contains(line), "missing {line:?} in\n{y}");
    }
    assert!(!y.contains("hunter2"), "a password leaked into\n{y}");
    assert!(!y.contains("10.0.3.17"), "a host leaked into\n{y}");
    assert!(
        !y.contains("load_balance_mode = off (line"),
        "off is not noted: {y}"
    );
    assert!(y.starts_with(
        "# Imported by `pgchaos import` from /etc/pgpool2/pgpool.conf at 2026-12-03 18:00:00+00."
    ));
    let s = run(REALISTIC).unwrap().summary;
    assert!(s.starts_with("num_init_children 64, max_pool 2"), "{s}");
}

#[test]
fn what_the_file_leaves_out_is_pgpool_defaults_said_in_comments() {
    let (p, t, y) = topo("backend_clustering_mode = 'streaming_replication'\n");
    assert_eq!(
        (p.num_init_children, p.max_pool, p.child_life_time),
        (32, 4, 300)
    );
    assert_eq!(p.reset_query_list, "ABORT; DISCARD ALL");
    assert!(y.contains("# load_balance_mode is not set (pgpool-II's default: on): with one backend there is nothing to balance"), "{y}");
    assert!(y.contains("# num_init_children is not set: pgpool-II's default, 32"));
    // The children's timer is the model's idle-server timeout.
    use crate::vocab::timeout::Effect;
    assert_eq!(t.timeouts().get(&Effect::RetireIdle), Some(&300_000));
    // A big pool raises max_connections; `=` is optional, as in pgpool-II.
    let (_, t, _) = topo("num_init_children 200\nmax_pool=1\nreset_query_list = 'ABORT'\n");
    assert_eq!(
        t.postgres
            .settings
            .get("max_connections")
            .map(String::as_str),
        Some("206")
    );
    // raw mode with one backend is run as streaming replication, said.
    let (_, _, y) = topo("backend_clustering_mode = raw\nnum_init_children = 2\n");
    assert!(
        y.contains("# backend_clustering_mode = raw (line 1)"),
        "{y}"
    );
    assert!(y.contains("# 2 children for 4 clients"), "{y}");
    // A standby with load balancing and empty lists: the topology's standby, balanced.
    let (p, t, y) =
        topo("backend_hostname0 = 'a'\nbackend_hostname1 = 'b'\nwrite_function_list = ''\n");
    assert!(p.load_balance_mode && t.postgres.standby, "{y}");
    assert!(
        y.contains("balanced over the primary and the standby"),
        "{y}"
    );
    // A standby without load balancing is noted, not refused.
    let (_, _, y) =
        topo("backend_hostname0 = 'a'\nbackend_hostname1 = 'b'\nload_balance_mode = off\n");
    assert!(y.contains("the file names a standby"), "{y}");
}

#[test]
fn recognises_a_pgpool_conf_and_nothing_else() {
    assert!(recognises(REALISTIC));
    assert!(recognises("  num_init_children 8\n"));
    assert!(!recognises("#num_init_children = 32\n"));
    assert!(!recognises("[pgbouncer]\npool_mode = session\n"));
    assert!(!recognises(
        "max_connections = 100\nshared_buffers = '1GB'\n"
    ));
    assert!(!crate::pooler::pgbouncer::import::recognises(REALISTIC));
}

#[test]
fn errors_name_line_and_column() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("num_init_children = many\n", 1, 21, "must be an integer"),
        (
            "\n  max_pool = 0\n",
            2,
            14,
            "outside what pgchaos accepts (1 to 100)",
        ),
        ("connection_cache = off\n", 1, 20, "not modelled"),
        ("connection_cache = perhaps\n", 1, 20, "must be a boolean"),
        (
            "backend_clustering_mode = 'native_replication'\n",
            1,
            27,
            "not modelled",
        ),
        (
            "backend_clustering_mode = 'mirror'\n",
            1,
            27,
            "unknown backend_clustering_mode",
        ),
        ("client_idle_limit = 30\n", 1, 21, "not modelled"),
        ("child_max_connections = 100\n", 1, 25, "not modelled"),
        ("reserved_connections = 1\n", 1, 24, "not modelled"),
        ("process_management_mode = dynamic\n", 1, 27, "not modelled"),
        ("replication_mode = on\n", 1, 20, "not modelled"),
        (
            "num_init_childen = 8\n",
            1,
            1,
            "unknown pgpool-II setting `num_init_childen`",
        ),
        ("Max_Pool = 2\n", 1, 1, "names are lower case"),
        (
            "include = 'other.conf'\n",
            1,
            1,
            "`include` is not followed",
        ),
        ("= 3\n", 1, 1, "expected `key = value`"),
        ("max_pool =\n", 1, 11, "has no value"),
        ("reset_query_list = 'ABORT\n", 1, 20, "not closed"),
        (
            "reset_query_list = ABORT; DISCARD ALL\n",
            1,
            20,
            "neither a number",
        ),
        ("max_pool = 2 3\n", 1, 14, "unexpected `3`"),
        ("max_pool = 5.5.5\n", 1, 12, "neither a number"),
        (
            "child_life_time = '5 fortnights'\n",
            1,
            19,
            "must be a time",
        ),
        (
            "connection_life_time = '2d'\n",
            1,
            24,
            "172800 s, more than",
        ),
        ("client_idle_limit = '1min'\n", 1, 21, "not modelled"),
        (
            "backend_hostname0 = 'a'\nbackend_port1 = 5433\nwrite_function_list = 'nextval,setval'\n",
            3,
            23,
            "not modelled",
        ),
        (
            "load_balance_mode = on\nbackend_hostname0 = 'a'\nbackend_hostname1 = 'b'\nread_only_function_list = 'pg_backend_pid'\n",
            4,
            27,
            "not modelled",
        ),
        (
            "backend_hostname0 = 'a'\nbackend_hostname1 = 'b'\nbackend_hostname2 = 'c'\n",
            3,
            1,
            "3 backends",
        ),
    ];
    for (src, line, col, msg) in cases {
        let (l, c, m, shown) = err(src);
        assert_eq!((l, c), (*line, *col), "{src:?}: {shown}");
        assert!(m.contains(msg), "{src:?}: {m:?} lacks {msg:?}");
        assert!(
            shown.starts_with(&format!("pgpool.conf:{line}:{col}: ")),
            "{shown}"
        );
        assert!(
            shown.contains(&format!("\n{line} | ")),
            "no snippet: {shown}"
        );
        assert!(shown.contains('^'), "no caret: {shown}");
    }
    let (_, _, _, shown) = err("num_init_childen = 8\n");
    assert!(
        shown.contains("did you mean `num_init_children`?"),
        "{shown}"
    );
    // A release the topology does not know is refused before the file is read.
    let e = convert(
        "max_pool = 1\n",
        Path::new("pgpool.conf"),
        &Origin {
            version: Some("3.0"),
            ..origin()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().starts_with("--pooler-version \"3.0\""), "{e}");
}

#[test]
fn values_are_read_as_pgpool_reads_them() {
    assert_eq!(parse_bool("of"), Some(false));
    assert_eq!(parse_bool("o"), None);
    assert_eq!(parse_bool("TRUE"), Some(true));
    assert_eq!(parse_bool("1"), Some(true));
    assert!(is_number("-0x1F") && is_number("1.5e3") && is_number("5min"));
    assert!(!is_number("5.5.5") && !is_number("min"));
    // Confirmed on pgpool-II 4.3.5 (docs/pgpool.md §16): a bare `7min` is 420 s.
    let (p, _, _) = topo("child_life_time = 7min\nconnection_life_time = '2 min'\n");
    assert_eq!((p.child_life_time, p.connection_life_time), (420, 120));
    assert!(is_known("backend_hostname12") && is_known("wd_port0") && !is_known("frob"));
    let f = ConfFile {
        src: "reset_query_list = 'it\\'s # not a comment'   # a comment\n",
        path: Path::new("x"),
    };
    let e = parse_conf(&f).unwrap();
    assert_eq!(e[0].value, "it\\'s # not a comment");
    assert_eq!((e[0].value_col, e[0].value_width), (20, 23));
}
