//! HTTP/2 at the frame level, for the boundary tests: requests shaped as an attacker would
//! shape them (trailers carrying edge headers, a message split anywhere, two messages,
//! trailers before the message is complete), over TLS with any certificate or none.
//!
//! Two clients: [`H2Client`] drives the `h2` crate (well-formed HTTP/2 in any order of
//! HEADERS, DATA and trailers), and [`send_raw_frames`] writes frames byte by byte for what
//! `h2` refuses to produce (pseudo-headers in trailers), reading back only frame types.

use crate::pki::SvidFiles;
use anyhow::{Context as _, bail};
use bytes::Bytes;
use lock_config::Reason;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Patience for one exchange; every await below is bounded by it.
const EXCHANGE: Duration = Duration::from_secs(15);

/// A TLS connection to `addr` (ALPN h2) verifying `server_name` against `bundle`,
/// presenting `svid` if given. Fails if the server refuses the handshake.
pub async fn tls_connect(
    addr: SocketAddr,
    svid: Option<&SvidFiles>,
    bundle: &Path,
    server_name: &str,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(bundle)? {
        roots.add(ca?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match svid {
        Some(s) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(&s.cert)?.collect::<Result<_, _>>()?;
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(&s.key)?)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::time::timeout(EXCHANGE, TcpStream::connect(addr)).await??;
    let name = ServerName::try_from(server_name.to_owned())?;
    // With TLS 1.3 a server judges the client certificate after the client considers the
    // handshake done, so a refusal arrives as an alert on the first read, not here.
    Ok(tokio::time::timeout(
        EXCHANGE,
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await??)
}

/// One part of a request after its HEADERS.
#[derive(Debug, Clone)]
pub enum Part {
    /// A DATA frame (not ending the stream).
    Data(Vec<u8>),
    /// Trailers (a HEADERS frame ending the stream).
    Trailers(Vec<(String, String)>),
    /// An empty DATA frame ending the stream.
    End,
}

/// What came back: the gRPC status and reason (from headers or trailers), the first
/// response message's bytes, or the stream reset.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub grpc_status: Option<i32>,
    pub reason: Option<Reason>,
    pub message: Option<Vec<u8>>,
    /// `grpc-message` and `grpc-status-details-bin` as sent: what "identical replies"
    /// compares.
    pub grpc_message: Option<String>,
    pub details: Option<String>,
    /// The stream or connection failed (RST_STREAM, GOAWAY, closed).
    pub failed: Option<String>,
}

impl Reply {
    /// The response message decoded as `M` (an OK reply's body).
    pub fn decode<M: prost::Message + Default>(&self) -> anyhow::Result<M> {
        let m = self.message.as_deref().context("no response message")?;
        Ok(M::decode(m)?)
    }

    pub fn ok(&self) -> bool {
        self.grpc_status == Some(0)
    }
}

/// An HTTP/2 connection driven by the `h2` crate.
pub struct H2Client {
    send: h2::client::SendRequest<Bytes>,
}

impl H2Client {
    /// Connects (TLS as [`tls_connect`]) and completes the HTTP/2 handshake.
    pub async fn connect(
        addr: SocketAddr,
        svid: Option<&SvidFiles>,
        bundle: &Path,
        server_name: &str,
    ) -> anyhow::Result<Self> {
        let tls = tls_connect(addr, svid, bundle, server_name).await?;
        let (send, conn) = tokio::time::timeout(EXCHANGE, h2::client::handshake(tls)).await??;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self { send })
    }

    /// `/lock.v1.Lock/<method>` with extra `headers`, then `parts` in order.
    pub async fn call(
        &mut self,
        method: &str,
        headers: &[(&str, &str)],
        parts: &[Part],
    ) -> anyhow::Result<Reply> {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        self.call_bytes(method, &headers, parts).await
    }

    /// As [`H2Client::call`], with header values as raw octets (HTTP/2 allows any but NUL,
    /// CR and LF: not necessarily UTF-8).
    pub async fn call_bytes(
        &mut self,
        method: &str,
        headers: &[(&str, &[u8])],
        parts: &[Part],
    ) -> anyhow::Result<Reply> {
        tokio::time::timeout(EXCHANGE, self.exchange(method, headers, parts))
            .await
            .context("exchange timed out")?
    }

    async fn exchange(
        &mut self,
        method: &str,
        headers: &[(&str, &[u8])],
        parts: &[Part],
    ) -> anyhow::Result<Reply> {
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!("https://localhost/lock.v1.Lock/{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in headers {
            req = req.header(*k, http::HeaderValue::from_bytes(v)?);
        }
        let req = req.body(())?;
        let mut send = self.send.clone().ready().await?;
        let (response, mut stream) = send.send_request(req, parts.is_empty())?;
        for part in parts {
            let sent = match part {
                Part::Data(d) => stream.send_data(Bytes::from(d.clone()), false),
                Part::End => stream.send_data(Bytes::new(), true),
                Part::Trailers(t) => {
                    let mut map = http::HeaderMap::new();
                    for (k, v) in t {
                        map.append(
                            http::HeaderName::from_bytes(k.as_bytes())?,
                            http::HeaderValue::from_str(v)?,
                        );
                    }
                    stream.send_trailers(map)
                }
            };
            if let Err(e) = sent {
                // The server may have answered (and ended the stream) already.
                return Ok(read_reply(response).await.unwrap_or(Reply {
                    failed: Some(e.to_string()),
                    ..Reply::default()
                }));
            }
            // Separate writes, so a split message can reach the server in separate reads.
            tokio::task::yield_now().await;
        }
        read_reply(response).await
    }
}

async fn read_reply(response: h2::client::ResponseFuture) -> anyhow::Result<Reply> {
    let mut reply = Reply::default();
    let response = match response.await {
        Ok(r) => r,
        Err(e) => {
            reply.failed = Some(e.to_string());
            return Ok(reply);
        }
    };
    status_from(response.headers(), &mut reply);
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(c) => {
                let _ = body.flow_control().release_capacity(c.len());
                bytes.extend_from_slice(&c);
            }
            Err(e) => {
                reply.failed = Some(e.to_string());
                return Ok(reply);
            }
        }
    }
    match body.trailers().await {
        Ok(Some(t)) => status_from(&t, &mut reply),
        Ok(None) => {}
        Err(e) => reply.failed = Some(e.to_string()),
    }
    if bytes.len() >= 5 {
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        reply.message = bytes.get(5..5 + len).map(<[u8]>::to_vec);
    }
    Ok(reply)
}

fn status_from(h: &http::HeaderMap, reply: &mut Reply) {
    if let Some(s) = h.get("grpc-status").and_then(|v| v.to_str().ok()) {
        reply.grpc_status = s.parse().ok();
    }
    if let Some(m) = h.get("grpc-message").and_then(|v| v.to_str().ok()) {
        reply.grpc_message = Some(m.to_owned());
    }
    if let Some(d) = h
        .get("grpc-status-details-bin")
        .and_then(|v| v.to_str().ok())
    {
        reply.details = Some(d.to_owned());
        use base64::Engine as _;
        let d = d.trim_end_matches('=');
        if let Ok(bytes) = base64::engine::general_purpose::STANDARD_NO_PAD.decode(d) {
            reply.reason = lock_config::status_details::decode_error_info(&bytes)
                .and_then(|i| Reason::from_wire(&i.reason));
        }
    }
}

/// A gRPC length-prefixed message (uncompressed).
pub fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    out
}

/// Frame types the server sent on the raw connection (`send_raw_frames`).
#[derive(Debug, Default)]
pub struct RawOutcome {
    /// (frame type, flags, stream id) in arrival order, SETTINGS and PING left out.
    pub frames: Vec<(u8, u8, u32)>,
}

impl RawOutcome {
    /// The stream was reset or the connection was torn down.
    pub fn refused(&self) -> bool {
        self.frames
            .iter()
            .any(|(t, _, s)| (*t == FRAME_RST_STREAM && *s == 1) || *t == FRAME_GOAWAY)
    }
}

const FRAME_DATA: u8 = 0;
const FRAME_HEADERS: u8 = 1;
const FRAME_RST_STREAM: u8 = 3;
const FRAME_SETTINGS: u8 = 4;
const FRAME_PING: u8 = 6;
const FRAME_GOAWAY: u8 = 7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// HPACK "literal header field without indexing, new name", no Huffman: enough to say
/// anything, including what a conforming encoder would never send.
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) -> anyhow::Result<()> {
    out.push(0x00);
    for s in [name, value] {
        if s.len() >= 127 {
            bail!("hpack_literal: strings under 127 bytes only");
        }
        out.push(u8::try_from(s.len())?);
        out.extend_from_slice(s.as_bytes());
    }
    Ok(())
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap_or(0).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// One request on stream 1, written frame by frame: HEADERS (`headers`, after the usual
/// pseudo-headers for `method`), one DATA frame with `body`, then a trailers HEADERS frame
/// with `trailers` verbatim (pseudo-headers included). Reads frames until the stream ends,
/// is reset, or the connection closes.
pub async fn send_raw_frames(
    addr: SocketAddr,
    svid: &SvidFiles,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    trailers: &[(&str, &str)],
) -> anyhow::Result<RawOutcome> {
    let mut tls = tls_connect(addr, Some(svid), &svid.ca, "localhost").await?;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, FRAME_SETTINGS, 0, 0, &[]);
    let mut block = Vec::new();
    let path = format!("/lock.v1.Lock/{method}");
    for (k, v) in [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", path.as_str()),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .iter()
    .chain(headers)
    {
        hpack_literal(&mut block, k, v)?;
    }
    frame(&mut out, FRAME_HEADERS, END_HEADERS, 1, &block);
    frame(&mut out, FRAME_DATA, 0, 1, body);
    let mut block = Vec::new();
    for (k, v) in trailers {
        hpack_literal(&mut block, k, v)?;
    }
    frame(&mut out, FRAME_HEADERS, END_HEADERS | END_STREAM, 1, &block);
    tls.write_all(&out).await?;
    tls.flush().await?;

    let mut outcome = RawOutcome::default();
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + EXCHANGE;
    loop {
        // Parse whole frames out of what has arrived.
        while buf.len() >= 9 {
            let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
            if kind == FRAME_SETTINGS && flags & 0x1 == 0 {
                // Acknowledge the server's settings, as a client must.
                let mut ack = Vec::new();
                frame(&mut ack, FRAME_SETTINGS, 0x1, 0, &[]);
                tls.write_all(&ack).await?;
            } else if kind != FRAME_SETTINGS && kind != FRAME_PING {
                outcome.frames.push((kind, flags, stream));
                let ended = (stream == 1
                    && ((kind == FRAME_HEADERS || kind == FRAME_DATA) && flags & END_STREAM != 0))
                    || kind == FRAME_RST_STREAM
                    || kind == FRAME_GOAWAY;
                if ended {
                    return Ok(outcome);
                }
            }
            buf.drain(..9 + len);
        }
        let mut chunk = [0u8; 4096];
        let n = match tokio::time::timeout_at(deadline, tls.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                outcome.frames.push((FRAME_GOAWAY, 0, 0)); // closed: as good as GOAWAY
                return Ok(outcome);
            }
            Ok(Ok(n)) => n,
            Err(_) => bail!("raw exchange timed out; frames so far {:?}", outcome.frames),
        };
        buf.extend_from_slice(&chunk[..n]);
    }
}
