//! Link settings of the libtorch backend (cargo feature `torch`); nothing
//! otherwise.
//!
//! torch-sys tells us where its libtorch lives (`DEP_TCH_LIBTORCH_LIB`). We
//! add (1) an rpath to it, so the binary runs without LD_LIBRARY_PATH, and
//! (2) `libtorch_cuda` as a needed library whenever that libtorch ships one:
//! nothing in the binary references its symbols, so the linker's default
//! `--as-needed` drops it and CUDA is then silently unavailable on a GPU
//! machine (tests/torch_backend.rs checks the binary keeps it).
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Some(lib) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=torch-sys did not report its libtorch directory: no rpath set");
        return;
    };
    let lib = Path::new(&lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-env=LOWCOMM_LIBTORCH_LIB={}", lib.display());
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
