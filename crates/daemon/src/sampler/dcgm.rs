//! The GPU state from a DCGM exporter's `/metrics` page (`sampler.kind =
//! "dcgm"`, and `profile --live --gpu-metrics`): the readings a cluster's
//! monitoring already takes, including the profiling fields NVML does not
//! give. One parser for both, so a bundle profiled from the page is served
//! from the same fields.
//!
//! The page is polled in the background (a slow or hung exporter never holds
//! a tick) and a tick takes the newest reading younger than `stale_ms`; past
//! that the sample fails, which the tick records as unmeasured (never as 0).

use anyhow::{Context, Result, bail};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

use super::{Sample, Sampler};
use crate::config::DcgmSamplerConfig;
use crate::load::{HttpClient, get, http_client, sample_sums};
use mfsched_core::{Problem, WorkloadLevel};

/// One reading of the page for one card.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcgmReading {
    /// `DCGM_FI_DEV_FB_USED`, MiB.
    pub vram_used_mib: f64,
    /// `DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE`, where the page has both.
    pub vram_total_mib: Option<f64>,
    /// `DCGM_FI_PROF_SM_ACTIVE` (a profiling field, a fraction) where the
    /// exporter serves it, else `DCGM_FI_DEV_GPU_UTIL` (percent) as a fraction.
    pub utilization: f64,
    /// `DCGM_FI_PROF_DRAM_ACTIVE` (a profiling field, a fraction) where the
    /// exporter serves it, else `DCGM_FI_DEV_MEM_COPY_UTIL` (percent) as a
    /// fraction; `None` where it serves neither.
    pub contention: Option<f64>,
}

/// Reads card `device` (the `gpu` label) off a DCGM exporter's page.
pub fn parse_page(text: &str, device: &str) -> Result<DcgmReading> {
    // One parse of the page for every field.
    let [used, free, sm_active, gpu_util, dram_active, copy_util] = sample_sums(
        text,
        [
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_PROF_SM_ACTIVE",
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "DCGM_FI_DEV_MEM_COPY_UTIL",
        ],
        "gpu",
        device,
    )?;
    let vram_used_mib = used?;
    let vram_total_mib = free.ok().map(|free| vram_used_mib + free);
    // SM active (a profiling field: the cycles an SM had a warp resident,
    // averaged over the SMs) where the exporter serves it: two models whose
    // small kernels keep some kernel running all the time read 100 % GPU
    // utilisation while leaving SMs idle, which SM active shows.
    let utilization = sm_active.or_else(|_| gpu_util.map(|p| p / 100.0))?;
    let contention = dram_active
        .or_else(|_| copy_util.map(|p| p / 100.0))
        .ok()
        .map(|c| c.clamp(0.0, 1.0));
    if vram_used_mib < 0.0 {
        bail!("DCGM_FI_DEV_FB_USED{{gpu=\"{device}\"}} is negative ({vram_used_mib})");
    }
    Ok(DcgmReading {
        vram_used_mib,
        vram_total_mib,
        utilization: utilization.clamp(0.0, 1.0),
        contention,
    })
}

/// One GET of the page, bounded in time and size, parsed for `device`.
pub async fn read_page(
    client: &HttpClient,
    uri: &hyper::Uri,
    device: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<DcgmReading> {
    let body = get(client, uri, timeout, max_bytes).await?;
    let text = std::str::from_utf8(&body).context("the GPU metrics page is not UTF-8")?;
    parse_page(text, device)
}

/// The newest reading and the last failure, as the poller leaves them.
#[derive(Debug, Default)]
struct Latest {
    reading: Option<(DcgmReading, Instant)>,
    error: Option<String>,
}

/// `sampler.kind = "dcgm"`.
#[derive(Debug)]
pub struct DcgmSampler {
    latest: Arc<Mutex<Latest>>,
    stale: Duration,
    url: String,
    poller: JoinHandle<()>,
}

impl DcgmSampler {
    /// Starts polling `config.url` for card `device`. Must be called inside tokio.
    pub fn start(config: &DcgmSamplerConfig, device: u32) -> Result<Self> {
        let uri: hyper::Uri = config.url.parse().context("sampler.dcgm.url")?;
        let runtime = tokio::runtime::Handle::try_current()
            .context("the DCGM sampler polls in the background and needs the async runtime")?;
        let latest = Arc::new(Mutex::new(Latest::default()));
        let poller = runtime.spawn(poll(
            uri,
            device.to_string(),
            Duration::from_millis(config.poll_ms),
            Duration::from_millis(config.timeout_ms),
            config.max_bytes,
            Arc::clone(&latest),
        ));
        Ok(Self {
            latest,
            stale: Duration::from_millis(config.stale_ms),
            url: config.url.clone(),
            poller,
        })
    }
}

impl Drop for DcgmSampler {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

impl Sampler for DcgmSampler {
    fn sample(
        &mut self,
        _problem: &Problem,
        _applied: &[u32],
        _workload: WorkloadLevel,
    ) -> Result<Sample> {
        let latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = latest
            .reading
            .filter(|(_, at)| at.elapsed() <= self.stale)
            .map(|(r, _)| r);
        let Some(r) = fresh else {
            bail!(
                "no reading of {} within sampler.dcgm.stale_ms ({} ms){}",
                self.url,
                self.stale.as_millis(),
                latest
                    .error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            );
        };
        Ok(Sample {
            source: "dcgm".into(),
            vram_used_mib: Some(r.vram_used_mib),
            vram_total_mib: r.vram_total_mib,
            utilization: Some(r.utilization),
            contention: r.contention,
            processes: Vec::new(),
        })
    }
}

/// Reads the page every `every`, forever (aborted with the sampler). A
/// failure is logged once until a reading succeeds again.
async fn poll(
    uri: hyper::Uri,
    device: String,
    every: Duration,
    timeout: Duration,
    max_bytes: usize,
    latest: Arc<Mutex<Latest>>,
) {
    let client = http_client();
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut failing = false;
    loop {
        interval.tick().await;
        let result = read_page(&client, &uri, &device, timeout, max_bytes).await;
        let mut l = latest.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(reading) => {
                if std::mem::replace(&mut failing, false) {
                    tracing::info!("sampler: {uri} reads again");
                }
                l.reading = Some((reading, Instant::now()));
                l.error = None;
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(
                        "sampler: {e:#}; the last reading stands in while it is recent, then the tick's state is unmeasured"
                    );
                }
                l.error = Some(format!("{e:#}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n\
        # TYPE DCGM_FI_DEV_FB_USED gauge\n\
        DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\"} 5120\n\
        DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"GPU-b\"} 99\n\
        # TYPE DCGM_FI_DEV_FB_FREE gauge\n\
        DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-a\"} 11264\n\
        # TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
        DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 87\n\
        DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\"} 3\n\
        # TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge\n\
        DCGM_FI_DEV_MEM_COPY_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 40\n";

    #[test]
    fn a_page_gives_the_cards_memory_utilisation_and_memory_copy_share() {
        let r = parse_page(PAGE, "0").expect("a value");
        assert_eq!(r.vram_used_mib, 5120.0);
        assert_eq!(r.vram_total_mib, Some(16384.0));
        assert!((r.utilization - 0.87).abs() < 1e-12);
        assert_eq!(r.contention, Some(0.4));
        // The other card: no free memory, no copy share on the page for it.
        let other = parse_page(PAGE, "1").expect("a value");
        assert_eq!((other.vram_total_mib, other.contention), (None, None));
    }

    #[test]
    fn the_profiling_fields_are_preferred_where_served_and_clamped() {
        let page = format!(
            "{PAGE}# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge\n\
             DCGM_FI_PROF_DRAM_ACTIVE{{gpu=\"0\",UUID=\"GPU-a\"}} 1.25\n\
             # TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n\
             DCGM_FI_PROF_SM_ACTIVE{{gpu=\"0\",UUID=\"GPU-a\"}} 0.31\n"
        );
        let r = parse_page(&page, "0").expect("a value");
        assert_eq!((r.utilization, r.contention), (0.31, Some(1.0)));
        // Card 1 has neither profiling field: the device fields stand in.
        assert!((parse_page(&page, "1").expect("a value").utilization - 0.03).abs() < 1e-12);
    }

    #[test]
    fn a_page_without_the_card_or_with_broken_values_names_what_is_missing() {
        let e = parse_page(PAGE, "7").expect_err("an error").to_string();
        assert!(
            e.contains("DCGM_FI_DEV_FB_USED") && e.contains("\"7\""),
            "{e}"
        );
        let nan = PAGE.replace("} 87", "} NaN");
        let e = parse_page(&nan, "0").expect_err("an error").to_string();
        assert!(e.contains("DCGM_FI_DEV_GPU_UTIL"), "{e}");
        let negative = PAGE.replace("} 5120", "} -5");
        assert!(parse_page(&negative, "0").is_err());
        assert!(parse_page("not a page {", "0").is_err());
    }

    #[tokio::test]
    async fn an_exporter_that_never_answers_fails_the_sample_naming_it() {
        // A port nothing listens on: every read fails, so no reading is fresh.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a value")
            .port();
        let config = DcgmSamplerConfig {
            url: format!("http://127.0.0.1:{port}/metrics"),
            poll_ms: 10,
            timeout_ms: 50,
            stale_ms: 1000,
            max_bytes: 1 << 20,
        };
        let mut sampler = DcgmSampler::start(&config, 0).expect("a value");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let problem = mfsched_core::load_scenario("paper-n2")
            .expect("a value")
            .problem;
        let e = sampler
            .sample(&problem, &problem.current, WorkloadLevel::Low)
            .expect_err("an error")
            .to_string();
        assert!(e.contains(&config.url) && e.contains("stale_ms"), "{e}");
    }
}
