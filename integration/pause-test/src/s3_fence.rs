//! The reference fence for S3-compatible stores (ADR-16: "for S3-compatible stores including
//! MinIO, version metadata checked with If-Match"), and three deliberately broken fences the
//! pause-test kit must catch.
//!
//! The fenced record is one object whose bytes are `fence <token>\n<value>`, with the token
//! again in its metadata (`x-amz-meta-fence`) so a HEAD reads it. A write under token `t`:
//!
//! 1. HEAD the object: its ETag `E` and its token `f`.
//! 2. `f >= t`: refused (a newer holder has written, or this token already has).
//! 3. PUT `fence t\n<value>` with `If-Match: E`: the store applies it only while the object
//!    is still the version read; `412 Precondition Failed` means another write came between,
//!    and the write starts again at 1 (whose comparison then refuses it).
//!
//! Why a read-compare-write race cannot accept a lower token, even from a writer frozen
//! between 2 and 3 (exactly where the kit freezes it): the store accepts a PUT only if the
//! object is the version its writer read, and that version's token was below the writer's.
//! So every accepted write replaced a lower token with a higher one, in the order the store
//! applied them: the tokens stored only rise. A frozen writer that read `E` cannot land
//! once anyone else has written, because the object is no longer `E`.
//!
//! That needs `E` to change with every write, and an ETag is a digest of the object's bytes
//! (MD5 for a single PUT), not of its metadata. With the token in metadata only, a newer
//! holder writing the bytes the object already had keeps `E`, and the frozen writer's
//! If-Match still matches ([`S3Fence::EtagOfValue`], which the kit catches by preparing
//! the record with the bytes the newer holder will write). With the token as the bytes'
//! first line, two writes under different tokens never have the same bytes.
//!
//! Multipart uploads and SSE-KMS make the ETag something other than the bytes' MD5; it
//! still changes when the bytes do, which is all the fence relies on. The record is small:
//! one PUT, never multipart.

use anyhow::{Context as _, bail};
use rusty_s3::actions::{CreateBucket, GetObject, HeadObject, PutObject, S3Action as _};
use rusty_s3::{Bucket, Credentials, UrlStyle};
use std::future::Future;
use std::time::Duration;

/// How long a signed request stays valid (each is sent at once).
const SIGNED_FOR: Duration = Duration::from_secs(60);
/// The metadata header that carries the token (S3 lower-cases metadata names).
const FENCE_META: &str = "x-amz-meta-fence";
/// Conditional PUTs that lost to another write before this one gives up: each loss means
/// the record changed, and the next read refuses a stale token, so more than two is a
/// writer competing with a stream of newer holders.
const MAX_TRIES: usize = 5;

/// How an S3 resource applies the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Fence {
    /// The reference: compare, then a PUT conditional on the version compared, the token
    /// in the bytes.
    Reference,
    /// Broken: no If-Match and no comparison; the token is only recorded in metadata.
    Unconditional,
    /// Broken: the token compared by the client, then an unconditional PUT. A holder frozen
    /// between the two writes after a newer holder.
    ClientCompare,
    /// Broken: If-Match, but the token only in metadata: a newer write of the same bytes
    /// keeps the ETag, and a frozen writer's If-Match still matches.
    EtagOfValue,
}

/// One bucket of fenced records on an S3-compatible endpoint.
pub struct S3Store {
    http: reqwest::Client,
    bucket: Bucket,
    credentials: Credentials,
}

/// A record as read: its value, token and ETag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub etag: String,
    pub token: i64,
}

fn object(id: i64) -> String {
    format!("fenced-resource/{id}")
}

/// The bytes a fence writes for `value` under `token`.
fn body(fence: S3Fence, token: i64, value: &str) -> String {
    match fence {
        S3Fence::EtagOfValue => value.to_owned(),
        _ => format!("fence {token}\n{value}"),
    }
}

/// The value in a record's bytes (with or without the token line).
fn value_of(bytes: &str) -> &str {
    match bytes.strip_prefix("fence ") {
        Some(rest) => rest.split_once('\n').map_or("", |(_, v)| v),
        None => bytes,
    }
}

impl S3Store {
    /// `endpoint` (e.g. `http://127.0.0.1:9000`), path-style, credentials from
    /// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, region from `AWS_REGION` (us-east-1).
    pub fn new(endpoint: &str, bucket: &str) -> anyhow::Result<Self> {
        let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
        let bucket = Bucket::new(
            endpoint.parse().context("the S3 endpoint is not a URL")?,
            UrlStyle::Path,
            bucket.to_owned(),
            region,
        )
        .context("bucket")?;
        Ok(S3Store {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            bucket,
            credentials: Credentials::new(env("AWS_ACCESS_KEY_ID")?, env("AWS_SECRET_ACCESS_KEY")?),
        })
    }

    /// Creates the bucket; one that exists already is fine.
    pub async fn create_bucket(&self) -> anyhow::Result<()> {
        let url = CreateBucket::new(&self.bucket, &self.credentials).sign(SIGNED_FOR);
        let resp = self
            .http
            .put(url)
            .header("content-length", "0")
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if status.is_success() || text.contains("BucketAlreadyOwnedByYou") {
            return Ok(());
        }
        bail!("create bucket: {status}: {text}")
    }

    /// Creates or resets record `id`: `initial` under token 0.
    pub async fn prepare(&self, fence: S3Fence, id: i64, initial: &str) -> anyhow::Result<()> {
        match self
            .put(&object(id), &body(fence, 0, initial), 0, None)
            .await?
        {
            Put::Stored => Ok(()),
            Put::Precondition => bail!("prepare: unconditional PUT refused"),
        }
    }

    /// The record's version (ETag and token) from a HEAD.
    pub async fn head(&self, id: i64) -> anyhow::Result<Version> {
        let name = object(id);
        let url = HeadObject::new(&self.bucket, Some(&self.credentials), &name).sign(SIGNED_FOR);
        let resp = self.http.head(url).send().await?;
        if !resp.status().is_success() {
            bail!("HEAD {name}: {}", resp.status());
        }
        let header = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let etag = header("etag").context("no ETag")?;
        let token = header(FENCE_META)
            .context("no fence metadata")?
            .parse()
            .context("fence metadata is not a number")?;
        Ok(Version { etag, token })
    }

    /// The record's value and token.
    pub async fn read(&self, id: i64) -> anyhow::Result<(String, i64)> {
        let name = object(id);
        let url = GetObject::new(&self.bucket, Some(&self.credentials), &name).sign(SIGNED_FOR);
        let resp = self.http.get(url).send().await?;
        if !resp.status().is_success() {
            bail!("GET {name}: {}", resp.status());
        }
        let token = resp
            .headers()
            .get(FENCE_META)
            .and_then(|v| v.to_str().ok())
            .context("no fence metadata")?
            .parse()?;
        let bytes = resp.text().await?;
        Ok((value_of(&bytes).to_owned(), token))
    }

    /// A fenced write of `value` under `token`. `checked` runs after the fence was checked
    /// and before the write lands (where the kit freezes the holder). Ok(true): accepted.
    pub async fn write<F: Future<Output = ()>>(
        &self,
        fence: S3Fence,
        id: i64,
        value: &str,
        token: i64,
        checked: F,
    ) -> anyhow::Result<bool> {
        let name = object(id);
        let bytes = body(fence, token, value);
        let mut checked = Some(checked);
        for _ in 0..MAX_TRIES {
            let if_match = match fence {
                S3Fence::Unconditional => None,
                _ => {
                    let seen = self.head(id).await?;
                    if seen.token >= token {
                        return Ok(false);
                    }
                    (fence != S3Fence::ClientCompare).then_some(seen.etag)
                }
            };
            if let Some(c) = checked.take() {
                c.await;
            }
            match self.put(&name, &bytes, token, if_match.as_deref()).await? {
                Put::Stored => return Ok(true),
                // Another write came between the read and this PUT: read again.
                Put::Precondition => continue,
            }
        }
        bail!("{MAX_TRIES} conditional writes of {name} lost to other writers")
    }

    async fn put(
        &self,
        name: &str,
        bytes: &str,
        token: i64,
        if_match: Option<&str>,
    ) -> anyhow::Result<Put> {
        let token = token.to_string();
        let mut action = PutObject::new(&self.bucket, Some(&self.credentials), name);
        // Signed headers: a proxy cannot strip the condition or change the token.
        action.headers_mut().insert(FENCE_META, token.clone());
        if let Some(etag) = if_match {
            action.headers_mut().insert("if-match", etag.to_owned());
        }
        let url = action.sign(SIGNED_FOR);
        let mut req = self
            .http
            .put(url)
            .header(FENCE_META, token)
            .header("content-type", "application/octet-stream")
            .body(bytes.to_owned());
        if let Some(etag) = if_match {
            req = req.header("if-match", etag);
        }
        let resp = req.send().await?;
        match resp.status().as_u16() {
            200..=299 => Ok(Put::Stored),
            412 => Ok(Put::Precondition),
            // S3 answers 409 ConditionalRequestConflict when a conditional write races
            // another write to the same key: the same meaning as 412 here.
            409 => Ok(Put::Precondition),
            s => bail!("PUT {name}: {s}: {}", resp.text().await.unwrap_or_default()),
        }
    }
}

enum Put {
    Stored,
    Precondition,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_in_the_bytes_except_for_the_broken_variant() {
        let cases = [
            (S3Fence::Reference, 7, "v", "fence 7\nv"),
            (S3Fence::ClientCompare, 7, "v", "fence 7\nv"),
            (S3Fence::Unconditional, 7, "v", "fence 7\nv"),
            (S3Fence::EtagOfValue, 7, "v", "v"),
        ];
        for (fence, token, value, want) in cases {
            let b = body(fence, token, value);
            assert_eq!(b, want, "{fence:?}");
            assert_eq!(value_of(&b), value, "{fence:?}");
        }
        // Two tokens, the same value: different bytes (so a different ETag) only when the
        // token is in them.
        assert_ne!(
            body(S3Fence::Reference, 1, "v"),
            body(S3Fence::Reference, 2, "v")
        );
        assert_eq!(
            body(S3Fence::EtagOfValue, 1, "v"),
            body(S3Fence::EtagOfValue, 2, "v")
        );
        assert_eq!(value_of("fence 3\nmulti\nline"), "multi\nline");
    }
}
