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
