//! `docsgen write`: regenerates the manual's reference pages (`docs/src/reference/`) from
//! their sources, and `deploy/kubernetes` from the Helm chart (`deploy/helm/fenced-lock`,
//! through `integration/scripts/render-manifests.sh`); `docsgen check`: exits 1 naming
//! each stale file (`make docs` writes, `make test` checks through
//! `integration/tests/docs.rs` and `helm.rs`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let result = match mode.as_str() {
        "write" => lock_integration::docs::write_all()
            .and_then(|()| lock_integration::manifests::write_all())
            .map(|()| Vec::new()),
        "check" => lock_integration::docs::stale().and_then(|mut stale| {
            stale.extend(lock_integration::manifests::stale()?);
            Ok(stale)
        }),
        _ => {
            eprintln!("usage: docsgen write|check");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(stale) if stale.is_empty() => ExitCode::SUCCESS,
        Ok(stale) => {
            for p in stale {
                eprintln!("{p} is stale: run `make docs`");
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("docsgen: {e:#}");
            ExitCode::from(1)
        }
    }
}
