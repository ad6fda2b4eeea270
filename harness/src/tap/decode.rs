//! Frames into the record's messages, read with `pgwire`'s codecs (its `messages` module:
//! frontend and backend messages of protocol 3.0 and 3.2, the extended protocol, COPY,
//! NegotiateProtocolVersion). `postgres-protocol`, already in the tree through
//! tokio-postgres, reads backend messages only, and 0.6 knows neither CopyBothResponse nor
//! NegotiateProtocolVersion nor 3.2's longer cancel keys: docs/tap.md, "The codec".
//!
//! A frame is decoded from a copy (the relay forwards the original). What the codec cannot
//! read becomes `Other` with the reason; the relay does not care. Secrets are dropped here
//! (see `record`).

use super::record::{Be, Fe, Field, Notice, PasswordKind, Value};
use bytes::BytesMut;
use pgwire::messages::{
    DecodeContext, Message, PgWireBackendMessage as B, PgWireFrontendMessage as F, ProtocolVersion,
    startup,
};

/// What decoding needs to know of its lane.
#[derive(Debug)]
pub struct LaneCodec {
    /// The protocol version in force (the client's, or the one the server negotiated).
    pub minor: u16,
    /// The last authentication request's code: what a password message answers.
    pub last_auth: Option<i32>,
}

impl LaneCodec {
    pub fn new(minor: u16) -> LaneCodec {
        LaneCodec {
            minor,
            last_auth: None,
        }
    }

    fn ctx(&self) -> DecodeContext {
        let mut ctx = DecodeContext::new(if self.minor >= 2 {
            ProtocolVersion::PROTOCOL3_2
        } else {
            ProtocolVersion::PROTOCOL3_0
        });
        ctx.awaiting_frontend_ssl = false;
        ctx.awaiting_frontend_startup = false;
        ctx
    }
}

fn wire(tag: u8, len: u32, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::with_capacity(5 + body.len());
    b.extend_from_slice(&[tag]);
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(body);
    b
}

fn opt(s: Option<String>) -> String {
    s.unwrap_or_default()
}

/// A frontend frame (after the startup packet). `body`: `None` when over the cap.
pub fn frontend(tag: u8, len: u32, body: Option<&[u8]>, codec: &LaneCodec) -> Fe {
    if tag == b'p' {
        // Never decoded: its kind from the request it answers, the mechanism name only.
        let kind = match codec.last_auth {
            Some(3) | Some(5) => PasswordKind::Password,
            Some(10) => PasswordKind::SaslInitial,
            Some(11) => PasswordKind::Sasl,
            Some(7) | Some(8) | Some(9) => PasswordKind::Gss,
            _ => PasswordKind::Unknown,
        };
        let mechanism = (kind == PasswordKind::SaslInitial)
            .then(|| body.and_then(|b| b.split(|c| *c == 0).next()))
            .flatten()
            .map(|m| String::from_utf8_lossy(m).into_owned());
        return Fe::Password { kind, mechanism };
    }
    if tag == b'F' {
        return Fe::FunctionCall;
    }
    let Some(body) = body else {
        return match tag {
            b'd' => Fe::CopyData,
            _ => Fe::Other {
                tag: tag as char,
                why: Some(format!("{len} bytes: over the tap's cap, not decoded")),
            },
        };
    };
    let mut buf = wire(tag, len, body);
    let msg = match F::decode(&mut buf, &codec.ctx()) {
        Ok(Some(m)) => m,
        Ok(None) => return other(tag, "incomplete".into()),
        Err(e) => return other(tag, e.to_string()),
    };
    match msg {
        F::Query(q) => Fe::Query { sql: q.query },
        F::Parse(p) => Fe::Parse {
            name: opt(p.name),
            sql: p.query,
            types: p.type_oids,
        },
        F::Bind(b) => Fe::Bind {
            portal: opt(b.portal_name),
            statement: opt(b.statement_name),
            formats: b.parameter_format_codes,
            params: b
                .parameters
                .iter()
                .map(|p| p.as_ref().map(|v| Value::from_bytes(v)))
                .collect(),
            result_formats: b.result_column_format_codes,
        },
        F::Describe(d) => Fe::Describe {
            what: d.target_type as char,
            name: opt(d.name),
        },
        F::Execute(e) => Fe::Execute {
            portal: opt(e.name),
            max_rows: e.max_rows,
        },
        F::Close(c) => Fe::Close {
            what: c.target_type as char,
            name: opt(c.name),
        },
        F::Sync(_) => Fe::Sync,
        F::Flush(_) => Fe::Flush,
        F::Terminate(_) => Fe::Terminate,
        F::CopyData(_) => Fe::CopyData,
        F::CopyDone(_) => Fe::CopyDone,
        F::CopyFail(f) => Fe::CopyFail { message: f.message },
        other_msg => other(tag, format!("unexpected here: {other_msg:?}")),
    }
}

fn other(tag: u8, why: String) -> Fe {
    Fe::Other {
        tag: tag as char,
        why: Some(why),
    }
}

fn be_other(tag: u8, why: String) -> Be {
    Be::Other {
        tag: tag as char,
        why: Some(why),
    }
}

fn notice(fields: &[(u8, String)]) -> Notice {
    let get = |c: u8| fields.iter().find(|(k, _)| *k == c).map(|(_, v)| v.clone());
    Notice {
        severity: get(b'V').or_else(|| get(b'S')).unwrap_or_default(),
        code: get(b'C').unwrap_or_default(),
        message: get(b'M').unwrap_or_default(),
        detail: get(b'D'),
    }
}

/// A DataRow's columns (each cut to the record's value cap), from its body.
pub fn data_row_values(body: &[u8]) -> Option<Vec<Option<Value>>> {
    let count = u16::from_be_bytes([*body.first()?, *body.get(1)?]) as usize;
    let mut out = Vec::with_capacity(count);
    let mut at = 2usize;
    for _ in 0..count {
        let l = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if l < 0 {
            out.push(None);
            continue;
        }
        let v = body.get(at..at + l as usize)?;
        at += l as usize;
        out.push(Some(Value::from_bytes(v)));
    }
    Some(out)
}

/// A backend frame. `values`: keep a DataRow's values (the first rows of a reply).
/// Updates the codec (authentication code, negotiated version).
pub fn backend(tag: u8, len: u32, body: Option<&[u8]>, values: bool, codec: &mut LaneCodec) -> Be {
    let Some(body) = body else {
        return match tag {
            b'D' => Be::DataRow {
                columns: 0,
                values: None,
            },
            b'd' => Be::CopyData,
            _ => be_other(tag, format!("{len} bytes: over the tap's cap, not decoded")),
        };
    };
    match tag {
        // Read here rather than copied whole into the codec's type.
        b'D' => {
            let columns = body
                .get(..2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .unwrap_or(0);
            return Be::DataRow {
                columns,
                values: if values { data_row_values(body) } else { None },
            };
        }
        b'd' => return Be::CopyData,
        b'V' => return Be::FunctionCallResponse,
        _ => {}
    }
    let mut buf = wire(tag, len, body);
    let msg = match B::decode(&mut buf, &codec.ctx()) {
        Ok(Some(m)) => m,
        Ok(None) => return be_other(tag, "incomplete".into()),
        Err(e) => return be_other(tag, e.to_string()),
    };
    match msg {
        B::Authentication(a) => {
            use startup::Authentication as A;
            let (code, mechanisms) = match a {
                A::Ok => (0, vec![]),
                A::KerberosV5 => (2, vec![]),
                A::CleartextPassword => (3, vec![]),
                A::MD5Password(_) => (5, vec![]),
                A::SASL(m) => (10, m),
                A::SASLContinue(_) => (11, vec![]),
                A::SASLFinal(_) => (12, vec![]),
                #[allow(unreachable_patterns)]
                _ => (
                    i32::from_be_bytes(
                        body.get(..4)
                            .and_then(|b| b.try_into().ok())
                            .unwrap_or([0; 4]),
                    ),
                    vec![],
                ),
            };
            codec.last_auth = Some(code);
            Be::Authentication { code, mechanisms }
        }
        B::ParameterStatus(p) => Be::ParameterStatus {
            name: p.name,
            value: p.value,
        },
        B::BackendKeyData(k) => Be::BackendKeyData {
            pid: k.pid,
            key_len: body.len().saturating_sub(4),
        },
        B::NegotiateProtocolVersion(v) => {
            // PostgreSQL 18 sends the full version number, older servers the minor only.
            let minor = (v.newest_minor_protocol & 0xffff) as u16;
            codec.minor = codec.minor.min(minor);
            Be::NegotiateProtocolVersion {
                newest_minor: v.newest_minor_protocol,
                unsupported: v.unsupported_options,
            }
        }
        B::RowDescription(r) => Be::RowDescription {
            fields: r
                .fields
                .into_iter()
                .map(|f| Field {
                    name: f.name,
                    type_oid: f.type_id,
                    format: f.format_code,
                })
                .collect(),
        },
        B::CommandComplete(c) => Be::CommandComplete { tag: c.tag },
        B::EmptyQueryResponse(_) => Be::EmptyQueryResponse,
        B::ErrorResponse(e) => Be::ErrorResponse(notice(&e.fields)),
        B::NoticeResponse(e) => Be::NoticeResponse(notice(&e.fields)),
        B::NotificationResponse(n) => Be::NotificationResponse {
            pid: n.pid,
            channel: n.channel,
            payload: n.payload,
        },
        B::ReadyForQuery(r) => Be::ReadyForQuery {
            status: body
                .first()
                .map(|b| *b as char)
                .unwrap_or_else(|| format!("{:?}", r.status).chars().next().unwrap_or('?')),
        },
        B::ParseComplete(_) => Be::ParseComplete,
        B::BindComplete(_) => Be::BindComplete,
        B::CloseComplete(_) => Be::CloseComplete,
        B::NoData(_) => Be::NoData,
        B::PortalSuspended(_) => Be::PortalSuspended,
        B::ParameterDescription(p) => Be::ParameterDescription { types: p.types },
        B::CopyInResponse(c) => Be::CopyInResponse {
            format: c.format,
            columns: c.columns,
        },
        B::CopyOutResponse(c) => Be::CopyOutResponse {
            format: c.format,
            columns: c.columns,
        },
        B::CopyBothResponse(c) => Be::CopyBothResponse {
            format: c.format,
            columns: c.columns,
        },
        B::CopyDone(_) => Be::CopyDone,
        other_msg => be_other(tag, format!("unexpected here: {other_msg:?}")),
    }
}

/// A startup packet's body (after its length): the protocol version and parameters.
pub fn startup(body: &[u8]) -> Option<Fe> {
    let mut buf = BytesMut::with_capacity(body.len() + 4);
    buf.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    buf.extend_from_slice(body);
    let mut ctx = DecodeContext::new(ProtocolVersion::PROTOCOL3_0);
    ctx.awaiting_frontend_ssl = false;
    match startup::Startup::decode(&mut buf, &ctx) {
        Ok(Some(s)) => Some(Fe::Startup {
            major: s.protocol_number_major,
            minor: s.protocol_number_minor,
            params: s.parameters,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(frame: &[u8]) -> (u8, u32, &[u8]) {
        (
            frame[0],
            u32::from_be_bytes(frame[1..5].try_into().unwrap()),
            &frame[5..],
        )
    }

    /// Frames as tokio-postgres's encoder writes them (rust-postgres is the reference here,
    /// not this crate's reading of the protocol).
    #[test]
    fn frontend_frames_as_another_encoder_wrote_them() {
        use postgres_protocol::message::frontend;
        let mut buf = BytesMut::new();
        frontend::parse("s1", "SELECT pg_advisory_lock($1)", [20u32], &mut buf).unwrap();
        let codec = LaneCodec::new(0);
        let (t, l, b) = body_of(&buf);
        assert_eq!(
            frontend(t, l, Some(b), &codec),
            Fe::Parse {
                name: "s1".into(),
                sql: "SELECT pg_advisory_lock($1)".into(),
                types: vec![20]
            }
        );
        let mut buf = BytesMut::new();
        frontend::bind(
            "",
            "s1",
            [1i16],
            [42i64],
            |v, out| {
                out.extend_from_slice(&v.to_be_bytes());
                Ok(postgres_protocol::IsNull::No)
            },
            [1i16],
            &mut buf,
        )
        .map_err(|_| "bind")
        .unwrap();
        let (t, l, b) = body_of(&buf);
        match frontend(t, l, Some(b), &codec) {
            Fe::Bind {
                statement,
                formats,
                params,
                result_formats,
                ..
            } => {
                assert_eq!(
                    (statement.as_str(), formats, result_formats),
                    ("s1", vec![1], vec![1])
                );
                assert_eq!(
                    params[0].as_ref().unwrap().bytes(),
                    42i64.to_be_bytes().to_vec()
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// A password message keeps nothing of the password.
    #[test]
    fn passwords_are_redacted() {
        let mut codec = LaneCodec::new(0);
        codec.last_auth = Some(3);
        let fe = frontend(b'p', 13, Some(b"hunter22\0"), &codec);
        assert_eq!(
            fe,
            Fe::Password {
                kind: PasswordKind::Password,
                mechanism: None
            }
        );
        assert!(!serde_json::to_string(&fe).unwrap().contains("hunter"));
        codec.last_auth = Some(10);
        let mut body = b"SCRAM-SHA-256\0".to_vec();
        body.extend_from_slice(&[0, 0, 0, 5]);
        body.extend_from_slice(b"n,,n=");
        let fe = frontend(b'p', body.len() as u32 + 4, Some(&body), &codec);
        assert_eq!(
            fe,
            Fe::Password {
                kind: PasswordKind::SaslInitial,
                mechanism: Some("SCRAM-SHA-256".into())
            }
        );
    }

    #[test]
    fn data_rows_and_ready_for_query() {
        // Two columns: 't' and NULL.
        let body = [0u8, 2, 0, 0, 0, 1, b't', 0xff, 0xff, 0xff, 0xff];
        let mut codec = LaneCodec::new(0);
        assert_eq!(
            backend(b'D', 15, Some(&body), true, &mut codec),
            Be::DataRow {
                columns: 2,
                values: Some(vec![Some(Value::from_bytes(b"t")), None])
            }
        );
        assert_eq!(
            backend(b'D', 15, Some(&body), false, &mut codec),
            Be::DataRow {
                columns: 2,
                values: None
            }
        );
        assert_eq!(
            backend(b'Z', 5, Some(b"T"), true, &mut codec),
            Be::ReadyForQuery { status: 'T' }
        );
        // NegotiateProtocolVersion from PostgreSQL 18 (full number 3.0) lowers the lane's.
        let mut codec = LaneCodec::new(2);
        let mut v = 196608i32.to_be_bytes().to_vec();
        v.extend_from_slice(&0i32.to_be_bytes());
        assert!(matches!(
            backend(b'v', 12, Some(&v), true, &mut codec),
            Be::NegotiateProtocolVersion { .. }
        ));
        assert_eq!(codec.minor, 0);
    }
}
