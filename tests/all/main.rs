//! Every integration test in one binary: the host is linked once, not once per
//! file. `cargo test --test all MODULE` runs one group.
//!
//! - [`bounds`]: hostile inputs (issue 26): refused in one line or recovered, bounded.
//! - [`cli`]: the `mfsched` binary as a user runs it.
//! - [`dashboard`]: the daemon's dashboard and the HTML report in headless Chromium.
//! - [`daemon_soak`]: the decision loop under load, in process.
//! - [`exact`]: the exact policy against exhaustive search.
//! - [`fuzz`]: a bounded, seeded fuzz pass over the scenario, CSV, bundle and log readers.
//! - [`gavel`]: public co-location measurements, converted and cross-validated.
//! - [`gpu_proxy`]: GPU proxy workloads profiled live through the process actuator.
//! - [`host_sampler`]: the host sampler on this machine's real `/proc`.
//! - [`hostile`]: hostile components and files against the sandbox promise.
//! - [`layering`]: no product crate depends on the lab, nor anything but the
//!   tests on the hostile test plugins.
//! - [`map`]: ARCHITECTURE.md names every source file of the crates.
//! - [`operators`]: what the daemon logs, refuses at start-up, and shadows at run time.
//! - [`pipeline`]: the same invalid answers rejected alike by decide, ab and the daemon.
//! - [`plugin_host`]: the plugin host against real (and hostile) components.
//! - [`production`]: sim serve, a real Prometheus and the daemon, end to end.
//! - [`real_servers`]: the v2-repository and process actuators on real MLServers.
//! - [`thirdparty`]: third-party policy development; the slow builds are
//!   `#[ignore]`d and run by `.ci/run` (`cargo test --test all thirdparty -- --ignored`).

mod bounds;
mod cli;
mod common;
mod daemon_soak;
mod dashboard;
mod exact;
mod fuzz;
mod gavel;
mod gpu_proxy;
mod host_sampler;
mod hostile;
mod layering;
mod map;
mod operators;
mod pipeline;
mod plugin_host;
mod production;
mod real_servers;
mod thirdparty;
