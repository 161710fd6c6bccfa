//! The product never depends on the lab: core, surrogate, plugin-host, daemon and
//! the guest SDK run deployments; the simulator, profiling runs, training,
//! studies, evaluation and benches stay in `mfsched-lab`, which only the binary
//! (the composition root) may depend on. The hostile test plugins
//! (`mfsched-test-programs`) are a dev-dependency only.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const PRODUCT: &[&str] = &[
    "mfsched-core",
    "mfsched-surrogate",
    "mfsched-plugin-host",
    "mfsched-daemon",
    "mfsched-sdk",
    "mfsched-rng",
    "mfsched-nn",
];
const LAB: &str = "mfsched-lab";
const TEST_PROGRAMS: &str = "mfsched-test-programs";

/// The workspace's packages, from `cargo metadata`: what cargo itself resolves,
/// not a reading of the manifests.
fn workspace_packages() -> Vec<serde_json::Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    doc["packages"].as_array().expect("packages").clone()
}

/// Every workspace package's workspace dependencies (normal, dev and build).
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let packages = workspace_packages();
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(*d))
                .map(str::to_owned)
                .collect();
            (p["name"].as_str().expect("name").to_owned(), deps)
        })
        .collect()
}

#[test]
fn no_product_crate_depends_on_the_lab() {
    let graph = workspace_graph();
    for product in PRODUCT {
        let mut seen = BTreeSet::new();
        let mut stack = vec![(*product).to_owned()];
        while let Some(crate_name) = stack.pop() {
            if !seen.insert(crate_name.clone()) {
                continue;
            }
            let deps = graph
                .get(&crate_name)
                .unwrap_or_else(|| panic!("{crate_name} is a workspace package"));
            assert!(
                !deps.contains(LAB),
                "{product} depends on {LAB} (through {crate_name}): product crates must not"
            );
            stack.extend(deps.iter().cloned());
        }
    }
    // The lab exists and the binary composes it: the check is not vacuous.
    assert!(graph["mfsched"].contains(LAB));
}

/// The hostile test plugins are the tests' alone: the crate that builds them is
/// only ever a dev-dependency, so no build of the product compiles one.
#[test]
fn the_test_programs_are_only_a_dev_dependency() {
    let mut dependents = Vec::new();
    for package in workspace_packages() {
        for dep in package["dependencies"].as_array().expect("dependencies") {
            if dep["name"] == TEST_PROGRAMS {
                let name = package["name"].as_str().expect("name");
                assert_eq!(
                    dep["kind"], "dev",
                    "{name} depends on {TEST_PROGRAMS} beyond its tests"
                );
                dependents.push(name.to_owned());
            }
        }
    }
    // The tests do use it: the check is not vacuous.
    assert_eq!(dependents, ["mfsched"]);
}

/// Every library crate with a façade: the product's and the lab.
const FACADE_CRATES: &[&str] = &["core", "surrogate", "plugin-host", "daemon", "lab"];

fn crate_dir(name: &str) -> std::path::PathBuf {
    crate::common::workspace_root().join("crates").join(name)
}

/// A crate root's module declarations: `(name, public)`.
fn modules(name: &str) -> Vec<(String, bool)> {
    let lib = std::fs::read_to_string(crate_dir(name).join("src/lib.rs")).expect("lib.rs reads");
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let (rest, public) = match l.strip_prefix("pub mod ") {
                Some(rest) => (rest, true),
                None => (l.strip_prefix("mod ")?, false),
            };
            Some((rest.strip_suffix(';')?.trim().to_owned(), public))
        })
        .collect()
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source directory reads") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_library_crate_keeps_its_modules_private() {
    for name in FACADE_CRATES {
        let public: Vec<String> = modules(name)
            .into_iter()
            .filter_map(|(m, public)| public.then_some(m))
            .collect();
        assert!(
            public.is_empty(),
            "crates/{name} has a façade (its root re-exports what others may name) \
             but declares public modules: {public:?}"
        );
    }
}

/// The lab (and the binary, the other consumer) names a façade crate only through
/// its root: `mfsched_daemon::Sampler`, never `mfsched_daemon::sampler::Sampler`
/// (a namespace the root re-exports, such as the plugin host's generated `wit`
/// types, is the façade's own). The compiler already refuses a private module's
/// path in code; this also catches one in a doc comment, where rustdoc only warns.
#[test]
fn the_lab_names_only_what_a_facade_re_exports() {
    let mut files = Vec::new();
    rust_files(&crate_dir("lab").join("src"), &mut files);
    rust_files(&crate_dir("mfsched").join("src"), &mut files);
    assert!(
        files.len() > 20,
        "the lab's and the binary's sources are found"
    );
    let mut found = Vec::new();
    for name in FACADE_CRATES {
        let private: Vec<String> = modules(name).into_iter().map(|(m, _)| m).collect();
        assert!(
            !private.is_empty(),
            "crates/{name} declares its modules in lib.rs"
        );
        let prefix = format!("mfsched_{}::", name.replace('-', "_"));
        for file in &files {
            let text = std::fs::read_to_string(file).expect("source reads");
            for (line_no, line) in text.lines().enumerate() {
                for (at, _) in line.match_indices(&prefix) {
                    let rest = &line[at + prefix.len()..];
                    let segment: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if rest[segment.len()..].starts_with("::") && private.contains(&segment) {
                        found.push(format!(
                            "{}:{}: {prefix}{segment}::…",
                            file.display(),
                            line_no + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "paths below a façade crate's root:\n{}",
        found.join("\n")
    );
}
