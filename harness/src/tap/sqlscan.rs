//! A tokenizer for SQL text that finds what the tap's extraction needs, and no more: the
//! statements of a query string (split at top-level semicolons), each statement's first words
//! (SET, PREPARE, LISTEN, DECLARE ... CURSOR, ...), the calls of the advisory-lock functions
//! with their arguments, and where such a call is a column of a top-level SELECT list. It
//! skips string literals ('...', E'...' with backslashes), quoted identifiers, comments
//! (`--`, nested `/* */`) and dollar-quoted bodies.
//!
//! Not a parser. Its limits (docs/tap.md): a call inside a string or a dollar-quoted body (a
//! DO block, a function body) is not found, only flagged (`hidden`: the skipped text names an
//! advisory-lock function); a call through a function of the application's own is invisible;
//! `BEGIN ATOMIC ... END` bodies are split at their semicolons; a key is resolved only from an
//! integer literal or a bound parameter (with casts and parentheses around it), anything else
//! is kept as its text; the column of a call is known only when the call is a whole item of
//! the statement's top-level SELECT list.

use serde::{Deserialize, Serialize};

/// A token, with its byte span in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tok {
    pub kind: TokKind,
    pub start: usize,
    pub end: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokKind {
    /// An identifier or keyword, lower-cased (a quoted identifier keeps its case).
    Ident(String),
    Number(String),
    /// A string literal's contents.
    Str(String),
    /// `$1`
    Param(u32),
    /// Punctuation and operators: `(`, `)`, `,`, `.`, `;`, `::`, `-`, ...
    Punct(String),
}

/// The tokens of `sql`, and whether a skipped string, comment or dollar-quoted body mentions an
/// advisory-lock function.
pub fn tokenize(sql: &str) -> (Vec<Tok>, bool) {
    let b = sql.as_bytes();
    let mut toks = Vec::new();
    let mut hidden = false;
    let mut i = 0;
    let mentions = |s: &str| s.to_ascii_lowercase().contains("advisory");
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            hidden |= mentions(&sql[start..i]);
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            hidden |= mentions(&sql[start..i.min(b.len())]);
        } else if c == b'\'' || ((c == b'e' || c == b'E') && b.get(i + 1) == Some(&b'\'')) {
            let escapes = c != b'\'';
            if escapes {
                i += 1;
            }
            let (text, next) = string_at(sql, i, escapes);
            hidden |= mentions(&text);
            toks.push(Tok {
                kind: TokKind::Str(text),
                start,
                end: next,
            });
            i = next;
        } else if c == b'"' {
            let (text, next) = quoted_at(sql, i, b'"');
            toks.push(Tok {
                kind: TokKind::Ident(text),
                start,
                end: next,
            });
            i = next;
        } else if c == b'$' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let n = sql[start + 1..i].parse().unwrap_or(0);
            toks.push(Tok {
                kind: TokKind::Param(n),
                start,
                end: i,
            });
        } else if c == b'$' {
            // A dollar quote: $tag$ ... $tag$ (tag: an identifier or nothing).
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if b.get(j) == Some(&b'$') {
                let tag = &sql[i..=j];
                let body_start = j + 1;
                let end = sql[body_start..]
                    .find(tag)
                    .map(|p| body_start + p)
                    .unwrap_or(b.len());
                hidden |= mentions(&sql[body_start..end]);
                let next = (end + tag.len()).min(b.len());
                toks.push(Tok {
                    kind: TokKind::Str(sql[body_start..end].to_string()),
                    start,
                    end: next,
                });
                i = next;
            } else {
                i += 1;
                toks.push(Tok {
                    kind: TokKind::Punct("$".into()),
                    start,
                    end: i,
                });
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80)
            {
                i += 1;
            }
            toks.push(Tok {
                kind: TokKind::Ident(sql[start..i].to_ascii_lowercase()),
                start,
                end: i,
            });
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            toks.push(Tok {
                kind: TokKind::Number(sql[start..i].to_string()),
                start,
                end: i,
            });
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            i += 2;
            toks.push(Tok {
                kind: TokKind::Punct("::".into()),
                start,
                end: i,
            });
        } else {
            // One character (multi-byte UTF-8 handled above as identifier characters).
            i += 1;
            toks.push(Tok {
                kind: TokKind::Punct((c as char).to_string()),
                start,
                end: i,
            });
        }
    }
    (toks, hidden)
}

/// A '...' literal starting at `i` (the quote): its text and the index after it.
fn string_at(sql: &str, i: usize, escapes: bool) -> (String, usize) {
    let b = sql.as_bytes();
    let mut j = i + 1;
    let mut out = Vec::new();
    while j < b.len() {
        match b[j] {
            b'\\' if escapes && j + 1 < b.len() => {
                out.push(b[j + 1]);
                j += 2;
            }
            b'\'' if b.get(j + 1) == Some(&b'\'') => {
                out.push(b'\'');
                j += 2;
            }
            b'\'' => return (String::from_utf8_lossy(&out).into_owned(), j + 1),
            x => {
                out.push(x);
                j += 1;
            }
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), b.len())
}

fn quoted_at(sql: &str, i: usize, q: u8) -> (String, usize) {
    let b = sql.as_bytes();
    let mut j = i + 1;
    let mut out = Vec::new();
    while j < b.len() {
        if b[j] == q {
            if b.get(j + 1) == Some(&q) {
                out.push(q);
                j += 2;
                continue;
            }
            return (String::from_utf8_lossy(&out).into_owned(), j + 1);
        }
        out.push(b[j]);
        j += 1;
    }
    (String::from_utf8_lossy(&out).into_owned(), b.len())
}

/// An advisory-lock function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockFn {
    Lock,
    LockShared,
    TryLock,
    TryLockShared,
    XactLock,
    XactLockShared,
    TryXactLock,
    TryXactLockShared,
    Unlock,
    UnlockShared,
    UnlockAll,
}

impl LockFn {
    pub const ALL: [(LockFn, &'static str); 11] = [
        (LockFn::Lock, "pg_advisory_lock"),
        (LockFn::LockShared, "pg_advisory_lock_shared"),
        (LockFn::TryLock, "pg_try_advisory_lock"),
        (LockFn::TryLockShared, "pg_try_advisory_lock_shared"),
        (LockFn::XactLock, "pg_advisory_xact_lock"),
        (LockFn::XactLockShared, "pg_advisory_xact_lock_shared"),
        (LockFn::TryXactLock, "pg_try_advisory_xact_lock"),
        (
            LockFn::TryXactLockShared,
            "pg_try_advisory_xact_lock_shared",
        ),
        (LockFn::Unlock, "pg_advisory_unlock"),
        (LockFn::UnlockShared, "pg_advisory_unlock_shared"),
        (LockFn::UnlockAll, "pg_advisory_unlock_all"),
    ];

    pub fn from_name(name: &str) -> Option<LockFn> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(f, _)| *f == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }

    /// Returns a boolean (the try forms and the unlocks but unlock_all); the others return void.
    pub fn returns_bool(self) -> bool {
        matches!(
            self,
            LockFn::TryLock
                | LockFn::TryLockShared
                | LockFn::TryXactLock
                | LockFn::TryXactLockShared
                | LockFn::Unlock
                | LockFn::UnlockShared
        )
    }
}

/// An argument of a lock call, as far as the text says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arg {
    Int(i64),
    /// `$n`: a bound parameter of the extended protocol (or of a PREPAREd statement).
    Param(u32),
    /// Anything else, as written.
    Expr(String),
}

/// A call of an advisory-lock function in a statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub func: LockFn,
    pub args: Vec<Arg>,
    /// The call is this column of the statement's top-level SELECT list (0-based).
    pub column: Option<usize>,
    /// For each argument that is an expression: the column whose item is the same expression
    /// (its value in the reply is the key).
    pub arg_columns: Vec<Option<usize>>,
}

/// What a statement is, by its first words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    Set {
        name: String,
        value: String,
        local: bool,
    },
    Reset {
        name: String,
    },
    Prepare {
        name: String,
        body: String,
    },
    Deallocate {
        name: String,
    },
    Execute {
        name: String,
        args: Vec<Arg>,
    },
    Listen {
        channel: String,
    },
    Unlisten {
        channel: String,
    },
    Notify {
        channel: String,
        payload: String,
    },
    Declare {
        name: String,
        hold: bool,
    },
    Close {
        name: String,
    },
    Fetch {
        name: String,
    },
    Discard {
        what: String,
    },
    /// BEGIN, START TRANSACTION, COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, RELEASE, PREPARE
    /// TRANSACTION, COMMIT/ROLLBACK PREPARED.
    Transaction {
        verb: String,
    },
    /// Anything else: its first word.
    Opaque {
        verb: String,
    },
}

/// One statement of a query string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stmt {
    /// The statement's text as sent (trimmed).
    pub text: String,
    pub kind: Kind,
    pub calls: Vec<Call>,
    /// A skipped string, comment or dollar-quoted body names an advisory-lock function.
    pub hidden: bool,
}

/// The statements of a query string (empty ones dropped).
pub fn statements(sql: &str) -> Vec<Stmt> {
    let (toks, _) = tokenize(sql);
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut from = 0usize;
    let mut text_from = 0usize;
    for (i, t) in toks.iter().enumerate() {
        match &t.kind {
            TokKind::Punct(p) if p == "(" => depth += 1,
            TokKind::Punct(p) if p == ")" => depth -= 1,
            TokKind::Punct(p) if p == ";" && depth <= 0 => {
                push_stmt(sql, &toks[from..i], text_from, t.start, &mut out);
                from = i + 1;
                text_from = t.end;
                depth = 0;
            }
            _ => {}
        }
    }
    push_stmt(sql, &toks[from..], text_from, sql.len(), &mut out);
    out
}

fn push_stmt(sql: &str, toks: &[Tok], text_from: usize, text_to: usize, out: &mut Vec<Stmt>) {
    if toks.is_empty() {
        return;
    }
    let text = sql[text_from..text_to].trim();
    let (_, hidden) = tokenize(text);
    out.push(Stmt {
        text: text.to_string(),
        kind: kind(sql, toks),
        calls: calls(sql, toks),
        hidden,
    });
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t.map(|t| &t.kind) {
        Some(TokKind::Ident(s)) => Some(s),
        _ => None,
    }
}

fn is_punct(t: Option<&Tok>, p: &str) -> bool {
    matches!(t.map(|t| &t.kind), Some(TokKind::Punct(x)) if x == p)
}

/// A name (identifier, or a string for NOTIFY payloads), as text.
fn word(t: Option<&Tok>) -> String {
    match t.map(|t| &t.kind) {
        Some(TokKind::Ident(s)) | Some(TokKind::Str(s)) | Some(TokKind::Number(s)) => s.clone(),
        Some(TokKind::Punct(p)) => p.clone(),
        Some(TokKind::Param(n)) => format!("${n}"),
        None => String::new(),
    }
}

fn kind(sql: &str, toks: &[Tok]) -> Kind {
    let w = |i: usize| ident(toks.get(i)).unwrap_or("");
    let rest_text = |i: usize| {
        toks.get(i)
            .map(|t| sql[t.start..toks[toks.len() - 1].end].trim().to_string())
            .unwrap_or_default()
    };
    match w(0) {
        "set" => {
            let (local, at) = match w(1) {
                "local" => (true, 2),
                "session" if w(2) != "authorization" && w(2) != "characteristics" => (false, 2),
                _ => (false, 1),
            };
            // SET name TO value | SET name = value | SET TIME ZONE value | SET ROLE r ...
            let mut name = w(at).to_string();
            let mut v = at + 1;
            if name == "time" && w(at + 1) == "zone" {
                name = "timezone".into();
                v = at + 2;
            } else {
                while is_punct(toks.get(v), ".") {
                    name = format!("{name}.{}", word(toks.get(v + 1)));
                    v += 2;
                }
            }
            if w(v) == "to" || is_punct(toks.get(v), "=") {
                v += 1;
            }
            Kind::Set {
                name,
                value: rest_text(v),
                local,
            }
        }
        "reset" => Kind::Reset {
            name: rest_text(1).to_ascii_lowercase(),
        },
        "prepare" if w(1) == "transaction" => Kind::Transaction {
            verb: "prepare transaction".into(),
        },
        "prepare" => {
            let name = word(toks.get(1));
            let body = toks
                .iter()
                .position(|t| matches!(&t.kind, TokKind::Ident(s) if s == "as"))
                .map(|i| rest_text(i + 1))
                .unwrap_or_default();
            Kind::Prepare { name, body }
        }
        "deallocate" => Kind::Deallocate {
            name: word(toks.get(if w(1) == "prepare" { 2 } else { 1 })),
        },
        "execute" => {
            let args = if is_punct(toks.get(2), "(") {
                split_args(&toks[3..])
                    .iter()
                    .map(|a| arg_of(sql, a))
                    .collect()
            } else {
                vec![]
            };
            Kind::Execute {
                name: word(toks.get(1)),
                args,
            }
        }
        "listen" => Kind::Listen {
            channel: word(toks.get(1)),
        },
        "unlisten" => Kind::Unlisten {
            channel: word(toks.get(1)),
        },
        "notify" => Kind::Notify {
            channel: word(toks.get(1)),
            payload: if is_punct(toks.get(2), ",") {
                word(toks.get(3))
            } else {
                String::new()
            },
        },
        "declare" => Kind::Declare {
            name: word(toks.get(1)),
            hold: toks
                .windows(2)
                .any(|p| ident(Some(&p[0])) == Some("with") && ident(Some(&p[1])) == Some("hold")),
        },
        "close" => Kind::Close {
            name: word(toks.get(1)),
        },
        "fetch" | "move" => Kind::Fetch {
            name: word(toks.last()),
        },
        "discard" => Kind::Discard {
            what: w(1).to_string(),
        },
        "begin" | "commit" | "end" | "rollback" | "abort" | "savepoint" | "release" => {
            let prepared = w(1) == "prepared";
            Kind::Transaction {
                verb: if prepared {
                    format!("{} prepared", w(0))
                } else {
                    w(0).to_string()
                },
            }
        }
        "start" if w(1) == "transaction" => Kind::Transaction {
            verb: "start transaction".into(),
        },
        "" => Kind::Opaque {
            verb: word(toks.first()).to_ascii_lowercase(),
        },
        v => Kind::Opaque {
            verb: v.to_string(),
        },
    }
}

/// Split tokens after an opening parenthesis into top-level arguments, up to its closing one.
fn split_args(toks: &[Tok]) -> Vec<&[Tok]> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut from = 0;
    for (i, t) in toks.iter().enumerate() {
        match &t.kind {
            TokKind::Punct(p) if p == "(" || p == "[" => depth += 1,
            TokKind::Punct(p) if p == ")" || p == "]" => {
                if depth == 0 {
                    if i > from || !out.is_empty() {
                        out.push(&toks[from..i]);
                    }
                    return out;
                }
                depth -= 1;
            }
            TokKind::Punct(p) if p == "," && depth == 0 => {
                out.push(&toks[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// The index after the parenthesis that closes the one at `open`.
fn close_of(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().skip(open) {
        if is_punct(Some(t), "(") {
            depth += 1;
        } else if is_punct(Some(t), ")") {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    toks.len()
}

/// An argument: an integer or a parameter once casts, parentheses, CAST(.. AS ..) and a sign
/// are taken off; otherwise its text.
pub fn arg_of(sql: &str, toks: &[Tok]) -> Arg {
    let text = match (toks.first(), toks.last()) {
        (Some(a), Some(b)) => sql[a.start..b.end].to_string(),
        _ => String::new(),
    };
    let mut t = toks;
    loop {
        // x::type (and x::type(n))
        if let Some(p) = t.iter().rposition(|x| is_punct(Some(x), "::"))
            && p > 0
            && t[p + 1..].iter().all(|x| {
                matches!(x.kind, TokKind::Ident(_))
                    || is_punct(Some(x), "(")
                    || is_punct(Some(x), ")")
                    || matches!(x.kind, TokKind::Number(_))
            })
            && close_balanced(&t[..p])
        {
            t = &t[..p];
            continue;
        }
        if t.len() >= 2 && is_punct(t.first(), "(") && close_of(t, 0) == t.len() {
            t = &t[1..t.len() - 1];
            continue;
        }
        if ident(t.first()) == Some("cast")
            && is_punct(t.get(1), "(")
            && close_of(t, 1) == t.len()
            && let Some(as_at) = t.iter().rposition(|x| ident(Some(x)) == Some("as"))
        {
            t = &t[2..as_at];
            continue;
        }
        break;
    }
    let (neg, t) = match t.first() {
        Some(x) if is_punct(Some(x), "-") => (true, &t[1..]),
        Some(x) if is_punct(Some(x), "+") => (false, &t[1..]),
        _ => (false, t),
    };
    match t {
        [
            Tok {
                kind: TokKind::Number(n),
                ..
            },
        ] => match n.parse::<i64>() {
            Ok(v) => Arg::Int(if neg { -v } else { v }),
            Err(_) => Arg::Expr(text),
        },
        [
            Tok {
                kind: TokKind::Str(s),
                ..
            },
        ] if s.trim().parse::<i64>().is_ok() => {
            let v: i64 = s.trim().parse().unwrap_or(0);
            Arg::Int(if neg { -v } else { v })
        }
        [
            Tok {
                kind: TokKind::Param(n),
                ..
            },
        ] if !neg => Arg::Param(*n),
        _ => Arg::Expr(text),
    }
}

fn close_balanced(t: &[Tok]) -> bool {
    let mut d = 0i32;
    for x in t {
        if is_punct(Some(x), "(") {
            d += 1;
        } else if is_punct(Some(x), ")") {
            d -= 1;
        }
    }
    d == 0
}

/// The items of a top-level SELECT list: each item's token range (alias removed).
fn select_items(toks: &[Tok]) -> Vec<(usize, usize)> {
    if ident(toks.first()) != Some("select") {
        return vec![];
    }
    const ENDS: &[&str] = &[
        "from",
        "where",
        "group",
        "having",
        "order",
        "limit",
        "offset",
        "union",
        "intersect",
        "except",
        "into",
        "window",
        "for",
        "fetch",
    ];
    let mut i = 1;
    if matches!(ident(toks.get(1)), Some("distinct") | Some("all")) {
        i = 2;
    }
    let mut items = Vec::new();
    let mut depth = 0;
    let mut from = i;
    while i < toks.len() {
        let t = &toks[i];
        if is_punct(Some(t), "(") {
            depth += 1;
        } else if is_punct(Some(t), ")") {
            depth -= 1;
        } else if depth == 0
            && (is_punct(Some(t), ",") || ident(Some(t)).is_some_and(|w| ENDS.contains(&w)))
        {
            items.push((from, i));
            if !is_punct(Some(t), ",") {
                return strip_aliases(toks, items);
            }
            from = i + 1;
        }
        i += 1;
    }
    items.push((from, toks.len()));
    strip_aliases(toks, items)
}

fn strip_aliases(toks: &[Tok], items: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    items
        .into_iter()
        .map(|(a, mut b)| {
            if b >= a + 2 && ident(toks.get(b - 2)) == Some("as") {
                b -= 2;
            } else if b >= a + 2
                && matches!(toks[b - 1].kind, TokKind::Ident(_))
                && (is_punct(toks.get(b - 2), ")")
                    || matches!(
                        toks[b - 2].kind,
                        TokKind::Ident(_) | TokKind::Number(_) | TokKind::Param(_)
                    ))
            {
                b -= 1;
            }
            (a, b)
        })
        .collect()
}

fn same(a: &[Tok], b: &[Tok]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.kind == y.kind)
}

/// The advisory-lock calls among the tokens of one statement.
fn calls(sql: &str, toks: &[Tok]) -> Vec<Call> {
    let items = select_items(toks);
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let Some(func) = ident(Some(t)).and_then(LockFn::from_name) else {
            continue;
        };
        if !is_punct(toks.get(i + 1), "(") {
            continue;
        }
        // pg_catalog.pg_advisory_lock(...): the item starts at the schema.
        let start = if i >= 2 && is_punct(toks.get(i - 1), ".") {
            i - 2
        } else {
            i
        };
        let end = close_of(toks, i + 1);
        let arg_toks = split_args(&toks[i + 2..]);
        let args: Vec<Arg> = arg_toks.iter().map(|a| arg_of(sql, a)).collect();
        let column = items.iter().position(|(a, b)| {
            *a == start && (*b == end || (*b > end && is_punct(toks.get(end), "::")))
        });
        let arg_columns = arg_toks
            .iter()
            .zip(&args)
            .map(|(at, a)| match a {
                Arg::Expr(_) => items.iter().position(|(x, y)| same(&toks[*x..*y], at)),
                _ => None,
            })
            .collect();
        out.push(Call {
            func,
            args,
            column,
            arg_columns,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Stmt {
        let mut s = statements(sql);
        assert_eq!(s.len(), 1, "{sql}: {s:?}");
        s.remove(0)
    }

    #[test]
    fn finds_lock_calls_with_literal_parameter_and_unknown_keys() {
        let s = one("SELECT pg_try_advisory_lock(4242424242)");
        assert_eq!(
            s.calls,
            vec![Call {
                func: LockFn::TryLock,
                args: vec![Arg::Int(4242424242)],
                column: Some(0),
                arg_columns: vec![None]
            }]
        );
        let s = one("select pg_catalog.pg_advisory_unlock( (-7)::int8 ) as released, 1");
        assert_eq!(
            (s.calls[0].func, &s.calls[0].args, s.calls[0].column),
            (LockFn::Unlock, &vec![Arg::Int(-7)], Some(0))
        );
        let s = one("SELECT 1, pg_advisory_xact_lock($1::int4, CAST($2 AS integer))");
        assert_eq!(s.calls[0].args, vec![Arg::Param(1), Arg::Param(2)]);
        assert_eq!(s.calls[0].column, Some(1));
        // A key the text cannot give: kept as text, with the column that returns it.
        let s = one("SELECT hashtext('x') AS k, pg_try_advisory_lock(hashtext('x')) ok");
        assert_eq!(s.calls[0].args, vec![Arg::Expr("hashtext('x')".into())]);
        assert_eq!(
            (s.calls[0].column, s.calls[0].arg_columns.clone()),
            (Some(1), vec![Some(0)])
        );
        // Inside an expression: found, but no column.
        let s = one("SELECT CASE WHEN pg_try_advisory_lock(1) THEN 'a' END");
        assert_eq!((s.calls.len(), s.calls[0].column), (1, None));
        let s = one("SELECT pg_advisory_unlock_all()");
        assert_eq!(
            (s.calls[0].func, s.calls[0].args.len()),
            (LockFn::UnlockAll, 0)
        );
        let s = one("SELECT pg_advisory_lock(1, 2) FROM t WHERE pg_try_advisory_lock(3)");
        assert_eq!(
            s.calls.iter().map(|c| c.column).collect::<Vec<_>>(),
            vec![Some(0), None]
        );
    }

    #[test]
    fn skips_strings_comments_quoted_identifiers_and_dollar_quotes() {
        let sql = "SELECT 'pg_advisory_lock(1)', \"pg_advisory_lock\", E'it\\'s pg_try_advisory_lock(2)' -- pg_advisory_lock(3)\n\
                   /* pg_advisory_lock(4) /* nested */ */ , $f$ pg_advisory_lock(5) $f$, $$x$$; SELECT pg_advisory_lock(6)";
        let s = statements(sql);
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s[0].calls.is_empty(), "{:?}", s[0].calls);
        assert!(s[0].hidden);
        assert_eq!(s[1].calls[0].args, vec![Arg::Int(6)]);
        assert!(!s[1].hidden);
        // A semicolon in a string or a dollar quote does not split.
        let s = statements("SELECT ';'; DO $$ BEGIN PERFORM pg_advisory_lock(1); END $$;;");
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].kind, Kind::Opaque { verb: "do".into() });
        assert!(s[1].calls.is_empty() && s[1].hidden);
    }

    #[test]
    fn names_session_state_statements() {
        let k = |sql: &str| one(sql).kind;
        assert_eq!(
            k("SET lock_timeout TO '5s'"),
            Kind::Set {
                name: "lock_timeout".into(),
                value: "'5s'".into(),
                local: false
            }
        );
        assert_eq!(
            k("set local statement_timeout = 0"),
            Kind::Set {
                name: "statement_timeout".into(),
                value: "0".into(),
                local: true
            }
        );
        assert_eq!(
            k("SET SESSION my.x = 'y'"),
            Kind::Set {
                name: "my.x".into(),
                value: "'y'".into(),
                local: false
            }
        );
        assert_eq!(
            k("SET TIME ZONE 'UTC'"),
            Kind::Set {
                name: "timezone".into(),
                value: "'UTC'".into(),
                local: false
            }
        );
        assert_eq!(k("RESET ALL"), Kind::Reset { name: "all".into() });
        assert_eq!(
            k("PREPARE p (bigint) AS SELECT pg_advisory_lock($1)"),
            Kind::Prepare {
                name: "p".into(),
                body: "SELECT pg_advisory_lock($1)".into()
            }
        );
        assert_eq!(
            k("EXECUTE p(42)"),
            Kind::Execute {
                name: "p".into(),
                args: vec![Arg::Int(42)]
            }
        );
        assert_eq!(
            k("DEALLOCATE PREPARE p"),
            Kind::Deallocate { name: "p".into() }
        );
        assert_eq!(
            k("LISTEN \"Chan\""),
            Kind::Listen {
                channel: "Chan".into()
            }
        );
        assert_eq!(
            k("UNLISTEN *"),
            Kind::Unlisten {
                channel: "*".into()
            }
        );
        assert_eq!(
            k("NOTIFY c, 'hi'"),
            Kind::Notify {
                channel: "c".into(),
                payload: "hi".into()
            }
        );
        assert_eq!(
            k("DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
            Kind::Declare {
                name: "c".into(),
                hold: true
            }
        );
        assert_eq!(k("FETCH NEXT FROM c"), Kind::Fetch { name: "c".into() });
        assert_eq!(k("CLOSE ALL"), Kind::Close { name: "all".into() });
        assert_eq!(k("DISCARD ALL"), Kind::Discard { what: "all".into() });
        assert_eq!(
            k("begin isolation level serializable"),
            Kind::Transaction {
                verb: "begin".into()
            }
        );
        assert_eq!(
            k("START TRANSACTION"),
            Kind::Transaction {
                verb: "start transaction".into()
            }
        );
        assert_eq!(
            k("COMMIT PREPARED 'x'"),
            Kind::Transaction {
                verb: "commit prepared".into()
            }
        );
        assert_eq!(
            k("PREPARE TRANSACTION 'x'"),
            Kind::Transaction {
                verb: "prepare transaction".into()
            }
        );
        assert_eq!(
            k("/* c */ INSERT INTO t VALUES (1)"),
            Kind::Opaque {
                verb: "insert".into()
            }
        );
    }
}
