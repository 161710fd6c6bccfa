//! The WIT package `mfsched:scheduler`, embedded in the binary in both forms
//! authors and tools need: the text of `wit/` and its encoding as a Wasm
//! component (made by the build with `wit_component::encode`), the form
//! registry tools such as wkg publish and consume. `mfsched plugins wit`
//! writes them.

use crate::bindings::VERSION;
use anyhow::{Context as _, Result};
use mfsched_core::write_atomically;
use std::path::{Path, PathBuf};

/// Every file of `wit/`: (file name, text).
pub const FILES: &[(&str, &str)] = &[("scheduler.wit", include_str!("../../../wit/scheduler.wit"))];

/// The package encoded as a component (a WIT package in binary form).
pub const ENCODED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mfsched-scheduler.wasm"));

/// The file name the encoded package is written under: package and version,
/// as registries name it.
pub fn encoded_file_name() -> String {
    format!("mfsched-scheduler-{VERSION}.wasm")
}

/// Writes the WIT files and the encoded package into `dir` (created when
/// missing; files of the same names replaced). Returns the files written.
pub fn write(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::with_capacity(FILES.len() + 1);
    for (name, text) in FILES {
        let path = dir.join(name);
        write_atomically(&path, text.as_bytes())?;
        written.push(path);
    }
    let path = dir.join(encoded_file_name());
    write_atomically(&path, ENCODED)?;
    written.push(path);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wit_component::{DecodedWasm, WitPrinter};

    fn printed(resolve: &wit_parser::Resolve, package: wit_parser::PackageId) -> String {
        let mut printer = WitPrinter::default();
        printer
            .print(resolve, package, &[])
            .expect("the package prints");
        printer.output.to_string()
    }

    #[test]
    fn the_encoded_package_decodes_to_the_wit_text() {
        let DecodedWasm::WitPackage(decoded, package) =
            wit_component::decode(ENCODED).expect("the encoding decodes")
        else {
            panic!("the encoding is a WIT package, not a component");
        };
        let mut parsed = wit_parser::Resolve::default();
        let ours = FILES
            .iter()
            .map(|(name, text)| parsed.push_str(name, text).expect("the WIT parses"))
            .last()
            .expect("at least one file");
        let name = &decoded.packages[package].name;
        assert_eq!(
            format!("{}:{}", name.namespace, name.name),
            crate::bindings::PACKAGE
        );
        assert_eq!(
            name.version.as_ref().map(ToString::to_string).as_deref(),
            Some(VERSION)
        );
        assert_eq!(printed(&decoded, package), printed(&parsed, ours));
    }

    #[test]
    fn every_file_of_wit_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("wit/ exists")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        on_disk.sort();
        let embedded: Vec<&str> = FILES.iter().map(|(name, _)| *name).collect();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn write_puts_both_forms_in_the_directory() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let out = dir.path().join("wit");
        let written = write(&out).expect("writes");
        assert_eq!(written.len(), FILES.len() + 1);
        assert_eq!(
            std::fs::read(out.join(encoded_file_name())).expect("written"),
            ENCODED
        );
        assert_eq!(
            std::fs::read_to_string(out.join("scheduler.wit")).expect("written"),
            FILES[0].1
        );
    }
}
