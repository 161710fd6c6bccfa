//! Builds the deliberately hostile test plugins of `tests/plugins/*` for
//! `wasm32-wasip2` (the one guest build routine, plugin-host's guests.rs) into
//! `<target>/wasm-plugins/test-plugins/`, and hands the directory to the crate as
//! `MFSCHED_TEST_PLUGINS`. Only tests depend on this crate, so no product build
//! compiles a hostile guest (Wasmtime's test-programs pattern).

/// (file name, cargo package, artifact stem)
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

include!("../plugin-host/guests.rs");

fn main() {
    let root = workspace_root();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    rerun_if_changed(
        &root,
        &[
            "sdk",
            "rng",
            "tests/plugins",
            "tests/fixtures/wit-0.1.0",
            "tests/fixtures/wit-0.2.0",
            "wit",
            "Cargo.toml",
            "Cargo.lock",
        ],
    );

    let built_dir = build_guests(
        &out_dir,
        TEST_PLUGINS.iter().map(|(_, package, _)| *package),
    );
    let test_dir = plugin_target_dir(&out_dir).join("test-plugins");
    fs::create_dir_all(&test_dir)
        .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", test_dir.display())));
    for (name, _, stem) in TEST_PLUGINS {
        copy_component(&built_dir, stem, &test_dir.join(format!("{name}.wasm")));
    }
    println!(
        "cargo:rustc-env=MFSCHED_TEST_PLUGINS={}",
        test_dir.display()
    );
}
