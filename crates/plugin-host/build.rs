//! Builds the bundled plugins (`plugins/*`) as WebAssembly components for
//! `wasm32-wasip2` (guests.rs) and embeds them in the plugin host, and encodes the
//! WIT package for `plugins wit`. The hostile test plugins of `tests/plugins/*` are
//! not the product's: crates/test-programs builds them, for the tests only.

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

include!("guests.rs");

fn main() {
    let root = workspace_root();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    rerun_if_changed(
        &root,
        &["sdk", "rng", "plugins", "wit", "Cargo.toml", "Cargo.lock"],
    );

    encode_wit(&root.join("wit"), &out_dir);
    let built_dir = build_guests(&out_dir, PLUGINS.iter().map(|(_, package, _)| *package));

    let mut table = String::from(
        "/// The plugins built from `plugins/` and embedded as defaults: (name, component bytes).\n\
         pub const EMBEDDED_PLUGINS: &[(&str, &[u8])] = &[\n",
    );
    for (name, _, stem) in PLUGINS {
        let dest = out_dir.join(format!("{name}.wasm"));
        copy_component(&built_dir, stem, &dest);
        table.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            dest.display().to_string()
        ));
    }
    table.push_str("];\n");
    fs::write(out_dir.join("embedded_plugins.rs"), table).expect("OUT_DIR is writable");
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
