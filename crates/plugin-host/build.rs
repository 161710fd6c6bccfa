//! Builds the bundled plugins (`plugins/*`) as WebAssembly components for
//! `wasm32-wasip2` and embeds them in the plugin host, as Wasmtime does for its test
//! programs. The plugins get their own target directory so the nested cargo never
//! waits on the lock the outer build holds.
//!
//! The same guest build makes the deliberately hostile plugins of
//! `tests/plugins/*` (never embedded): they land in
//! `<target>/wasm-plugins/test-plugins/`, which the tests find through the
//! `MFSCHED_TEST_PLUGINS` compile-time variable.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (embedded name, cargo package, artifact stem)
const PLUGINS: &[(&str, &str, &str)] = &[
    ("ga", "mfsched-plugin-ga", "mfsched_plugin_ga"),
    (
        "exhaustive",
        "mfsched-plugin-exhaustive",
        "mfsched_plugin_exhaustive",
    ),
    (
        "static-budget",
        "mfsched-plugin-static-budget",
        "mfsched_plugin_static_budget",
    ),
    (
        "utility",
        "mfsched-plugin-utility",
        "mfsched_plugin_utility",
    ),
    ("exact", "mfsched-plugin-exact", "mfsched_plugin_exact"),
];

/// Hostile plugins for the host's tests: (file name, cargo package, artifact stem).
const TEST_PLUGINS: &[(&str, &str, &str)] = &[
    (
        "spin",
        "mfsched-test-plugin-spin",
        "mfsched_test_plugin_spin",
    ),
    (
        "memory-bomb",
        "mfsched-test-plugin-memory-bomb",
        "mfsched_test_plugin_memory_bomb",
    ),
    (
        "trap",
        "mfsched-test-plugin-trap",
        "mfsched_test_plugin_trap",
    ),
    (
        "out-of-range",
        "mfsched-test-plugin-out-of-range",
        "mfsched_test_plugin_out_of_range",
    ),
    (
        "vram-infeasible",
        "mfsched-test-plugin-vram-infeasible",
        "mfsched_test_plugin_vram_infeasible",
    ),
    (
        "floor-breaker",
        "mfsched-test-plugin-floor-breaker",
        "mfsched_test_plugin_floor_breaker",
    ),
    (
        "hostile-decide",
        "mfsched-test-plugin-hostile-decide",
        "mfsched_test_plugin_hostile_decide",
    ),
    (
        "hostile-describe",
        "mfsched-test-plugin-hostile-describe",
        "mfsched_test_plugin_hostile_describe",
    ),
    (
        "wit-0-1-0",
        "mfsched-test-plugin-wit-0-1-0",
        "mfsched_test_plugin_wit_0_1_0",
    ),
    (
        "wit-0-2-0-utility",
        "mfsched-test-plugin-wit-0-2-0-utility",
        "mfsched_test_plugin_wit_0_2_0_utility",
    ),
    (
        "bad-terms",
        "mfsched-test-plugin-bad-terms",
        "mfsched_test_plugin_bad_terms",
    ),
    (
        "clock-reader",
        "mfsched-test-plugin-clock-reader",
        "mfsched_test_plugin_clock_reader",
    ),
    (
        "noisy",
        "mfsched-test-plugin-noisy",
        "mfsched_test_plugin_noisy",
    ),
    (
        "panic-name",
        "mfsched-test-plugin-panic-name",
        "mfsched_test_plugin_panic_name",
    ),
    (
        "fairness",
        "mfsched-test-plugin-fairness",
        "mfsched_test_plugin_fairness",
    ),
];

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir
        .ancestors()
        .nth(2)
        .expect("crates/plugin-host sits two levels below the workspace root")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    for watched in [
        "sdk",
        "rng",
        "plugins",
        "tests/plugins",
        "tests/fixtures/wit-0.1.0",
        "tests/fixtures/wit-0.2.0",
        "wit",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    encode_wit(&root.join("wit"), &out_dir);
    ensure_target();

    let target_dir = plugin_target_dir(&out_dir);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--release", "--target", TARGET, "--target-dir"])
        .arg(&target_dir);
    for (_, package, _) in PLUGINS.iter().chain(TEST_PLUGINS) {
        cmd.args(["-p", package]);
    }
    // Components without debug info: ~80 KB instead of ~2.5 MB, which is what
    // the host compiles on every (uncached) load.
    cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    // The outer build's flags and wrappers (clippy-driver, coverage, host RUSTFLAGS)
    // must not leak into the guest build.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run cargo to build the plugins: {e}")));
    if !status.success() {
        fail("building the Wasm plugins failed (see the cargo output above)");
    }

    let mut table = String::from(
        "/// The plugins built from `plugins/` and embedded as defaults: (name, component bytes).\n\
         pub const EMBEDDED_PLUGINS: &[(&str, &[u8])] = &[\n",
    );
    let built_dir = target_dir.join(TARGET).join("release");
    for (name, _, stem) in PLUGINS {
        let built = built_dir.join(format!("{stem}.wasm"));
        let dest = out_dir.join(format!("{name}.wasm"));
        fs::copy(&built, &dest).unwrap_or_else(|e| {
            fail(&format!(
                "plugin {name}: cannot copy {}: {e}",
                built.display()
            ))
        });
        table.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            dest.display().to_string()
        ));
    }
    table.push_str("];\n");
    fs::write(out_dir.join("embedded_plugins.rs"), table).expect("OUT_DIR is writable");

    let test_dir = target_dir.join("test-plugins");
    fs::create_dir_all(&test_dir)
        .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", test_dir.display())));
    for (name, _, stem) in TEST_PLUGINS {
        let built = built_dir.join(format!("{stem}.wasm"));
        let dest = test_dir.join(format!("{name}.wasm"));
        fs::copy(&built, &dest).unwrap_or_else(|e| {
            fail(&format!(
                "test plugin {name}: cannot copy {}: {e}",
                built.display()
            ))
        });
    }
    println!(
        "cargo:rustc-env=MFSCHED_TEST_PLUGINS={}",
        test_dir.display()
    );
}

/// Encodes the WIT package of `wit` as a component (a binary WIT package, what
/// registry tools such as wkg consume) into `OUT_DIR`, for the host to embed.
fn encode_wit(wit: &Path, out_dir: &Path) {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .unwrap_or_else(|e| fail(&format!("{}: {e:#}", wit.display())));
    let encoded = wit_component::encode(&resolve, package)
        .unwrap_or_else(|e| fail(&format!("cannot encode the WIT package: {e:#}")));
    fs::write(out_dir.join("mfsched-scheduler.wasm"), encoded).expect("OUT_DIR is writable");
}

/// `<target>/wasm-plugins`, beside the host's own profile directories, so debug
/// and release builds of the host share one guest build.
fn plugin_target_dir(out_dir: &Path) -> PathBuf {
    // OUT_DIR = <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out
    let mut dir = out_dir.to_path_buf();
    for _ in 0..4 {
        dir.pop();
    }
    if env::var("TARGET").ok() != env::var("HOST").ok() {
        dir.pop();
    }
    dir.join("wasm-plugins")
}

/// Adds the wasm32-wasip2 target with rustup when it is missing.
fn ensure_target() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let installed = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| dir.is_dir());
    if installed {
        return;
    }
    println!(
        "cargo:warning=adding the {TARGET} target with rustup (needed to build the bundled plugins)"
    );
    let added = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .is_ok_and(|s| s.success());
    if !added {
        fail(&format!(
            "the {TARGET} target is missing and `rustup target add {TARGET}` failed: install it, then build again"
        ));
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: mfsched: {msg}");
    std::process::exit(1)
}
