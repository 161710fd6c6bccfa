//! `mfsched plugins new`: a standalone Rust policy crate from the files of
//! `templates/policy/` (or, with `--utility`, a utility crate from
//! `templates/utility/`), embedded in the binary so the command works wherever
//! the binary is. The crate depends on the SDK of its world (`sdk/`,
//! `mfsched-sdk`, or `sdk/utility/`, `mfsched-utility-sdk`), which carries the
//! WIT bindings: the new crate copies no WIT and runs no wit-bindgen of its own.

use crate::bindings::VERSION;
use anyhow::{Context as _, Result, bail};
use mfsched_core::write_atomically;
use std::path::{Path, PathBuf};

/// What `plugins new` writes: a policy or a utility crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Policy,
    Utility,
}

impl Kind {
    /// (path in the new crate, template text). `{{name}}`, `{{artifact}}`,
    /// `{{wit_version}}` and `{{sdk}}` are filled in.
    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Kind::Policy => POLICY_FILES,
            Kind::Utility => UTILITY_FILES,
        }
    }

    /// The SDK's directory in a checkout, from the workspace root.
    fn sdk_dir(self) -> &'static str {
        match self {
            Kind::Policy => "sdk",
            Kind::Utility => "sdk/utility",
        }
    }
}

const POLICY_FILES: &[(&str, &str)] = &[
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
];

const UTILITY_FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../templates/utility/Cargo.toml.tmpl"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../templates/utility/src/lib.rs"),
    ),
    (
        "README.md",
        include_str!("../../../templates/utility/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/utility/gitignore"),
    ),
];

/// Where the new crate gets the SDK from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sdk {
    /// A checkout's `sdk/` directory.
    Path(PathBuf),
    /// The repository, by git.
    Git(String),
}

impl Sdk {
    /// The SDK of `kind` in the checkout this binary was built from when it is
    /// still there (an author working from a clone), else the repository by
    /// git (cargo finds the package by its name there).
    pub fn default_source(kind: Kind) -> Self {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(kind.sdk_dir());
        match std::fs::canonicalize(&checkout) {
            Ok(dir) if dir.join("Cargo.toml").is_file() => Sdk::Path(dir),
            _ => Sdk::Git(env!("CARGO_PKG_REPOSITORY").to_owned()),
        }
    }

    /// The dependency as an inline TOML table.
    fn manifest_entry(&self) -> Result<String> {
        let (key, value) = match self {
            Sdk::Path(dir) => (
                "path",
                dir.to_str()
                    .with_context(|| format!("the SDK path {} is not UTF-8", dir.display()))?,
            ),
            Sdk::Git(url) => ("git", url.as_str()),
        };
        let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
        Ok(format!("{{ {key} = \"{quoted}\" }}"))
    }
}

impl std::fmt::Display for Sdk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sdk::Path(dir) => write!(f, "{}", dir.display()),
            Sdk::Git(url) => write!(f, "git {url}"),
        }
    }
}

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

/// Writes the `kind` crate `name`, depending on `sdk`, into `dir`, which must
/// not exist or be empty. Returns the files written.
pub fn write(kind: Kind, name: &str, dir: &Path, sdk: &Sdk) -> Result<Vec<PathBuf>> {
    check_name(name)?;
    let sdk_entry = sdk.manifest_entry()?;
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
    let files = kind.files();
    let mut written = Vec::with_capacity(files.len());
    for (relative, text) in files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let filled = text
            .replace("{{name}}", name)
            .replace("{{artifact}}", &artifact(name))
            .replace("{{wit_version}}", VERSION)
            .replace("{{sdk}}", &sdk_entry);
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
    fn the_crate_is_filled_in_and_depends_on_the_sdk() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().join("my-policy");
        let sdk = Sdk::Path(PathBuf::from("/src/mf \"sched\"/sdk"));
        let files = write(Kind::Policy, "my-policy", &root, &sdk).expect("writes the crate");
        assert_eq!(files.len(), POLICY_FILES.len());
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("written");
        assert!(manifest.contains("name = \"my-policy\""), "{manifest}");
        assert!(manifest.contains("[workspace]"), "{manifest}");
        assert!(
            manifest.contains(r#"mfsched-sdk = { path = "/src/mf \"sched\"/sdk" }"#),
            "{manifest}"
        );
        assert!(!manifest.contains("wit-bindgen ="), "{manifest}");
        let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("written");
        assert!(!lib.contains("{{"), "a placeholder was left: {lib}");
        assert!(lib.contains("mfsched_sdk::export_policy!"), "{lib}");
        let again =
            write(Kind::Policy, "my-policy", &root, &sdk).expect_err("the directory is not empty");
        assert!(again.to_string().contains("not empty"), "{again}");
    }

    #[test]
    fn a_utility_crate_depends_on_the_utility_sdk() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().join("fair-share");
        let sdk = Sdk::Path(PathBuf::from("/src/sdk/utility"));
        write(Kind::Utility, "fair-share", &root, &sdk).expect("writes the crate");
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("written");
        assert!(
            manifest.contains(r#"mfsched-utility-sdk = { path = "/src/sdk/utility" }"#),
            "{manifest}"
        );
        let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("written");
        assert!(!lib.contains("{{"), "a placeholder was left: {lib}");
        assert!(
            lib.contains("mfsched_utility_sdk::export_additive!"),
            "{lib}"
        );
        let Sdk::Path(checkout) = Sdk::default_source(Kind::Utility) else {
            panic!("the tests run in a checkout");
        };
        let manifest = std::fs::read_to_string(checkout.join("Cargo.toml")).expect("the SDK");
        assert!(
            manifest.contains("name = \"mfsched-utility-sdk\""),
            "{manifest}"
        );
    }

    #[test]
    fn the_default_sdk_is_this_checkouts() {
        let Sdk::Path(dir) = Sdk::default_source(Kind::Policy) else {
            panic!("the tests run in a checkout");
        };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("the SDK's manifest");
        assert!(manifest.contains("name = \"mfsched-sdk\""), "{manifest}");
    }
}
