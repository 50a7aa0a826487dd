//! Where a page starts, as a word the caller gives back (`--after`): the cursor stays in
//! its namespace, so a page of one namespace never continues into another.

use super::ReadError;

/// Where a page starts. A namespace's holds are read in two runs: the exclusive holders
/// (`/l/<ns>/`, by key), then the shared holds (`/r/<ns>/`, by their store key, which
/// names key and session). One cursor walks both, so a page never leaves a hold out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    Start,
    /// After this key's exclusive holder.
    Held(String),
    /// In the shared run: at its start (None), or after this store key (without `/r/`).
    Shared(Option<String>),
}

impl Cursor {
    /// `held:<key>`, `shared:` or `shared:<store key>`, as [`Cursor::word`] printed it.
    pub fn parse(namespace: &str, text: Option<&str>) -> Result<Self, ReadError> {
        let bad = || ReadError::Cursor(text.unwrap_or_default().to_owned());
        let ours = |k: &str| {
            k.strip_prefix(namespace)
                .is_some_and(|r| r.len() > 1 && r.starts_with('/'))
        };
        match text {
            None => Ok(Cursor::Start),
            Some(t) => match t.split_once(':') {
                Some(("held", k)) if ours(k) => Ok(Cursor::Held(k.to_owned())),
                Some(("shared", "")) => Ok(Cursor::Shared(None)),
                Some(("shared", k)) if ours(k) => Ok(Cursor::Shared(Some(k.to_owned()))),
                _ => Err(bad()),
            },
        }
    }

    pub fn word(&self) -> String {
        match self {
            Cursor::Start => String::new(),
            Cursor::Held(k) => format!("held:{k}"),
            Cursor::Shared(k) => format!("shared:{}", k.as_deref().unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_its_run_and_stays_in_its_namespace() {
        for (text, want) in [
            (None, Ok(Cursor::Start)),
            (Some("held:pay/a"), Ok(Cursor::Held("pay/a".into()))),
            (Some("shared:"), Ok(Cursor::Shared(None))),
            (
                Some("shared:pay/r//s/7b"),
                Ok(Cursor::Shared(Some("pay/r//s/7b".into()))),
            ),
            (Some("held:payroll/a"), Err(())),
            (Some("held:ops/a"), Err(())),
            (Some("pay/a"), Err(())),
            (Some("held:"), Err(())),
        ] {
            let got = Cursor::parse("pay", text).map_err(|_| ());
            assert_eq!(got, want, "{text:?}");
            if let Ok(c) = got
                && text.is_some()
            {
                assert_eq!(Some(c.word().as_str()), text);
            }
        }
    }
}
