// gRPC service stubs for lock.v1 (server for the arbiter, client for lockctl). The message
// types come from lock-config so the filter, the arbiter and clients share one definition.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../config/proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .extern_path(".lock.v1", "::lock_config::proto::lock::v1")
        .compile_protos(
            &["../config/proto/lock/v1/lock.proto"],
            &["../config/proto"],
        )?;
    Ok(())
}
