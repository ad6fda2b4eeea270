//! PgBouncer's admin views in the pooler's common words: `SHOW SERVERS`, `SHOW CLIENTS` and
//! `SHOW POOLS` (simple query protocol only, on the admin console), the rows of the harness's
//! database kept with the columns below, each turned into a [`ServerRow`], [`ClientRow`] or
//! [`PoolRow`] with the original row beside it.
//!
//! States (PgBouncer 1.24/1.25 `admin.c`, `state_names`): a server is `active` (linked to a
//! client), `idle` or `used` (in the pool; `used` waits for its check query), `tested`
//! (running the reset or check query), `new`/`login` (logging in), `active_cancel` /
//! `being_canceled` (a cancel in flight); a client is `active`, `waiting` (for a server), or
//! in a cancel or login state.

use crate::pooler::view::{
    ClientRow, ClientState, Look, PoolRow, PoolerRow, RawRows, ServerRow, ServerState,
};
use anyhow::{Context, Result};
use tokio_postgres::{Client, SimpleQueryMessage};

/// [`server`], [`client`] and [`pool`]: PgBouncer's rows in the common words.
pub const ROWS: RawRows = RawRows {
    server,
    client,
    pool,
};

pub const SHOW_SERVERS: &str = "SHOW SERVERS";
pub const SHOW_CLIENTS: &str = "SHOW CLIENTS";
pub const SHOW_POOLS: &str = "SHOW POOLS";

/// Columns of `SHOW SERVERS` / `SHOW CLIENTS` kept in an observation (the rest are constant
/// for the harness's one user and database, or noise).
pub const CONNECTION_COLUMNS: &[&str] = &[
    "type",
    "state",
    "local_port",
    // A client's own port: for `pgchaos run`, the tap lane's upstream port.
    "port",
    "connect_time",
    "request_time",
    "wait",
    "wait_us",
    "ptr",
    "link",
    "remote_pid",
    "close_needed",
];

/// Columns of `SHOW POOLS` kept in an observation.
pub const POOL_COLUMNS: &[&str] = &[
    "cl_active",
    "cl_waiting",
    "sv_active",
    "sv_idle",
    "sv_used",
    "sv_tested",
    "sv_login",
    "maxwait",
    "maxwait_us",
    "pool_mode",
];

fn get<'a>(r: &'a PoolerRow, col: &str) -> &'a str {
    r.get(col).map(String::as_str).unwrap_or("")
}

fn num(r: &PoolerRow, col: &str) -> u64 {
    get(r, col).parse().unwrap_or(0)
}

/// A `SHOW SERVERS` row.
pub fn server(raw: PoolerRow) -> ServerRow {
    let state = match get(&raw, "state") {
        "active" => ServerState::Linked,
        "idle" | "used" => ServerState::Idle,
        "tested" | "new" | "login" => ServerState::Busy,
        _ => ServerState::Other,
    };
    ServerRow {
        id: get(&raw, "ptr").to_string(),
        // 0 while logging in (no BackendKeyData yet).
        pid: get(&raw, "remote_pid")
            .parse::<i32>()
            .ok()
            .filter(|p| *p > 0),
        state,
        client: Some(get(&raw, "link"))
            .filter(|l| !l.is_empty())
            .map(str::to_string),
        closing: get(&raw, "close_needed") == "1",
        replica: 0,
        raw,
    }
}

/// A `SHOW CLIENTS` row.
pub fn client(raw: PoolerRow) -> ClientRow {
    let state = match get(&raw, "state") {
        "active" => ClientState::Active,
        "waiting" => ClientState::Waiting,
        _ => ClientState::Other,
    };
    ClientRow {
        id: get(&raw, "ptr").to_string(),
        state,
        server: Some(get(&raw, "link"))
            .filter(|l| !l.is_empty())
            .map(str::to_string),
        waiting_us: (state == ClientState::Waiting)
            .then(|| num(&raw, "wait") * 1_000_000 + num(&raw, "wait_us")),
        replica: 0,
        raw,
    }
}

/// A `SHOW POOLS` row.
pub fn pool(raw: PoolerRow) -> PoolRow {
    PoolRow {
        clients_waiting: num(&raw, "cl_waiting") as u32,
        servers_linked: num(&raw, "sv_active") as u32,
        servers_idle: (num(&raw, "sv_idle") + num(&raw, "sv_used")) as u32,
        longest_wait_us: num(&raw, "maxwait") * 1_000_000 + num(&raw, "maxwait_us"),
        replica: 0,
        raw,
    }
}

/// One `SHOW` command's rows of database `db` (and of `user`, when given), the kept columns
/// only.
async fn show(admin: &Client, cmd: &str, db: &str, user: Option<&str>) -> Result<Vec<PoolerRow>> {
    let msgs = crate::pooler::admin_query(admin, cmd)
        .await
        .with_context(|| format!("PgBouncer admin {cmd}"))?;
    let keep: &[&str] = if cmd == SHOW_POOLS {
        POOL_COLUMNS
    } else {
        CONNECTION_COLUMNS
    };
    let mut out = vec![];
    for m in msgs {
        if let SimpleQueryMessage::Row(row) = m {
            let mut map = PoolerRow::new();
            let mut database = None;
            let mut row_user = None;
            for (i, col) in row.columns().iter().enumerate() {
                let value = row.get(i).unwrap_or("");
                if col.name() == "database" {
                    database = Some(value.to_string());
                }
                if col.name() == "user" {
                    row_user = Some(value.to_string());
                }
                if keep.contains(&col.name()) {
                    map.insert(col.name().to_string(), value.to_string());
                }
            }
            if database.as_deref() == Some(db)
                && user.is_none_or(|u| row_user.as_deref() == Some(u))
            {
                out.push(map);
            }
        }
    }
    Ok(out)
}

/// The views, pipelined on the console connection (one round trip's wait for all).
pub async fn look(admin: &Client, db: &str, user: Option<&str>, pools: bool) -> Result<Look> {
    let (s, c, p) = tokio::join!(
        show(admin, SHOW_SERVERS, db, user),
        show(admin, SHOW_CLIENTS, db, user),
        async {
            if pools {
                show(admin, SHOW_POOLS, db, user).await
            } else {
                Ok(vec![])
            }
        }
    );
    Ok(Look {
        servers: s?.into_iter().map(server).collect(),
        clients: c?.into_iter().map(client).collect(),
        pools: p?.into_iter().map(pool).collect(),
    })
}

/// Every row of one `SHOW` command, all columns.
async fn show_all(admin: &Client, cmd: &str) -> Result<Vec<PoolerRow>> {
    let msgs = crate::pooler::admin_query(admin, cmd)
        .await
        .with_context(|| format!("PgBouncer admin {cmd}"))?;
    let mut out = vec![];
    for m in msgs {
        if let SimpleQueryMessage::Row(row) = m {
            out.push(
                row.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, col)| (col.name().to_string(), row.get(i).unwrap_or("").to_string()))
                    .collect(),
            );
        }
    }
    Ok(out)
}

/// What `SHOW CLIENTS` and `SHOW POOLS` show that a run tagged `tag` did not open: clients of
/// `role` (any database) with another `application_name`, and other users' clients and
/// busy pools on `db`.
pub async fn strangers(
    admin: &Client,
    db: &str,
    role: &str,
    tag: &str,
) -> Result<crate::pooler::Strangers> {
    let (clients, pools) = tokio::join!(show_all(admin, SHOW_CLIENTS), show_all(admin, SHOW_POOLS));
    Ok(judge_strangers(&clients?, &pools?, db, role, tag))
}

/// [`strangers`] on rows already read.
pub fn judge_strangers(
    clients: &[PoolerRow],
    pools: &[PoolerRow],
    db: &str,
    role: &str,
    tag: &str,
) -> crate::pooler::Strangers {
    let mut out = crate::pooler::Strangers::default();
    for c in clients {
        let line = format!(
            "client of user {} on database {} from {}:{} application_name {:?} (SHOW CLIENTS)",
            get(c, "user"),
            get(c, "database"),
            get(c, "addr"),
            get(c, "port"),
            get(c, "application_name")
        );
        if get(c, "user") == role {
            if get(c, "application_name") != tag {
                out.same_role.push(line);
            }
        } else if get(c, "database") == db {
            out.other_users.push(line);
        }
    }
    for p in pools {
        // Clients, or servers linked to one: an idle server is no one's session.
        let busy: u64 = ["cl_active", "cl_waiting", "sv_active"]
            .iter()
            .map(|k| num(p, k))
            .sum();
        if get(p, "database") == db && get(p, "user") != role && busy > 0 {
            out.other_users.push(format!(
                "pool of user {} on database {}: cl_active {} cl_waiting {} sv_active {} (SHOW POOLS)",
                get(p, "user"),
                db,
                get(p, "cl_active"),
                get(p, "cl_waiting"),
                get(p, "sv_active")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cols: &[(&str, &str)]) -> PoolerRow {
        cols.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn states_and_links_in_common_words() {
        let cases = [
            ("active", ServerState::Linked),
            ("idle", ServerState::Idle),
            ("used", ServerState::Idle),
            ("tested", ServerState::Busy),
            ("login", ServerState::Busy),
            ("new", ServerState::Busy),
            ("being_canceled", ServerState::Other),
        ];
        for (s, want) in cases {
            assert_eq!(server(row(&[("state", s)])).state, want, "{s}");
        }
        let s = server(row(&[
            ("ptr", "0xa"),
            ("link", "0xb"),
            ("remote_pid", "0"),
            ("close_needed", "1"),
        ]));
        assert_eq!(
            (s.id.as_str(), s.client.as_deref(), s.pid, s.closing),
            ("0xa", Some("0xb"), None, true),
            "pid 0: still logging in"
        );
        let c = client(row(&[
            ("state", "waiting"),
            ("wait", "2"),
            ("wait_us", "15"),
            ("link", ""),
        ]));
        assert_eq!(
            (c.state, c.server, c.waiting_us),
            (ClientState::Waiting, None, Some(2_000_015))
        );
        assert_eq!(client(row(&[("state", "active")])).waiting_us, None);
    }

    #[test]
    fn strangers_are_other_tags_of_the_role_and_other_users_of_the_database() {
        let tag = "pgchaos-0123456789ab";
        let c = |user: &str, db: &str, app: &str| {
            row(&[("user", user), ("database", db), ("application_name", app)])
        };
        let clients = [
            c("pgchaos_client", "app", tag),
            c("pgchaos_client", "app", "psql"),
            c("pgchaos_client", "other", ""),
            c("shop", "app", "shop-web"),
            c("shop", "elsewhere", "shop-web"),
        ];
        let pools = [
            row(&[
                ("database", "app"),
                ("user", "billing"),
                ("cl_waiting", "2"),
            ]),
            row(&[("database", "app"), ("user", "idle_user"), ("sv_idle", "0")]),
        ];
        let s = judge_strangers(&clients, &pools, "app", "pgchaos_client", tag);
        assert_eq!(s.same_role.len(), 2, "{s:?}");
        assert!(s.same_role[0].contains("\"psql\""), "{s:?}");
        assert_eq!(s.other_users.len(), 2, "{s:?}");
        assert!(
            s.other_users[0].contains("user shop on database app"),
            "{s:?}"
        );
        assert!(s.other_users[1].contains("pool of user billing"), "{s:?}");
    }
}
