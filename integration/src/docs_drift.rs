//! Drift a reader trips over, found in a page's text (pure functions; `tests/docs.rs` runs
//! them over the book and proves each on a page with the drift put in):
//!
//! - a reference to a file outside the repository (`../shared/DESIGN.md`, "DESIGN 4.2",
//!   `design-records.txt`): the reader has no such file;
//! - an issue number ("issue 37"): the reader has no tracker to look it up in;
//! - a repository path in backticks (`arbiter/src/grant.rs`) that does not exist.
//!
//! The book's "Project" part (status, the release gate's record, how it is tested, the
//! records) tells the project's history and may name issues; user pages may not.

use std::path::Path;

/// Pages of the "Project" part, relative to the book's `src/`: history is their subject.
pub const PROJECT_PAGES: &[&str] = &[
    "project/status.md",
    "project/release-gate.md",
    "project/tests.md",
    "project/records.md",
];

/// The repository's top-level folders and files a backticked path may start with.
const REPO_ROOTS: &[&str] = &[
    "arbiter/",
    "audit/",
    "client/",
    "clients/",
    "config/",
    "deploy/",
    "docs/",
    "envoy/",
    "explorer/",
    "filter/",
    "force/",
    "integration/",
    "kube/",
    "lockctl/",
    "spire/",
    "store/",
];

/// Every mention of a file outside the repository, as the text that names it.
pub fn outside_references(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for needle in [
        "../shared",
        "DESIGN.md",
        "design-records.txt",
        "CONVENTIONS.md",
    ] {
        if text.contains(needle) {
            out.push(needle.to_owned());
        }
    }
    // "DESIGN 4.2", "DESIGN §6", "DESIGN 8/4.2": the design document by section.
    for (i, _) in text.match_indices("DESIGN ") {
        let next = text[i + 7..].chars().next().unwrap_or(' ');
        if next.is_ascii_digit() || next == '§' {
            out.push(text[i..].chars().take(12).collect());
        }
    }
    out
}

/// Every "issue N" / "issues N" / "issue #N" (any case).
pub fn issue_numbers(text: &str) -> Vec<String> {
    let lower = text.to_ascii_lowercase();
    let mut out = Vec::new();
    for (i, _) in lower.match_indices("issue") {
        let before = lower[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
            continue;
        }
        let rest = &lower[i + 5..];
        let rest = rest.strip_prefix('s').unwrap_or(rest);
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        if rest.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            out.push(text[i..].chars().take(10).collect());
        }
    }
    out
}

/// The repository paths a page names in inline code that do not exist under `root`.
/// Paths with a pattern in them (`*`, `<name>`, `{a,b}`, `$VAR`, `...`) are not checked.
pub fn unresolved_paths(code_spans: &[String], root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for span in code_spans {
        let Some(path) = repo_path(span) else {
            continue;
        };
        if !root.join(path).exists() {
            out.push(path.to_owned());
        }
    }
    out
}

/// The span as a repository path, when it is one: a known top folder, one word, no
/// pattern; a trailing `:line`, `#anchor` or punctuation dropped.
fn repo_path(span: &str) -> Option<&str> {
    let s = span.trim();
    if !REPO_ROOTS.iter().any(|r| s.starts_with(r)) || s.contains(char::is_whitespace) {
        return None;
    }
    if s.contains(['*', '<', '{', '$', '|']) || s.contains("...") {
        return None;
    }
    let s = s.split([':', '#']).next()?;
    Some(s.trim_end_matches(['.', ',', ')']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_references_are_found() {
        let cases: &[(&str, usize)] = &[
            ("see ../shared/DESIGN.md for more", 2),
            ("as DESIGN 4.2 says", 1),
            ("DESIGN §6", 1),
            ("the design records (design/records.md)", 0),
            ("DESIGNED to last", 0),
        ];
        for (text, n) in cases {
            assert_eq!(outside_references(text).len(), *n, "{text}");
        }
    }

    #[test]
    fn issue_numbers_are_found() {
        let cases: &[(&str, usize)] = &[
            ("Issue 37 made it", 1),
            ("issues 12 and 13", 1),
            ("see issue #5", 1),
            ("an issue with the disk", 0),
            ("tissue 4", 0),
        ];
        for (text, n) in cases {
            assert_eq!(issue_numbers(text).len(), *n, "{text}");
        }
    }

    #[test]
    fn repository_paths_are_recognised() {
        assert_eq!(
            repo_path("arbiter/src/grant.rs:12"),
            Some("arbiter/src/grant.rs")
        );
        assert_eq!(repo_path("clients/go/"), Some("clients/go/"));
        assert_eq!(repo_path("clients/*/README.md"), None);
        assert_eq!(repo_path("lockctl acquire"), None);
        assert_eq!(repo_path("pay/ledger/42"), None);
    }
}
