//! `docsgen write`: regenerates the manual's reference pages (`docs/src/reference/`) from
//! their sources; `docsgen check`: exits 1 naming each stale page (`make docs` writes,
//! `make test` checks through `integration/tests/docs.rs`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let result = match mode.as_str() {
        "write" => lock_integration::docs::write_all().map(|()| Vec::new()),
        "check" => lock_integration::docs::stale(),
        _ => {
            eprintln!("usage: docsgen write|check");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(stale) if stale.is_empty() => ExitCode::SUCCESS,
        Ok(stale) => {
            for p in stale {
                eprintln!("docs/src/{p} is stale: run `make docs`");
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("docsgen: {e:#}");
            ExitCode::from(1)
        }
    }
}
