//! Placeholder until the plugin host lands: proves the wasm32-wasip2 component build.
