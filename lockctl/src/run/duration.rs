//! The flags' durations (`--wait`, `--grace`): `10s`, `500ms`, `2m` or plain seconds.

use std::time::Duration;

/// Largest duration a flag may give: a day is longer than any wait the service allows
/// (300 s) or any grace anyone means, and keeps `Instant` arithmetic far from overflow.
const MAX_FLAG_DURATION: Duration = Duration::from_secs(24 * 3600);

/// `10s`, `500ms`, `2m` or plain seconds, at most a day.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    };
    if d > MAX_FLAG_DURATION {
        return Err(format!("duration {s:?} is longer than a day"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in [
            "",
            "x",
            "5h",
            "18446744073709551615s",
            "18446744073709551615m",
            "25h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
