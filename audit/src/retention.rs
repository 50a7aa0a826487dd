//! The write-once bucket force releases are kept in (ADR-20, 21: seven years, object lock in
//! retention mode). The promise lives in the bucket, not in this program: S3 Object Lock
//! with a default retention in COMPLIANCE mode keeps every object version the period out,
//! and not even the bucket's owner can delete or shorten it. So before writing there, the
//! export reads the bucket's Object Lock configuration and refuses a bucket that would not
//! keep the record: lock off, GOVERNANCE mode (which a privileged user can bypass), no
//! default retention, or a shorter one. The PUT then names its own retention as well
//! (COMPLIANCE until the years are out), so the object is kept even if the bucket's default
//! is later shortened.

use rusty_s3::{Bucket, Credentials, Method, UrlStyle};
use std::time::Duration;

/// A bucket's default retention, as its Object Lock configuration states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    pub enabled: bool,
    pub mode: Option<String>,
    pub days: u32,
}

/// Why a bucket does not keep records for the years asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionRefused {
    #[error("Object Lock is not enabled on the bucket")]
    NotEnabled,
    #[error(
        "the bucket's default retention is {0:?} mode, not COMPLIANCE (GOVERNANCE can be bypassed)"
    )]
    NotCompliance(Option<String>),
    #[error("the bucket keeps objects {days} days by default, less than the {want} asked")]
    TooShort { days: u32, want: u32 },
}

/// The text inside the first `<tag>...</tag>` of `xml` (the configuration is flat and
/// small; S3 does not nest these names).
fn tag<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(xml[start..end].trim())
}

/// Reads `GET /<bucket>?object-lock`'s body.
pub fn parse(xml: &str) -> Retention {
    let number = |name| tag(xml, name).and_then(|v| v.parse::<u32>().ok());
    // S3 sends one of the two; some servers send both, the unused one as 0.
    let days = number("Days")
        .unwrap_or(0)
        .max(number("Years").map_or(0, |y| y.saturating_mul(365)));
    Retention {
        enabled: tag(xml, "ObjectLockEnabled") == Some("Enabled"),
        mode: tag(xml, "Mode").map(str::to_owned),
        days,
    }
}

/// Whether `r` keeps every object at least `years` (365-day years: a bucket configured in
/// `Years` passes for the same number of years).
pub fn verdict(r: &Retention, years: u32) -> Result<(), RetentionRefused> {
    if !r.enabled {
        return Err(RetentionRefused::NotEnabled);
    }
    if r.mode.as_deref() != Some("COMPLIANCE") {
        return Err(RetentionRefused::NotCompliance(r.mode.clone()));
    }
    let want = years.saturating_mul(365);
    if r.days < want {
        return Err(RetentionRefused::TooShort { days: r.days, want });
    }
    Ok(())
}

/// A bucket on an S3 endpoint, path-style, signed with the `AWS_*` credentials.
pub struct WriteOnceBucket {
    bucket: Bucket,
    credentials: Credentials,
    token: Option<String>,
    http: reqwest::Client,
}

impl WriteOnceBucket {
    pub fn new(endpoint: &str, bucket: &str) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
        let region = std::env::var("AWS_REGION")
            .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|_| "us-east-1".into());
        Ok(Self {
            bucket: Bucket::new(
                endpoint.parse().context("the S3 endpoint is not a URL")?,
                UrlStyle::Path,
                bucket.to_owned(),
                region,
            )?,
            credentials: Credentials::new(env("AWS_ACCESS_KEY_ID")?, env("AWS_SECRET_ACCESS_KEY")?),
            token: std::env::var("AWS_SESSION_TOKEN").ok(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
        })
    }

    fn sign<'a>(
        &'a self,
        method: Method,
        url: url::Url,
        query: &[(&'a str, &'a str)],
        headers: &[(&'a str, &'a str)],
    ) -> url::Url {
        rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            method,
            url,
            self.credentials.key(),
            self.credentials.secret(),
            self.token.as_deref(),
            self.bucket.region(),
            60,
            query.iter().copied(),
            headers.iter().copied(),
        )
    }

    /// The bucket's Object Lock configuration; a bucket without one reads as not enabled.
    pub async fn retention(&self) -> anyhow::Result<Retention> {
        let url = self.sign(
            Method::Get,
            self.bucket.base_url().clone(),
            &[("object-lock", "")],
            &[],
        );
        let resp = self.http.get(url).send().await?;
        let status = resp.status();
        let body = resp.text().await?;
        if status.as_u16() == 404 || body.contains("ObjectLockConfigurationNotFoundError") {
            return Ok(parse(""));
        }
        anyhow::ensure!(
            status.is_success(),
            "object lock configuration: {status}: {body}"
        );
        Ok(parse(&body))
    }

    /// PUTs `bytes` as `key`, locked in COMPLIANCE mode for `years` (365-day years) from
    /// now, with the Content-MD5 S3 requires of an Object Lock upload. All signed.
    pub async fn put_locked(&self, key: &str, bytes: Vec<u8>, years: u32) -> anyhow::Result<()> {
        use base64::Engine as _;
        use md5::Digest as _;
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&bytes));
        let until = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_hours(
                24 * 365 * i64::from(years),
            ))?
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let headers = [
            ("content-md5", md5.as_str()),
            ("x-amz-object-lock-mode", "COMPLIANCE"),
            ("x-amz-object-lock-retain-until-date", until.as_str()),
        ];
        let url = self.sign(Method::Put, self.bucket.object_url(key), &[], &headers);
        let mut req = self.http.put(url).body(bytes);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let resp = req.send().await?;
        let status = resp.status();
        anyhow::ensure!(
            status.is_success(),
            "PUT {key}: {status}: {}",
            resp.text().await.unwrap_or_default()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEVEN_YEARS: &str = "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>COMPLIANCE</Mode><Years>7</Years></DefaultRetention></Rule></ObjectLockConfiguration>";

    #[test]
    fn a_bucket_keeps_records_only_in_compliance_mode_long_enough() {
        let days = |d: &str| SEVEN_YEARS.replace("<Years>7</Years>", &format!("<Days>{d}</Days>"));
        let governance = SEVEN_YEARS.replace("COMPLIANCE", "GOVERNANCE");
        let no_rule = "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled></ObjectLockConfiguration>";
        let cases: Vec<(&str, String, Result<(), RetentionRefused>)> = vec![
            ("seven years", SEVEN_YEARS.into(), Ok(())),
            ("in days", days("2555"), Ok(())),
            (
                "both, the unused one 0 (moto)",
                SEVEN_YEARS.replace("<Years>", "<Days>0</Days><Years>"),
                Ok(()),
            ),
            (
                "a day short",
                days("2554"),
                Err(RetentionRefused::TooShort {
                    days: 2554,
                    want: 2555,
                }),
            ),
            (
                "governance",
                governance,
                Err(RetentionRefused::NotCompliance(Some("GOVERNANCE".into()))),
            ),
            (
                "lock on, no default retention",
                no_rule.into(),
                Err(RetentionRefused::NotCompliance(None)),
            ),
            (
                "no configuration",
                String::new(),
                Err(RetentionRefused::NotEnabled),
            ),
        ];
        for (why, xml, want) in cases {
            assert_eq!(verdict(&parse(&xml), 7), want, "{why}");
        }
    }
}
