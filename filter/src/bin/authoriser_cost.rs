//! `authoriser_cost [grants] [lookups]`: the authoriser's compile and lookup time, printed
//! as one line of `key=value`. Built for `wasm32-wasip1` beside the filter so `make bench`
//! can run the same code inside a wasm engine (V8) as natively; see `lock_filter::cost`.

use std::process::ExitCode;

// The module itself rather than the `lock_filter` library: the library carries the
// proxy-wasm exports (`_initialize`, the host ABI imports), which make a wasm command
// unrunnable outside a proxy.
#[path = "../cost.rs"]
mod cost;

fn arg(i: usize, default: usize) -> Result<usize, String> {
    match std::env::args().nth(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| format!("argument {i} is not a count: {s:?}")),
    }
}

fn main() -> ExitCode {
    let run = || -> Result<cost::AuthoriserCost, String> {
        let grants = arg(1, 100_000)?;
        let lookups = arg(2, 1_000_000)?;
        cost::measure(grants, lookups).map_err(|e| e.to_string())
    };
    match run() {
        Ok(c) => {
            println!(
                "grants={} compile_ms={:.1} lookups={} per_lookup_ns={:.1}",
                c.grants,
                c.compile.as_secs_f64() * 1000.0,
                c.lookups,
                c.per_lookup_ns
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("authoriser_cost: {e}");
            ExitCode::FAILURE
        }
    }
}
