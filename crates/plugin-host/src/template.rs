//! `mfsched plugins new`: a standalone Rust policy crate from the files of
//! `templates/policy/` and the WIT package of `wit/`, both embedded in the
//! binary so the command works wherever the binary is.

use crate::bindings::VERSION;
use anyhow::{Context as _, Result, bail};
use mfsched_core::fsutil::write_atomically;
use std::path::{Path, PathBuf};

/// (path in the new crate, template text). `{{name}}`, `{{artifact}}` and
/// `{{wit_version}}` are filled in.
const FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../templates/policy/Cargo.toml.tmpl"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../templates/policy/src/lib.rs"),
    ),
    (
        "README.md",
        include_str!("../../../templates/policy/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/policy/gitignore"),
    ),
    (
        "wit/scheduler.wit",
        include_str!("../../../wit/scheduler.wit"),
    ),
];

/// Checks `name` is a usable crate name: a lowercase ASCII letter, then
/// lowercase letters, digits, `-` or `_`, at most 64 characters.
pub fn check_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let good_start = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let good_rest =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !good_start || !good_rest || name.len() > 64 {
        bail!(
            "'{name}' is not a usable crate name: start with a lowercase letter, then use lowercase letters, digits, '-' or '_' (at most 64 characters)"
        );
    }
    Ok(())
}

/// The file stem cargo gives the built component: the crate name with `_` for `-`.
pub fn artifact(name: &str) -> String {
    name.replace('-', "_")
}

/// Where `cargo build --target wasm32-wasip2 --release` puts the component,
/// relative to the crate.
pub fn component_path(name: &str) -> PathBuf {
    Path::new("target/wasm32-wasip2/release").join(format!("{}.wasm", artifact(name)))
}

/// Writes the policy crate `name` into `dir`, which must not exist or be
/// empty. Returns the files written.
pub fn write_policy(name: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    check_name(name)?;
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir)
            .with_context(|| format!("{} exists and is not a readable directory", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} already exists and is not empty: choose another --dir or remove it",
                dir.display()
            );
        }
    }
    let mut written = Vec::with_capacity(FILES.len());
    for (relative, text) in FILES {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let filled = text
            .replace("{{name}}", name)
            .replace("{{artifact}}", &artifact(name))
            .replace("{{wit_version}}", VERSION);
        write_atomically(&path, filled.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_crate_rules() {
        for good in ["greedy", "my-policy", "p2_fast"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "2fast", "My", "a b", "a/b", "é"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(artifact("my-policy"), "my_policy");
    }

    #[test]
    fn the_crate_is_filled_in_and_carries_the_hosts_wit() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().join("my-policy");
        let files = write_policy("my-policy", &root).expect("writes the crate");
        assert_eq!(files.len(), FILES.len());
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("written");
        assert!(manifest.contains("name = \"my-policy\""), "{manifest}");
        assert!(manifest.contains("[workspace]"), "{manifest}");
        let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("written");
        assert!(!lib.contains("{{"), "a placeholder was left: {lib}");
        let wit = std::fs::read_to_string(root.join("wit/scheduler.wit")).expect("written");
        assert!(wit.contains(&format!("package mfsched:scheduler@{VERSION};")));
        let again = write_policy("my-policy", &root).expect_err("the directory is not empty");
        assert!(again.to_string().contains("not empty"), "{again}");
    }
}
