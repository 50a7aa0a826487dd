// Client stubs only; the messages come from lock-config.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../config/proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .extern_path(".lock.v1", "::lock_config::proto::lock::v1")
        .compile_protos(
            &["../config/proto/lock/v1/lock.proto"],
            &["../config/proto"],
        )?;
    // The server side too, in a folder of its own that only the tests include (their fake
    // lock.v1 service, tests/metrics.rs): the library itself stays client-only.
    let server = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("server");
    std::fs::create_dir_all(&server)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        // Methods a fake does not implement answer UNIMPLEMENTED.
        .generate_default_stubs(true)
        .out_dir(&server)
        .extern_path(".lock.v1", "::lock_config::proto::lock::v1")
        .compile_protos(
            &["../config/proto/lock/v1/lock.proto"],
            &["../config/proto"],
        )?;
    Ok(())
}
