// Building workspace guest crates for wasm32-wasip2, in a nested cargo: the one
// routine of the two build scripts that make guests, `include!`d by both
// (crates/plugin-host/build.rs: the bundled plugins, embedded;
// crates/test-programs/build.rs: the hostile test plugins, never in the product).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

/// The workspace root: both guest-building crates sit in `crates/`.
fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    manifest_dir
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels below the workspace root")
        .to_path_buf()
}

/// Reruns the build script when anything under these workspace paths changes.
fn rerun_if_changed(root: &Path, watched: &[&str]) {
    for path in watched {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
}

/// Builds `packages` for wasm32-wasip2 (release, no debug info) and returns the
/// directory their components land in.
///
/// The guests get their own target directory, `<target>/wasm-plugins`, so the
/// nested cargo never waits on the lock the outer build holds; both build scripts
/// share it (and the guest dependencies built in it), cargo's lock on it
/// serialising them when they run at once.
fn build_guests<'a>(out_dir: &Path, packages: impl IntoIterator<Item = &'a str>) -> PathBuf {
    ensure_target();
    let target_dir = plugin_target_dir(out_dir);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--release", "--target", TARGET, "--target-dir"])
        .arg(&target_dir);
    for package in packages {
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
    target_dir.join(TARGET).join("release")
}

/// Copies the component `<stem>.wasm` the guest build made in `built_dir` to `dest`.
fn copy_component(built_dir: &Path, stem: &str, dest: &Path) {
    let built = built_dir.join(format!("{stem}.wasm"));
    fs::copy(&built, dest).unwrap_or_else(|e| {
        fail(&format!(
            "cannot copy {} to {}: {e}",
            built.display(),
            dest.display()
        ))
    });
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
        "cargo:warning=adding the {TARGET} target with rustup (needed to build the Wasm plugins)"
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
