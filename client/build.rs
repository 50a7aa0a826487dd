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
    Ok(())
}
