//! The Wasmtime engine the plugins run on, its limits and its linkers.
//!
//! One engine per process: component model on, async support off (each host
//! call is ~3.5x cheaper), epoch interruption for the per-call deadline (a
//! ticker thread advances the epoch), the on-disk compilation cache when it can
//! be opened. WASI is linked because `wasm32-wasip2` guests import it even when
//! they do no I/O; each store gets a locked-down context (see `context`).

use super::bindings::{policy::Policy, utility::Utility};
use super::context::{PolicyCtx, UtilityCtx};
use super::failure::describe;
use anyhow::{Context as _, Result, anyhow};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the ticker advances the epoch: the deadline's resolution.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Epoch ticks that cover `d` (rounded up, plus the tick in progress).
pub fn ticks_for(d: Duration) -> u64 {
    let ticks = d.as_nanos().div_ceil(EPOCH_TICK.as_nanos());
    u64::try_from(ticks)
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// Epoch ticks from now until `at` (at least one).
pub fn ticks_until(at: std::time::Instant) -> u64 {
    ticks_for(at.saturating_duration_since(std::time::Instant::now()))
}

/// Arms `store` to trap at `deadline_at`. The epoch only says when to look:
/// on each epoch deadline the wall clock decides, so a lagging or catching-up
/// ticker can make the trap late by a tick but never early.
pub fn arm_deadline<T: 'static>(store: &mut wasmtime::Store<T>, deadline_at: std::time::Instant) {
    store.set_epoch_deadline(ticks_until(deadline_at));
    store.epoch_deadline_callback(move |_| {
        let left = deadline_at.saturating_duration_since(std::time::Instant::now());
        Ok(if left.is_zero() {
            wasmtime::UpdateDeadline::Interrupt
        } else {
            wasmtime::UpdateDeadline::Continue(ticks_for(left))
        })
    });
}

/// Limits applied to every plugin call.
#[derive(Debug, Clone)]
pub struct PluginLimits {
    /// Wall-clock budget of one call (a whole `decide`, or one `score`).
    pub deadline: Duration,
    /// Largest linear memory a plugin instance may grow to, bytes.
    pub memory_bytes: usize,
    /// The most candidates one `predict` or `evaluate` call may ask about: the
    /// host's work for a call is bounded by this as well as by the deadline.
    pub max_candidates_per_call: usize,
}

/// The default cap on candidates per host call: 16x paper-n5's feasible set,
/// far above what any bundled scenario needs.
pub const MAX_CANDIDATES_PER_CALL: usize = 1 << 20;

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(2),
            memory_bytes: 256 << 20,
            max_candidates_per_call: MAX_CANDIDATES_PER_CALL,
        }
    }
}

/// Where compiled code is cached between runs.
#[derive(Debug, Clone, Default)]
pub enum CompileCache {
    /// Wasmtime's default cache directory (per user).
    #[default]
    Default,
    /// This absolute directory.
    Dir(PathBuf),
    /// No cache: every load compiles.
    Off,
}

/// Instances alive at once: a policy call holds two (the policy and its
/// utility); the daemon asks the active policy and its shadows at once, and a
/// hot reload self-checks beside them. An instantiation past the pool fails
/// that call, counted like any other plugin failure.
const POOL_INSTANCES: u32 = 128;

/// Every instance comes from a pool of preallocated slots rather than fresh
/// mappings. A policy is instantiated afresh for every call (no state carries
/// over from one call to the next); with the on-demand allocator, mapping,
/// faulting in and unmapping those instances' memory took about a quarter of
/// an `exact` decision (0.37 → 0.28 ms median with the pool, `bench
/// policies`). A slot is reset between instances as a fresh one would be
/// (see [`KEEP_RESIDENT_BYTES`] for how).
fn pool(limits: &PluginLimits) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES * 4)
        .total_memories(POOL_INSTANCES * 2)
        .total_tables(POOL_INSTANCES * 4)
        // Interpreters compiled to Wasm (componentize-py, -js) have large
        // function tables and instances.
        .table_elements(1 << 17)
        .max_core_instance_size(8 << 20)
        .max_component_instance_size(8 << 20)
        // Past the plugin's memory cap, so the store's limiter (which counts
        // and names the refusal) is what stops a growing guest, not the pool.
        .max_memory_size(limits.memory_bytes.saturating_mul(2));
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(wasmtime::Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(KEEP_RESIDENT_BYTES);
    }
    pool
}

/// Bytes of each memory and table a slot keeps resident between instances
/// where the kernel can say which pages an instance dirtied (Linux 6.7+,
/// `PAGEMAP_SCAN`): only those pages are reset to their initial contents, so
/// the next instance neither faults its pages back in nor waits for the
/// TLB shootdown an `madvise` costs. A slot never holds more than what its
/// instances touched, and past this size the rest is released as before.
/// Measured on paper-n5 (`bench policies`, paired runs): exhaustive 0.27–0.33
/// → 0.14–0.21 ms, exact 0.26–0.31 → 0.13–0.19 ms. Without the ioctl, keeping
/// memory resident means zeroing its first bytes whether touched or not, which
/// was slower than releasing it (256 KiB and 1 MiB tried), so nothing is kept.
const KEEP_RESIDENT_BYTES: usize = 4 << 20;

/// The engine, the linkers of both worlds and the epoch ticker.
pub struct PluginEngine {
    engine: Engine,
    pub(super) policy_linker: Linker<PolicyCtx>,
    pub(super) utility_linker: Linker<UtilityCtx>,
    limits: PluginLimits,
    /// Why the compilation cache is off, when it was asked for but failed.
    cache_note: Option<String>,
    ticker: Option<Ticker>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine")
            .field("limits", &self.limits)
            .field("cache_note", &self.cache_note)
            .finish_non_exhaustive()
    }
}

/// Hands back to the system the memory the allocator kept from a compile.
/// Cranelift compiles a component's functions on every core, and glibc keeps
/// what each thread freed in that thread's arena: after a 200,000-function
/// component the daemon stayed at 1.1 GB resident with 12 MB of it in use.
/// `malloc_trim` releases the free pages (175 MB resident after it). Called
/// after every compile, off the decision path; where the C library is not
/// glibc there is nothing to do.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn release_freed_memory() {
    // SAFETY: malloc_trim takes no pointer and only returns free pages to the
    // system; glibc locks each arena while it walks it.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_freed_memory() {}

impl PluginEngine {
    pub fn new(limits: PluginLimits, cache: CompileCache) -> Result<Self> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .concurrency_support(false)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool(&limits)));
        let cache_note = match &cache {
            CompileCache::Off => None,
            CompileCache::Default | CompileCache::Dir(_) => {
                let mut cache_config = wasmtime::CacheConfig::new();
                if let CompileCache::Dir(dir) = &cache {
                    cache_config.with_directory(dir);
                }
                match wasmtime::Cache::new(cache_config) {
                    Ok(c) => {
                        config.cache(Some(c));
                        None
                    }
                    // A missing cache only costs compile time: say so and go on.
                    Err(e) => Some(format!("compilation cache off: {e:#}")),
                }
            }
        };
        let engine = match Engine::new(&config) {
            Ok(engine) => engine,
            // The pool reserves its address space up front (a few GiB per
            // memory slot, about a TiB in all). Where that is refused (an
            // address-space limit), instances come from the on-demand
            // allocator: slower per call, the same isolation.
            Err(pooled) => {
                config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
                let engine = Engine::new(&config)
                    .map_err(|e| anyhow!("cannot create the Wasm engine: {}", describe(&e)))?;
                tracing::warn!(
                    "plugin instances from the on-demand allocator: the pooling allocator cannot reserve its memory ({})",
                    describe(&pooled)
                );
                engine
            }
        };

        let mut policy_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut policy_linker)
            .map_err(|e| anyhow!("cannot link WASI for policies: {}", describe(&e)))?;
        Policy::add_to_linker::<_, HasSelf<PolicyCtx>>(&mut policy_linker, |ctx| ctx).map_err(
            |e| {
                anyhow!(
                    "cannot link the host interfaces for policies: {}",
                    describe(&e)
                )
            },
        )?;

        let mut utility_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut utility_linker)
            .map_err(|e| anyhow!("cannot link WASI for utilities: {}", describe(&e)))?;
        Utility::add_to_linker::<_, HasSelf<UtilityCtx>>(&mut utility_linker, |ctx| ctx).map_err(
            |e| {
                anyhow!(
                    "cannot link the host interfaces for utilities: {}",
                    describe(&e)
                )
            },
        )?;

        let ticker = Ticker::start(engine.clone())?;
        Ok(Self {
            engine,
            policy_linker,
            utility_linker,
            limits,
            cache_note,
            ticker: Some(ticker),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn limits(&self) -> &PluginLimits {
        &self.limits
    }

    /// Why the compilation cache is off, if it was asked for and could not be opened.
    pub fn cache_note(&self) -> Option<&str> {
        self.cache_note.as_deref()
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.stop();
        }
    }
}

/// The thread that advances the engine's epoch every [`EPOCH_TICK`].
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Ticker {
    fn start(engine: Engine) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("mfsched-epoch".into())
            .spawn(move || {
                // Ticks follow the wall clock: a ticker starved by a busy
                // machine catches up when it runs, so deadlines do not stretch.
                let start = std::time::Instant::now();
                let mut ticked = 0u128;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    let due = start.elapsed().as_nanos() / EPOCH_TICK.as_nanos();
                    while ticked < due {
                        engine.increment_epoch();
                        ticked += 1;
                    }
                }
            })
            .context("cannot start the epoch ticker thread")?;
        Ok(Self { stop, thread })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        // The ticker only sleeps and increments: joining cannot block for long.
        let _ = self.thread.join();
    }
}
