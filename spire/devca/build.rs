// The Workload API server's stubs (the dev CA serves the X.509 half of it).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/workload.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        .compile_protos(&["proto/workload.proto"], &["proto"])?;
    Ok(())
}
