//! The frame splitter: the PostgreSQL protocol after the startup packet is a sequence of
//! frames, each a type byte, a 4-byte big-endian length (counting itself, not the type byte)
//! and the body. The splitter is fed the bytes of one direction as they were read, in chunks
//! of any size, and hands back each frame once its last byte has arrived. It never holds more
//! than `cap` bytes of one body: a longer frame (a huge DataRow, a COPY chunk, a long SQL
//! text) is reported with its type and length only, so memory stays bounded whatever passes.
//!
//! It only reads: the relay forwards the chunk itself, untouched. A length below 4 is not a
//! frame; the splitter then stops (`broken`) and the relay goes on forwarding bytes unparsed.

/// One complete frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub tag: u8,
    /// The length field: the body's size plus 4.
    pub len: u32,
    /// The body, when it is at most the splitter's cap.
    pub body: Option<Vec<u8>>,
}

impl Frame {
    /// The whole frame as it was on the wire (type byte, length, body), when the body was kept.
    pub fn wire(&self) -> Option<Vec<u8>> {
        let body = self.body.as_ref()?;
        let mut out = Vec::with_capacity(5 + body.len());
        out.push(self.tag);
        out.extend_from_slice(&self.len.to_be_bytes());
        out.extend_from_slice(body);
        Some(out)
    }
}

/// The frame being read.
#[derive(Debug)]
struct Partial {
    tag: u8,
    len: u32,
    /// Body bytes still to come.
    remaining: usize,
    /// The body so far, while it is within the cap.
    body: Option<Vec<u8>>,
}

/// Splits one direction's byte stream into frames (see the module doc).
#[derive(Debug)]
pub struct Splitter {
    cap: usize,
    head: [u8; 5],
    have: usize,
    cur: Option<Partial>,
    broken: Option<String>,
    /// Bytes fed so far.
    pub fed: u64,
}

impl Splitter {
    /// A splitter that keeps bodies of at most `cap` bytes.
    pub fn new(cap: usize) -> Splitter {
        Splitter {
            cap,
            head: [0; 5],
            have: 0,
            cur: None,
            broken: None,
            fed: 0,
        }
    }

    /// Why the splitter stopped (a length below 4), if it did.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Feed the next bytes; complete frames are appended to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Frame>) {
        self.fed += chunk.len() as u64;
        while !chunk.is_empty() && self.broken.is_none() {
            match self.cur.as_mut() {
                None => {
                    let take = (5 - self.have).min(chunk.len());
                    self.head[self.have..self.have + take].copy_from_slice(&chunk[..take]);
                    self.have += take;
                    chunk = &chunk[take..];
                    if self.have < 5 {
                        return;
                    }
                    self.have = 0;
                    let tag = self.head[0];
                    let len = u32::from_be_bytes([
                        self.head[1],
                        self.head[2],
                        self.head[3],
                        self.head[4],
                    ]);
                    if len < 4 {
                        self.broken = Some(format!(
                            "frame of type {:?} with length {len} (below 4): not the PostgreSQL protocol",
                            tag as char
                        ));
                        return;
                    }
                    let size = (len - 4) as usize;
                    self.cur = Some(Partial {
                        tag,
                        len,
                        remaining: size,
                        body: (size <= self.cap).then(|| Vec::with_capacity(size)),
                    });
                }
                Some(p) => {
                    let take = p.remaining.min(chunk.len());
                    if let Some(b) = p.body.as_mut() {
                        b.extend_from_slice(&chunk[..take]);
                    }
                    p.remaining -= take;
                    chunk = &chunk[take..];
                }
            }
            if self.cur.as_ref().is_some_and(|p| p.remaining == 0) {
                let p = self.cur.take().expect("checked");
                out.push(Frame {
                    tag: p.tag,
                    len: p.len,
                    body: p.body,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    /// Feeding a stream in every split of two chunks, and byte by byte, gives the same frames.
    #[test]
    fn frames_come_out_whole_however_the_bytes_are_cut() {
        let mut stream = frame(b'Q', b"SELECT 1\0");
        stream.extend(frame(b'S', b""));
        stream.extend(frame(b'D', &[0, 1, 0, 0, 0, 1, b't']));
        let expect = vec![
            Frame {
                tag: b'Q',
                len: 13,
                body: Some(b"SELECT 1\0".to_vec()),
            },
            Frame {
                tag: b'S',
                len: 4,
                body: Some(vec![]),
            },
            Frame {
                tag: b'D',
                len: 11,
                body: Some(vec![0, 1, 0, 0, 0, 1, b't']),
            },
        ];
        for cut in 0..=stream.len() {
            let mut s = Splitter::new(1024);
            let mut out = vec![];
            s.feed(&stream[..cut], &mut out);
            s.feed(&stream[cut..], &mut out);
            assert_eq!(out, expect, "cut at {cut}");
        }
        let mut s = Splitter::new(1024);
        let mut out = vec![];
        for b in &stream {
            s.feed(std::slice::from_ref(b), &mut out);
        }
        assert_eq!(out, expect);
        assert_eq!(s.fed, stream.len() as u64);
        for f in &out {
            assert!(
                stream
                    .windows(f.wire().unwrap().len())
                    .any(|w| w == f.wire().unwrap())
            );
        }
    }

    /// A body over the cap is reported by type and length, and the frames after it still
    /// come out: nothing of the big body is kept.
    #[test]
    fn a_body_over_the_cap_keeps_its_size_only() {
        let big = vec![7u8; 10_000];
        let mut stream = frame(b'd', &big);
        stream.extend(frame(b'c', b""));
        let mut s = Splitter::new(100);
        let mut out = vec![];
        for c in stream.chunks(333) {
            s.feed(c, &mut out);
        }
        assert_eq!(
            out,
            vec![
                Frame {
                    tag: b'd',
                    len: 10_004,
                    body: None
                },
                Frame {
                    tag: b'c',
                    len: 4,
                    body: Some(vec![])
                }
            ]
        );
    }

    /// A length below 4 stops the splitter with a reason, and nothing after it is parsed.
    #[test]
    fn a_length_below_four_breaks_the_stream() {
        let mut stream = vec![b'Q', 0, 0, 0, 2];
        stream.extend(frame(b'S', b""));
        let mut s = Splitter::new(100);
        let mut out = vec![];
        s.feed(&stream, &mut out);
        assert!(out.is_empty());
        assert!(s.broken().unwrap().contains("length 2"), "{:?}", s.broken());
    }
}

#[cfg(test)]
mod recorded {
    use super::*;

    /// psql 18's bytes to and from PostgreSQL 18.6, as a byte logger of its own recorded them
    /// (tests/fixtures/tap/psql-direct.*; the SASL messages' bodies blanked): the frames the
    /// script in docs/tap.md sends, whatever the chunk size, and nothing lost.
    #[test]
    fn real_psql_bytes_split_into_the_scripts_frames() {
        let dir = format!("{}/tests/fixtures/tap", env!("CARGO_MANIFEST_DIR"));
        let fe = std::fs::read(format!("{dir}/psql-direct.fe")).unwrap();
        let be = std::fs::read(format!("{dir}/psql-direct.be")).unwrap();
        // The SSLRequest (8 bytes) and the startup packet (untyped) come first.
        let startup = u32::from_be_bytes(fe[8..12].try_into().unwrap()) as usize;
        let fe = &fe[8 + startup..];
        // The server's one-byte answer to the SSLRequest comes first.
        let be = &be[1..];
        for chunk in [1, 7, 64, 4096] {
            for (stream, expect) in [
                // SASL x2, CREATE, COPY FROM + 2 rows + done, COPY TO, SELECT, \bind (Parse
                // Bind Describe Execute Sync), BEGIN, 1/0, ROLLBACK, unlock_all, Terminate.
                (fe, "ppQQdcQQPBDESQQQQX"),
                // The same session's replies, as a frame walk in Python read them when the
                // fixture was made (they are what the protocol documents for each request).
                (be, "RRRRSSSSSSSSSSSSSSSKZCZGCZHddcCZTDCZ12TDCZCZEZCZTDCZ"),
            ] {
                let mut s = Splitter::new(1 << 20);
                let mut out = vec![];
                for c in stream.chunks(chunk) {
                    s.feed(c, &mut out);
                }
                let tags: String = out.iter().map(|f| f.tag as char).collect();
                assert_eq!(tags, expect, "chunks of {chunk}");
                let again: Vec<u8> = out.iter().flat_map(|f| f.wire().unwrap()).collect();
                assert_eq!(
                    again, stream,
                    "chunks of {chunk}: every byte in a frame, in order"
                );
            }
        }
    }
}
