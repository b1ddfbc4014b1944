//! Generates the server side of cosim.v1.RuntimeBackendService from the
//! repository's proto/ (the contract), with a vendored protoc.

use std::{env, error::Error, path::PathBuf};

fn main() -> Result<(), Box<dyn Error>> {
    let proto_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../proto");
    let service = proto_root.join("cosim/v1/runtime_service.proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    // tonic-build runs `protoc` from $PROTOC: point it at the vendored binary.
    env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_client(false)
        .file_descriptor_set_path(out_dir.join("cosim_descriptor.bin")) // for reflection
        .compile_protos(&[service], &[proto_root.clone(), protoc_bin_vendored::include_path()?])?;
    println!("cargo:rerun-if-changed={}", proto_root.join("cosim/v1").display());
    Ok(())
}
