//! Generates include/accord.h from the sources with cbindgen, rewriting it only when its text
//! changes (the header is committed; `make test` fails when the committed one is stale).

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let header = crate_dir.join("../../include/accord.h");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed={}", header.display());
    // The shared library's soname, for the libaccord.so.0 symlink that `make install` makes.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libaccord.so.0");

    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("bindings/c/cbindgen.toml is readable");
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut text = Vec::new();
    bindings.write(&mut text);
    if std::fs::read(&header).ok().as_deref() != Some(text.as_slice()) {
        std::fs::write(&header, text).expect("include/accord.h is writable");
    }
}
