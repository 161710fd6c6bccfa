//! What a component file must be before anything expensive is done with it:
//! a regular file under a size cap, read without ever blocking, whose
//! top-level imports are ones the host links, whose exports name a world the
//! host runs, and whose code stays under a function budget. Compiling is the
//! costly step (a component with 200,000 functions took most of a minute and
//! gigabytes), so it comes only after these checks pass.

use anyhow::{Result, bail};
use std::path::Path;
use wasmparser::{Parser, Payload};

/// The interfaces the host links, by prefix: WASI 0.2's cli, clocks,
/// filesystem, io, random and sockets (each store denies what they could
/// reach: no preopens, no network), and mfsched:scheduler. Not wasi:http.
pub const LINKED: &[&str] = &[
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
    "mfsched:scheduler/",
];

/// The largest component file the host reads (a JavaScript policy with its
/// engine is about 12 MB).
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;
/// The most functions, over every core module of a component, the host compiles.
pub const MAX_FUNCTIONS: u64 = 250_000;

/// Reads a component file: only a regular file (a symlink is followed to what
/// it names) of at most [`MAX_COMPONENT_BYTES`]. A FIFO, a device or a socket
/// is refused without blocking: the file is opened non-blocking and checked on
/// the descriptor, so it cannot be swapped between the check and the read.
pub fn read_component_file(path: &Path) -> Result<Vec<u8>> {
    mfsched_core::read_capped(path, MAX_COMPONENT_BYTES, "component")
}

/// Checks a component binary's shape without compiling it: its top-level
/// imports are WASI or `mfsched:scheduler` interfaces, it exports `decide`
/// (policy) or `score` (utility), and its core modules hold at most
/// [`MAX_FUNCTIONS`] functions.
pub fn check_shape(bytes: &[u8]) -> Result<ComponentMetadata> {
    let mut metadata = ComponentMetadata::default();
    let mut depth = 0usize;
    let mut functions = 0u64;
    let mut exports = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| anyhow::anyhow!("not a valid Wasm component: {e}"))?;
        match payload {
            Payload::Version { encoding, .. }
                if depth == 0 && encoding != wasmparser::Encoding::Component =>
            {
                bail!(
                    "not a valid Wasm component: this is a core Wasm module; build a component (e.g. for wasm32-wasip2)"
                );
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CodeSectionStart { count, .. } => {
                functions += u64::from(count);
                if functions > MAX_FUNCTIONS {
                    bail!(
                        "has over {MAX_FUNCTIONS} functions: too large to compile (the host's budget)"
                    );
                }
            }
            Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    let import = import.map_err(|e| anyhow::anyhow!("bad import section: {e}"))?;
                    let name = import.name.name;
                    // Types the world shares (`use types.{problem, …}`) are
                    // imported as types; everything else must be an interface
                    // the host links.
                    if matches!(import.ty, wasmparser::ComponentTypeRef::Type(_)) {
                        continue;
                    }
                    if !LINKED.iter().any(|p| name.starts_with(p)) {
                        // componentize-js adds the HTTP world unless told not to.
                        let hint = if name.starts_with("wasi:http/") {
                            "; a JavaScript component built with componentize-js: \
                             disable it with `-d http fetch-event`"
                        } else {
                            ""
                        };
                        bail!(
                            "imports `{}`, which the host does not provide (it links {}){hint}",
                            crate::output::printable(name, 200),
                            LINKED.join(", ")
                        );
                    }
                }
            }
            Payload::ComponentExportSection(reader) if depth == 0 => {
                for export in reader {
                    let export = export.map_err(|e| anyhow::anyhow!("bad export section: {e}"))?;
                    exports.push(export.name.name.to_owned());
                }
            }
            Payload::CustomSection(reader) if depth == 0 => metadata.read(&reader),
            _ => {}
        }
    }
    if !exports.iter().any(|e| e == "decide" || e == "score") {
        bail!(
            "exports neither `decide` (policy world) nor `score` (utility world) of mfsched:scheduler"
        );
    }
    Ok(metadata)
}

/// What a component says about itself in its own custom sections: the
/// component-name section, and the `version` and `authors` sections
/// `wasm-tools metadata add` writes. All optional; the component's identity
/// stays its SHA-256. Printable and cut, like every plugin string.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComponentMetadata {
    pub name: Option<String>,
    pub version: Option<String>,
    pub authors: Option<String>,
}

/// Which component: its SHA-256 (the identity) and what it declares about
/// itself, read together so the two always describe the same build.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComponentIdentity {
    pub sha256: String,
    pub metadata: ComponentMetadata,
}

/// The most of a metadata field kept.
const METADATA_BYTES: usize = 200;

impl ComponentMetadata {
    fn read(&mut self, section: &wasmparser::CustomSectionReader<'_>) {
        let text = |bytes: &[u8]| {
            Some(crate::output::printable(
                std::str::from_utf8(bytes).ok()?.trim(),
                METADATA_BYTES,
            ))
            .filter(|t| !t.is_empty())
        };
        match section.name() {
            "version" => self.version = text(section.data()),
            "authors" => self.authors = text(section.data()),
            _ => {
                if let wasmparser::KnownCustom::ComponentName(names) = section.as_known() {
                    for name in names.into_iter().flatten() {
                        if let wasmparser::ComponentName::Component { name, .. } = name {
                            self.name = text(name.as_bytes());
                        }
                    }
                }
            }
        }
    }

    /// One phrase for people (`my-policy 1.2.0 by Ada`), empty when the
    /// component says nothing.
    pub fn describe(&self) -> String {
        let mut words: Vec<String> = self.name.iter().chain(&self.version).cloned().collect();
        if let Some(authors) = &self.authors {
            words.push(format!("by {authors}"));
        }
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_and_a_device_are_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("x.wasm");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let err = read_component_file(&fifo).expect_err("a FIFO");
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let zero = dir.path().join("zero.wasm");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        let err = read_component_file(&zero).expect_err("a device");
        assert!(err.to_string().contains("character device"), "{err}");
    }

    #[test]
    fn a_file_over_the_cap_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big.wasm");
        let f = std::fs::File::create(&big).expect("create");
        f.set_len(MAX_COMPONENT_BYTES + 1).expect("sparse file");
        let err = read_component_file(&big).expect_err("too big");
        assert!(
            err.to_string().contains("MiB a component may have"),
            "{err}"
        );
    }

    /// A component whose core code declares more functions than the budget is
    /// refused from its section header, before any function is read.
    #[test]
    fn a_component_over_the_function_budget_is_refused_before_compiling() {
        fn leb(mut v: u64, out: &mut Vec<u8>) {
            loop {
                let byte = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    out.push(byte);
                    return;
                }
                out.push(byte | 0x80);
            }
        }
        // A core module: magic, version 1, sections that declare
        // MAX_FUNCTIONS + 1 functions (none follow: the header is all it takes).
        let mut count = Vec::new();
        leb(MAX_FUNCTIONS + 1, &mut count);
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        for section in [3u8, 10] {
            // The function section (3) and the code section (10) agree on
            // the count; neither lists its entries.
            module.push(section);
            leb(count.len() as u64, &mut module);
            module.extend(&count);
        }
        // A component holding it as a core module section (id 1).
        let mut component = b"\0asm\x0d\0\x01\0".to_vec();
        component.push(1);
        leb(module.len() as u64, &mut component);
        component.extend(&module);
        let err = check_shape(&component).expect_err("over the budget");
        assert!(err.to_string().contains("functions"), "{err}");
    }

    #[test]
    fn a_core_module_or_a_foreign_world_is_refused_before_compiling() {
        let module = wat::parse_str("(module (func))").expect("wat");
        let err = check_shape(&module).expect_err("a module");
        assert!(err.to_string().contains("core Wasm module"), "{err}");
        let foreign = wat::parse_str(r#"(component (import "wasi:http/types@0.2.10" (instance)))"#)
            .expect("wat");
        let err = check_shape(&foreign).expect_err("foreign import");
        assert!(
            err.to_string()
                .contains("imports `wasi:http/types@0.2.10`, which the host does not provide"),
            "{err}"
        );
        assert!(err.to_string().contains("`-d http fetch-event`"), "{err}");
        let empty = wat::parse_str("(component)").expect("wat");
        let err = check_shape(&empty).expect_err("no world");
        assert!(err.to_string().contains("exports neither"), "{err}");
    }
}
