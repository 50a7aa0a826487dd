// Generates the prost message types of lock.v1 and the google.rpc subset. Services are
// generated in the arbiter (tonic); the messages live here so the wasm filter can use them.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    prost_build::Config::new().compile_protos(
        &["proto/lock/v1/lock.proto", "proto/google/rpc/status.proto"],
        &["proto"],
    )?;
    Ok(())
}
