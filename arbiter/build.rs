// gRPC server stubs for lock.v1 (the client stubs are generated once, in lock-client). The
// message types come from lock-config so the filter, the arbiter and clients share one
// definition.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../config/proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        .extern_path(".lock.v1", "::lock_config::proto::lock::v1")
        .compile_protos(
            &["../config/proto/lock/v1/lock.proto"],
            &["../config/proto"],
        )?;
    Ok(())
}
