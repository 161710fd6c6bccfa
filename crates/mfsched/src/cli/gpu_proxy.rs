use anyhow::{Context, Result};
use mfsched_lab::{GpuProxy, ProxyFamily, ProxyPrecision, ProxyShape};
use std::net::SocketAddr;
use std::path::PathBuf;

use super::choices;

/// A GPU proxy workload: a wgpu compute kernel of tunable intensity served as
/// a model server (`/metrics` counters, readiness), for co-location profiles
/// on a real card (docs/real-servers.md, "GPU proxy workloads"). Runs until
/// SIGINT/SIGTERM.
#[derive(Debug, clap::Args)]
pub struct GpuProxyArgs {
    /// The model it stands for: the `model` label of its counters and the
    /// name in its readiness path (/v2/models/NAME/ready).
    #[arg(long)]
    model: String,
    /// The kernel.
    #[arg(long, value_parser = choices::proxy_family())]
    family: ProxyFamily,
    /// Items per dispatch: 1 MiB chunks (memory; the working set), or groups
    /// of 64 vec4 lanes (compute).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    batch: u32,
    /// Most workgroups of 64 invocations a dispatch runs: the proxy's share of
    /// the device (capped by the work and the device's limit).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65_535))]
    workgroups: u32,
    /// The kernels' element type; f16 only on an adapter with SHADER_F16.
    #[arg(long, default_value = "f32", value_parser = choices::proxy_precision())]
    precision: ProxyPrecision,
    /// compute: dependent steps of 16 FMAs per lane and dispatch.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: u32,
    /// Where /metrics and readiness are served (port 0: any free port, printed).
    #[arg(long)]
    listen: SocketAddr,
    /// A file holding the offered rate, dispatches per second, re-read every
    /// second; absent or 0: as fast as the device allows (closed loop).
    #[arg(long)]
    rate_file: Option<PathBuf>,
}

pub fn run(args: GpuProxyArgs) -> Result<()> {
    let shape = ProxyShape {
        family: args.family,
        precision: args.precision,
        batch: args.batch,
        workgroups: args.workgroups,
        iterations: args.iterations,
    };
    let proxy = GpuProxy::new(&args.model, shape, args.rate_file)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let bound = listener.local_addr().context("listener address")?;
        println!("{}", proxy.describe());
        println!("listening on http://{bound}/metrics");
        proxy
            .serve(listener, mfsched_daemon::wait_for_signal())
            .await
    })
}
