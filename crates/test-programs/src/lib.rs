//! The deliberately hostile components of `tests/plugins` (spin, trap, memory
//! bomb, wrong WIT versions, …), built by this crate's build script for the
//! integration tests: `crates/mfsched` takes this crate as a dev-dependency only,
//! so a product build compiles none of them.

/// Where the build put the hostile components, one `<name>.wasm` each (never
/// embedded). The guest target directory it sits in also holds, in
/// `../wasm32-wasip2/release/`, the bundled components plugin-host's build made,
/// which tests load as files.
pub const TEST_PLUGINS_DIR: &str = env!("MFSCHED_TEST_PLUGINS");
