//! What `lockctl acquire`, `release` and `run` were asked to take or release, from their
//! arguments: one key (exclusive or `--shared`) or a set of keys (AcquireAll, ReleaseAll);
//! and how a wait longer than the service's is asked in turns. Pure, so tested here.

use std::time::Duration;

/// The most keys one AcquireAll takes.
pub const MAX_SET: usize = 16;

/// The longest wait the service grants one call (the arbiter's `MAX_WAIT`): a longer
/// `--wait` is asked again when the service's wait ends first.
pub const SERVICE_MAX_WAIT: Duration = Duration::from_secs(300);

/// How one key is held: its one holder, one of its readers (`--shared`, a `shared: true`
/// class), or one of its permits (`--permit`, a semaphore: a `permits: N` class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
    Permit,
}

impl Mode {
    /// From the two flags (clap keeps them exclusive of each other).
    pub fn of(shared: bool, permit: bool) -> Self {
        match (shared, permit) {
            (true, _) => Mode::Shared,
            (false, true) => Mode::Permit,
            (false, false) => Mode::Exclusive,
        }
    }

    /// The flag that names it on the command line (empty for exclusive).
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Exclusive => "",
            Mode::Shared => "--shared",
            Mode::Permit => "--permit",
        }
    }
}

/// What to take.
#[derive(Debug, PartialEq, Eq)]
pub enum Take {
    /// One key, in `mode`.
    One { key: String, mode: Mode },
    /// Several keys as one set (AcquireAll): all or none, one token. Sorted.
    Set(Vec<String>),
}

impl Take {
    /// From the positional keys and the mode: one key, or a set of 2..=16 distinct keys
    /// (always exclusive: AcquireAll has no shared or permit mode).
    pub fn of(keys: Vec<String>, mode: Mode) -> Result<Self, String> {
        match keys.len() {
            0 => Err("give a key".into()),
            1 => Ok(Take::One {
                key: keys.into_iter().next().unwrap_or_default(),
                mode,
            }),
            _ if mode != Mode::Exclusive => Err(format!(
                "{} takes one key: a set of several keys is always held exclusive",
                mode.flag()
            )),
            n if n > MAX_SET => Err(format!(
                "{n} keys: a set has at most {MAX_SET} (AcquireAll)"
            )),
            _ => Ok(Take::Set(distinct(keys)?)),
        }
    }

    /// The keys, as one word each.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Take::One { key, .. } => vec![key.as_str()],
            Take::Set(keys) => keys.iter().map(String::as_str).collect(),
        }
    }

    /// The keys for messages: `a`, or `a b c`.
    pub fn label(&self) -> String {
        self.keys().join(" ")
    }
}

/// The keys sorted; an error naming a key given twice.
fn distinct(mut keys: Vec<String>) -> Result<Vec<String>, String> {
    keys.sort();
    if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!(
            "{} is given twice: a set's keys are distinct",
            w[0]
        ));
    }
    Ok(keys)
}

/// What to release.
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// Release (one key), in the mode it was taken in.
    One { key: String, token: u64, mode: Mode },
    /// ReleaseAll: a set AcquireAll granted.
    Set { keys: Vec<String>, token: u64 },
}

impl Release {
    /// From the positional arguments, `--token` and the mode (`--shared`, `--permit`):
    ///
    /// - `KEY TOKEN` (no `--token`): one key, as `lockctl acquire KEY` printed it;
    /// - `--token TOKEN KEY`: the same;
    /// - `--token TOKEN K1 K2 ...`: the set `lockctl acquire K1 K2 ...` took (ReleaseAll).
    ///
    /// Without `--token`, anything but two arguments is refused rather than guessed at: the
    /// token of a set goes in `--token`.
    pub fn of(args: Vec<String>, token: Option<u64>, mode: Mode) -> Result<Self, String> {
        let (keys, token) = match token {
            Some(t) => (args, t),
            None => match <[String; 2]>::try_from(args) {
                Ok([key, t]) => {
                    let t = t.parse::<u64>().map_err(|_| {
                        format!("{t:?} is not a token (the number `lockctl acquire` printed)")
                    })?;
                    (vec![key], t)
                }
                Err(args) if args.len() > 2 => {
                    return Err(format!(
                        "{} arguments: release a set with `lockctl release --token TOKEN KEY...`, \
                         one key with `lockctl release KEY TOKEN`",
                        args.len()
                    ));
                }
                Err(_) => return Err("give KEY TOKEN, or --token TOKEN KEY...".into()),
            },
        };
        match Take::of(keys, mode)? {
            Take::One { key, mode } => Ok(Release::One { key, token, mode }),
            Take::Set(keys) => Ok(Release::Set { keys, token }),
        }
    }
}

/// How long to ask the service to wait in one call, with `left` of the caller's wait.
pub fn service_wait(left: Duration) -> Duration {
    left.min(SERVICE_MAX_WAIT)
}

/// `wait_millis` of a call waiting `d`: whole milliseconds, rounded up, so a wait with
/// time left never becomes 0 (refuse at once).
pub fn wait_millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Ask again after a refusal? Only when the key (or a key of the set) was still held when
/// the service's wait ended and the caller's own wait has time `left`: the service's wait
/// is capped ([`SERVICE_MAX_WAIT`]), the caller's is not.
pub fn ask_again(held: bool, left: Duration) -> bool {
    held && !left.is_zero()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn takes() {
        assert_eq!(
            Take::of(v(&["a"]), Mode::Exclusive),
            Ok(Take::One {
                key: "a".into(),
                mode: Mode::Exclusive
            })
        );
        assert_eq!(
            Take::of(v(&["a"]), Mode::Shared),
            Ok(Take::One {
                key: "a".into(),
                mode: Mode::Shared
            })
        );
        assert_eq!(
            Take::of(v(&["c", "a", "b"]), Mode::Exclusive),
            Ok(Take::Set(v(&["a", "b", "c"])))
        );
        assert_eq!(
            Take::of(v(&["c", "a", "b"]), Mode::Exclusive)
                .unwrap()
                .label(),
            "a b c"
        );
        assert!(Take::of(v(&[]), Mode::Exclusive).is_err());
        assert_eq!(
            Take::of(v(&["a"]), Mode::Permit),
            Ok(Take::One {
                key: "a".into(),
                mode: Mode::Permit
            })
        );
        assert!(
            Take::of(v(&["a", "b"]), Mode::Permit)
                .unwrap_err()
                .contains("--permit")
        );
        assert!(
            Take::of(v(&["a", "b"]), Mode::Shared)
                .unwrap_err()
                .contains("--shared")
        );
        assert!(
            Take::of(v(&["a", "b", "a"]), Mode::Exclusive)
                .unwrap_err()
                .contains("a is given twice")
        );
        let many: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
        assert!(
            Take::of(many.clone(), Mode::Exclusive)
                .unwrap_err()
                .contains("at most 16")
        );
        assert!(Take::of(many[..16].to_vec(), Mode::Exclusive).is_ok());
    }

    #[test]
    fn releases() {
        // Today's form.
        assert_eq!(
            Release::of(v(&["a", "42"]), None, Mode::Exclusive),
            Ok(Release::One {
                key: "a".into(),
                token: 42,
                mode: Mode::Exclusive
            })
        );
        assert_eq!(
            Release::of(v(&["a", "42"]), None, Mode::Shared),
            Ok(Release::One {
                key: "a".into(),
                token: 42,
                mode: Mode::Shared
            })
        );
        // --token with one key is the same release.
        assert_eq!(
            Release::of(v(&["a"]), Some(7), Mode::Exclusive),
            Ok(Release::One {
                key: "a".into(),
                token: 7,
                mode: Mode::Exclusive
            })
        );
        // --token with several keys: the set, whatever the keys look like (numbers too).
        assert_eq!(
            Release::of(v(&["b", "a", "42"]), Some(7), Mode::Exclusive),
            Ok(Release::Set {
                keys: v(&["42", "a", "b"]),
                token: 7
            })
        );
        // --token with two keys: a set of two, never KEY TOKEN.
        assert_eq!(
            Release::of(v(&["a", "42"]), Some(7), Mode::Exclusive),
            Ok(Release::Set {
                keys: v(&["42", "a"]),
                token: 7
            })
        );
        // Without --token, only KEY TOKEN; a set's token is never guessed from its place.
        assert!(
            Release::of(v(&["a", "b", "42"]), None, Mode::Exclusive)
                .unwrap_err()
                .contains("--token")
        );
        assert!(Release::of(v(&["a"]), None, Mode::Exclusive).is_err());
        assert!(
            Release::of(v(&["a", "b"]), None, Mode::Exclusive)
                .unwrap_err()
                .contains("not a token")
        );
        assert!(Release::of(v(&["a", "b"]), Some(7), Mode::Shared).is_err());
        assert!(Release::of(v(&[]), Some(7), Mode::Exclusive).is_err());
    }

    #[test]
    fn waits() {
        assert_eq!(
            service_wait(Duration::from_secs(30)),
            Duration::from_secs(30)
        );
        assert_eq!(service_wait(Duration::from_secs(900)), SERVICE_MAX_WAIT);
        assert_eq!(wait_millis(Duration::ZERO), 0);
        assert_eq!(wait_millis(Duration::from_micros(1)), 1);
        assert_eq!(wait_millis(Duration::from_millis(1500)), 1500);
        assert!(ask_again(true, Duration::from_millis(1)));
        assert!(!ask_again(true, Duration::ZERO));
        assert!(!ask_again(false, Duration::from_secs(10)));
    }
}
