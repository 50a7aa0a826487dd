//! The authoriser's own cost with 100,000 grants, natively and in wasm under V8.

use anyhow::Context as _;

/// The authoriser with `n` grants (one identity each, one prefix each): compile time and
/// mean lookup time over a million lookups (half granted, half not), natively and inside a
/// wasm engine: the same code (`lock_filter::cost`) built as `authoriser_cost.wasm` and run
/// under Node's WASI, whose V8 is the engine family of Envoy's wasm runtime.
pub fn cost(n: usize) -> anyhow::Result<String> {
    const LOOKUPS: usize = 1_000_000;
    let native = lock_filter::cost::measure(n, LOOKUPS)?;
    let mut rows = format!(
        "| authoriser, {n} grants (native) | compile {:.0} ms | lookup {:.0} ns mean over {LOOKUPS} |\n",
        native.compile.as_secs_f64() * 1000.0,
        native.per_lookup_ns
    );
    match in_wasm(n, LOOKUPS) {
        Ok(line) => rows.push_str(&line),
        Err(e) => {
            // Reported in the table rather than failing the run: the other rows stand.
            eprintln!("authoriser in wasm: {e:#}");
            rows.push_str(&format!(
                "| authoriser, {n} grants (wasm, V8) | not measured: {e} | |\n"
            ));
        }
    }
    Ok(rows)
}

fn in_wasm(n: usize, lookups: usize) -> anyhow::Result<String> {
    let root = lock_integration::paths::workspace_root();
    let wasm = root.join("target/wasm32-wasip1/release/authoriser_cost.wasm");
    anyhow::ensure!(
        wasm.exists(),
        "{} not found: `cargo build --release -p lock-filter --target wasm32-wasip1` builds it",
        wasm.display()
    );
    let out = std::process::Command::new("node")
        .arg("--no-warnings")
        .arg(root.join("integration/scripts/run-wasi.mjs"))
        .arg(&wasm)
        .args([n.to_string(), lookups.to_string()])
        .output()
        .context("running node (integration/scripts/install-deps.sh installs it)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "authoriser_cost.wasm failed: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| -> anyhow::Result<f64> {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("no {name} in {text:?}"))?
            .parse::<f64>()
            .with_context(|| format!("{name} in {text:?}"))
    };
    let engine = std::process::Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    Ok(format!(
        "| authoriser, {n} grants (wasm, V8 of Node {engine}) | compile {:.0} ms | lookup {:.0} ns mean over {lookups} |\n",
        field("compile_ms")?,
        field("per_lookup_ns")?
    ))
}
