//! Issue 37: the manual stays true. Its generated reference pages are fresh, the book builds
//! without a warning, every internal link and anchor resolves, every `make` target and
//! `lockctl` flag it names exists, and its runnable shell snippets run against a real stack.
//! (Its Rust snippets are doctests of lock-client: `client/src/lib.rs`, `BookRustPage`.)

use lock_integration::docs::{book_src, broken_links, lockctl_commands, stale};
use lock_integration::paths::{dep, workspace_bin, workspace_root};
use lock_integration::{Stack, StackOptions};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// Every markdown file of the manual, and the README, but the generated CLI page (it is
/// the binaries' own `--help`, whose prose says things like "make a").
fn pages() -> Vec<PathBuf> {
    let mut out = vec![workspace_root().join("README.md")];
    let mut stack = vec![book_src()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.retain(|p| !p.ends_with("reference/cli.md"));
    out.sort();
    out
}

/// The text of every fenced code block and inline code span of a page.
fn code_of(text: &str) -> Vec<(String, String)> {
    use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
    let mut out = Vec::new();
    let mut block: Option<(String, String)> = None;
    for ev in Parser::new(text) {
        match ev {
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(i) => i.into_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                block = Some((info, String::new()));
            }
            Event::Text(t) => {
                if let Some((_, b)) = block.as_mut() {
                    b.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => out.extend(block.take()),
            Event::Code(c) => out.push(("inline".into(), c.into_string())),
            _ => {}
        }
    }
    out
}

#[test]
fn the_generated_reference_pages_are_fresh() {
    let stale = stale().unwrap();
    assert!(
        stale.is_empty(),
        "stale generated pages (run `make docs`): {stale:?}"
    );
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let readme = workspace_root().join("README.md");
    let broken = broken_links(&book_src(), &[readme]).unwrap();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_book_builds_without_warnings() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(dep("mdbook").unwrap())
        .args(["build", "docs", "-d"])
        .arg(out_dir.path())
        .current_dir(workspace_root())
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook warned:\n{log}"
    );
    for page in ["index.html", "reference/errors.html", "performance.html"] {
        assert!(out_dir.path().join(page).exists(), "{page} not built");
    }
    // The performance page includes bench-results/latest.md when the book is built.
    let perf = std::fs::read_to_string(out_dir.path().join("performance.html")).unwrap();
    assert!(
        perf.contains("etcd raw Txn (floor)"),
        "latest.md not included"
    );
}

#[test]
fn every_make_target_the_docs_name_exists() {
    let makefile = std::fs::read_to_string(workspace_root().join("Makefile")).unwrap();
    let targets: BTreeSet<&str> = makefile
        .lines()
        .filter_map(|l| l.split_once(':').map(|(t, _)| t))
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .collect();
    let mut missing = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (_, code) in code_of(&text) {
            let words: Vec<&str> = code.split_whitespace().collect();
            for w in words.windows(2) {
                if w[0] == "make"
                    && w[1].chars().all(|c| c.is_ascii_lowercase() || c == '-')
                    && !targets.contains(w[1])
                {
                    missing.push(format!("{}: make {}", page.display(), w[1]));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "no such make target:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_lockctl_command_and_flag_the_docs_name_exists() {
    let commands = lockctl_commands().unwrap();
    let lockctl = workspace_bin("lockctl").unwrap();
    let help_of = |path: &[String]| {
        let out = Command::new(&lockctl)
            .args(path)
            .arg("--help")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (_, code) in code_of(&text) {
            for line in code.lines() {
                let Some(at) = line.find("lockctl ") else {
                    continue;
                };
                // Only the command itself: stop at a comment, a pipe or the next command.
                let cmd = line[at + "lockctl ".len()..]
                    .split(['#', '|', ';', '&', ')', '`'])
                    .next()
                    .unwrap_or("");
                let words: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
                let Some(first) = words.first() else { continue };
                if first.starts_with('-')
                    || first.starts_with('<')
                    || !first.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                {
                    continue;
                }
                // `group-guard` is lockctl's hidden internal helper (the docs name it to
                // explain a SIGKILL); it is not in --help on purpose.
                if first == "group-guard" {
                    continue;
                }
                // The longest command path the words start with.
                let path = commands
                    .iter()
                    .filter(|p| !p.is_empty() && words.starts_with(p))
                    .max_by_key(|p| p.len());
                let Some(path) = path else {
                    problems.push(format!(
                        "{}: no lockctl command in `lockctl {cmd}`",
                        page.display()
                    ));
                    continue;
                };
                let help = help_of(path);
                for w in &words[path.len()..] {
                    let flag = w.split('=').next().unwrap_or(w);
                    if flag.starts_with("--") && flag.len() > 2 && !help.contains(flag) {
                        problems.push(format!(
                            "{}: `lockctl {}` has no flag {flag}",
                            page.display(),
                            path.join(" ")
                        ));
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked > 20,
        "too few lockctl lines found ({checked}): is the scan broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Blocks marked ```sh,runnable run with bash against a real stack, as the operator
/// identity with `lockctl` on the PATH (what `make run`'s env.sh gives a newcomer).
#[tokio::test]
async fn the_runnable_snippets_run_against_a_stack() {
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    let svid = stack
        .pki
        .svid("docs-operator", lock_integration::pki::OPERATOR)
        .unwrap();
    let bin_dir = workspace_bin("lockctl")
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (info, code) in code_of(&text) {
            if !info.split(',').any(|w| w.trim() == "runnable") {
                continue;
            }
            let out = Command::new("bash")
                .args(["-euo", "pipefail", "-c", &code])
                .env("PATH", &path)
                .env("LOCK_ENDPOINT", stack.endpoint())
                .env("LOCK_SVID", &svid.cert)
                .env("LOCK_SVID_KEY", &svid.key)
                .env("LOCK_CA", &svid.ca)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: the runnable snippet failed:\n{code}\n{}{}",
                page.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 1, "no runnable snippet found");
}

/// The user pages: every page but the "Project" part's, which tells the project's history.
fn user_pages() -> Vec<PathBuf> {
    let src = book_src();
    pages()
        .into_iter()
        .filter(|p| {
            let rel = p.strip_prefix(&src).unwrap_or(p);
            !lock_integration::docs_drift::PROJECT_PAGES
                .iter()
                .any(|x| rel == std::path::Path::new(x))
        })
        .collect()
}

/// A reader has neither the files beside the repository nor the tracker: no user page
/// sends them there.
#[test]
fn no_user_page_cites_a_file_outside_the_repository_or_an_issue_number() {
    use lock_integration::docs_drift::{issue_numbers, outside_references};
    let mut found = Vec::new();
    for p in user_pages() {
        let text = std::fs::read_to_string(&p).unwrap();
        for r in outside_references(&text)
            .into_iter()
            .chain(issue_numbers(&text))
        {
            found.push(format!("{}: {r}", p.display()));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Every repository path a page names in backticks exists (a moved file moves its
/// mentions with it).
#[test]
fn every_repository_path_the_book_names_exists() {
    let mut found = Vec::new();
    for p in pages() {
        let text = std::fs::read_to_string(&p).unwrap();
        let spans: Vec<String> = code_of(&text)
            .into_iter()
            .filter(|(kind, _)| kind == "inline")
            .map(|(_, c)| c)
            .collect();
        for path in lock_integration::docs_drift::unresolved_paths(&spans, &workspace_root()) {
            found.push(format!("{}: {path}", p.display()));
        }
    }
    assert!(
        found.is_empty(),
        "paths that do not exist:\n{}",
        found.join("\n")
    );
}
