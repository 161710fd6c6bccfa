//! Helpers shared by the bundled plugins.
