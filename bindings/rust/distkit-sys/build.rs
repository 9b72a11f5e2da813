// Links libdistkit.so. Set DISTKIT_LIB_DIR to the folder holding it (e.g.
// bazel-bin/capi after `bazel build //capi:libdistkit.so`); without it the
// system linker paths are searched. Running needs the same folder on
// LD_LIBRARY_PATH (or the library installed system-wide).
fn main() {
    println!("cargo:rerun-if-env-changed=DISTKIT_LIB_DIR");
    if let Ok(dir) = std::env::var("DISTKIT_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=dylib=distkit");
}
