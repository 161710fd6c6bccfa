//! The host sampler: the servers on a CPU box, observed as NVML observes a card.
//!
//! On a CPU host the models contend for cores and memory as they contend for a
//! GPU's SMs and memory, so the field's two quantities map one to one:
//! utilisation is the servers' CPU time over their cores (the share of time a
//! kernel ran), and "VRAM" is the memory the servers hold (their resident set,
//! or their cgroup's charge). docs/real-servers.md states the mapping.
//!
//! The contention reading is what a GPU's memory-controller utilisation is to
//! its SM utilisation: what the busy share cannot show. On a core two servers
//! can keep busy together, that is how long their threads wait for it: the
//! share of the servers' runnable time spent in the run queue (each thread's
//! `/proc/PID/task/TID/schedstat`), or, for a cgroup, the share of time some
//! of its tasks waited (`cpu.pressure`).
//!
//! Every read is one small `/proc` or cgroup file, read to a size cap; a process
//! that vanishes between listing and reading is skipped, never an error. The
//! parsing is in pure functions over the files' text, tested on fixtures.

use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{ProcessMemory, Sample, Sampler};
use crate::config::{HostCpuSource, HostMemorySource, HostSamplerConfig};
use mfsched_core::{Problem, WorkloadLevel};

const MIB: f64 = 1024.0 * 1024.0;
/// Largest `/proc/stat` read (a line per core: 4096 cores fit).
const MAX_STAT_BYTES: u64 = 1 << 20;
/// Largest per-process or cgroup file read (`stat`, `status`, `cmdline`, `cpu.stat`).
const MAX_SMALL_BYTES: u64 = 16 << 10;
/// Most `/proc` entries looked at per sample.
const MAX_PROCESSES: usize = 32_768;
/// Most threads of one process whose run-queue times are read per sample.
const MAX_TASKS: usize = 4096;
/// Most cores a cpu list may name.
const MAX_CPUS: usize = 4096;
/// The unit of `/proc/PID/stat` CPU times: Linux exports them in USER_HZ, which
/// is 100 on every architecture it runs on (independent of the kernel's HZ).
const USER_HZ: f64 = 100.0;

/// A `/proc` or cgroup file could not be read or understood.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("{0}")]
    Bad(String),
}

fn bad(msg: impl Into<String>) -> ParseError {
    ParseError::Bad(msg.into())
}

/// Linux cpu-list syntax ("0-3,6,8-9"): the sorted, distinct cores.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, ParseError> {
    let mut cpus = BTreeSet::new();
    for part in text.trim().split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let num = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| bad(format!("'{text}' is not a cpu list (like \"0-3,6\")")))
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if hi < lo {
            return Err(bad(format!("'{part}' is a decreasing range")));
        }
        if (hi - lo) as usize >= MAX_CPUS || cpus.len() + (hi - lo) as usize >= MAX_CPUS {
            return Err(bad(format!("'{text}' names more than {MAX_CPUS} cores")));
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus.into_iter().collect())
}

/// Busy and total time of some cores, in `/proc/stat` ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoreTimes {
    pub busy: u64,
    pub total: u64,
}

/// The per-core lines of `/proc/stat` summed over `cpus` (every core when
/// `None`). Idle time is `idle + iowait`; guest time is already inside `user`.
/// Also returns how many cores were summed.
pub fn parse_proc_stat(text: &str, cpus: Option<&[u32]>) -> Result<(CoreTimes, usize), ParseError> {
    let mut times = CoreTimes::default();
    let mut seen = 0;
    for line in text.lines() {
        // Per-core lines are "cpuN ..."; the aggregate "cpu  ..." is not one.
        let Some(rest) = line
            .strip_prefix("cpu")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let mut fields = rest.split_ascii_whitespace();
        let Some(id) = fields.next().and_then(|f| f.parse::<u32>().ok()) else {
            continue;
        };
        if cpus.is_some_and(|c| c.binary_search(&id).is_err()) {
            continue;
        }
        let values: Vec<u64> = fields
            .take(8)
            .map(|f| f.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad(format!("/proc/stat: the cpu{id} line is not numbers")))?;
        if values.len() < 5 {
            return Err(bad(format!("/proc/stat: the cpu{id} line is too short")));
        }
        let total: u64 = values.iter().sum();
        let idle = values[3] + values[4];
        times.total += total;
        times.busy += total.saturating_sub(idle);
        seen += 1;
    }
    if let Some(c) = cpus
        && seen != c.len()
    {
        return Err(bad(format!(
            "/proc/stat has {seen} of the {} configured cores (sampler.host.cpus)",
            c.len()
        )));
    }
    if seen == 0 {
        return Err(bad("/proc/stat has no per-core line"));
    }
    Ok((times, seen))
}

/// What `/proc/PID/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub ppid: u32,
    /// utime + stime, in USER_HZ ticks.
    pub cpu_ticks: u64,
    /// Start time after boot, ticks: with the PID, it names the process (PIDs are reused).
    pub start: u64,
}

/// `/proc/PID/stat`. The command (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last ')'.
pub fn parse_pid_stat(text: &str) -> Result<ProcStat, ParseError> {
    let close = text
        .rfind(')')
        .ok_or_else(|| bad("/proc/PID/stat has no command field"))?;
    // After ')': field 3 (state) onwards; ppid is field 4, utime 14, stime 15, starttime 22.
    let fields: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |n: usize| -> Result<u64, ParseError> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| {
                bad(format!(
                    "/proc/PID/stat: field {n} is missing or not a number"
                ))
            })
    };
    Ok(ProcStat {
        ppid: u32::try_from(field(4)?).map_err(|_| bad("/proc/PID/stat: ppid out of range"))?,
        cpu_ticks: field(14)? + field(15)?,
        start: field(22)?,
    })
}

/// `VmRSS` of `/proc/PID/status`, in bytes (`None` for a kernel thread or zombie).
pub fn parse_status_rss(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// Whether a `/proc/PID/cmdline` (NUL-separated argv) is one of `commands`: the
/// base name of argv[0], or of argv[1] when that is a path (an interpreter
/// running a script, as a shebang line makes it: `python3 /venv/bin/mlserver`).
/// A bare argv[1] is an argument (`grep mlserver`), not a program.
pub fn cmdline_matches(cmdline: &[u8], commands: &[String]) -> bool {
    cmdline
        .split(|&b| b == 0)
        .take(2)
        .enumerate()
        .filter_map(|(i, arg)| std::str::from_utf8(arg).ok().map(|a| (i, a)))
        .filter(|(i, arg)| *i == 0 || arg.contains('/'))
        .map(|(_, arg)| arg.rsplit('/').next().unwrap_or(arg))
        .any(|base| !base.is_empty() && commands.iter().any(|c| c == base))
}

/// A cgroup's CPU time in microseconds: v2 `cpu.stat` (`usage_usec N`) or v1
/// `cpuacct.usage` (one number, nanoseconds).
pub fn parse_cgroup_cpu(file: CgroupCpuFile, text: &str) -> Result<u64, ParseError> {
    match file {
        CgroupCpuFile::V2 => text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| bad("cpu.stat has no usage_usec line")),
        CgroupCpuFile::V1 => text
            .trim()
            .parse::<u64>()
            .map(|ns| ns / 1000)
            .map_err(|_| bad("cpuacct.usage is not a number")),
    }
}

/// A cgroup memory file (`memory.current`, `memory.usage_in_bytes`,
/// `memory.max`, `memory.limit_in_bytes`): bytes, `None` for "max" (no limit).
pub fn parse_cgroup_bytes(text: &str) -> Result<Option<u64>, ParseError> {
    let t = text.trim();
    if t == "max" {
        return Ok(None);
    }
    t.parse::<u64>()
        .map(Some)
        .map_err(|_| bad(format!("'{t}' is not a number of bytes")))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupCpuFile {
    V2,
    V1,
}

/// The busy fraction between two readings of the same cores.
pub fn core_utilization(before: CoreTimes, now: CoreTimes) -> Option<f64> {
    let total = now.total.checked_sub(before.total)?;
    let busy = now.busy.checked_sub(before.busy)?;
    (total > 0).then(|| (busy as f64 / total as f64).clamp(0.0, 1.0))
}

/// CPU seconds spent over `wall_s` on `cores` cores, as a fraction of their time.
pub fn time_utilization(cpu_s: f64, wall_s: f64, cores: usize) -> Option<f64> {
    (wall_s > 0.0 && cores > 0).then(|| (cpu_s / (wall_s * cores as f64)).clamp(0.0, 1.0))
}

/// CPU ticks spent between two scans by the processes seen in both (keyed by
/// PID and start time, so a reused PID is a new process). A process that
/// started or ended in between adds nothing: an undercount of one period, never
/// a jump.
pub fn process_ticks_between(
    before: &BTreeMap<(u32, u64), u64>,
    now: &BTreeMap<(u32, u64), u64>,
) -> u64 {
    seen_in_both(before, now)
        .map(|(&b, &t)| t.saturating_sub(b))
        .sum()
}

/// Each process seen at both scans (keyed by PID and start time): its value
/// at the first and at the second.
fn seen_in_both<'a, V>(
    before: &'a BTreeMap<(u32, u64), V>,
    now: &'a BTreeMap<(u32, u64), V>,
) -> impl Iterator<Item = (&'a V, &'a V)> {
    now.iter()
        .filter_map(|(key, n)| before.get(key).map(|b| (b, n)))
}

/// Time a task ran and time it waited runnable for a core, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunWait {
    pub run_ns: u64,
    pub wait_ns: u64,
}

/// `/proc/PID/task/TID/schedstat`: "run_ns wait_ns timeslices".
pub fn parse_schedstat(text: &str) -> Result<RunWait, ParseError> {
    let mut fields = text.split_ascii_whitespace().map(|f| f.parse::<u64>());
    match (fields.next(), fields.next()) {
        (Some(Ok(run_ns)), Some(Ok(wait_ns))) => Ok(RunWait { run_ns, wait_ns }),
        _ => Err(bad("schedstat is not \"run_ns wait_ns timeslices\"")),
    }
}

/// The share of the runnable time spent waiting between two scans, over the
/// processes seen in both (keyed as [`process_ticks_between`]'s); `None` when
/// none ran or waited.
pub fn wait_share_between(
    before: &BTreeMap<(u32, u64), RunWait>,
    now: &BTreeMap<(u32, u64), RunWait>,
) -> Option<f64> {
    let (run, wait) = seen_in_both(before, now).fold((0u64, 0u64), |(r, w), (b, n)| {
        (
            r.saturating_add(n.run_ns.saturating_sub(b.run_ns)),
            w.saturating_add(n.wait_ns.saturating_sub(b.wait_ns)),
        )
    });
    let total = run.saturating_add(wait);
    (total > 0).then(|| wait as f64 / total as f64)
}

/// cgroup v2 `cpu.pressure`: the `some` line's `total=` (microseconds during
/// which some of the cgroup's tasks waited for a core).
pub fn parse_cpu_pressure(text: &str) -> Result<u64, ParseError> {
    text.lines()
        .find_map(|l| l.strip_prefix("some "))
        .and_then(|l| {
            l.split_ascii_whitespace()
                .find_map(|f| f.strip_prefix("total="))
        })
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| bad("cpu.pressure has no \"some ... total=N\" line"))
}

/// Reads a small file to `cap` bytes; `/proc` and cgroup files never block.
fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(cap).read_to_end(&mut buf)?;
    Ok(buf)
}

fn read_text(path: &Path, cap: u64) -> Result<String> {
    let bytes = read_capped(path, cap).with_context(|| format!("reading {}", path.display()))?;
    String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))
}

/// One selected process at a scan.
#[derive(Debug, Clone, Copy)]
struct Seen {
    pid: u32,
    stat: ProcStat,
}

/// The host sampler (`sampler.kind = "host"`, `[sampler.host]`).
#[derive(Debug)]
pub struct HostSampler {
    config: HostSamplerConfig,
    proc_root: PathBuf,
    /// The configured cores (`None`: every core).
    cpus: Option<Vec<u32>>,
    /// How many cores the CPU time is shared over.
    cores: usize,
    cgroup_cpu: Option<(PathBuf, CgroupCpuFile)>,
    cgroup_memory: Option<PathBuf>,
    /// The cgroup's `cpu.pressure`, where the cgroup is the CPU source and
    /// the kernel keeps pressure stall information.
    cgroup_pressure: Option<PathBuf>,
    total_mib: Option<f64>,
    last: Reading,
}

/// What the previous sample read, for the deltas.
#[derive(Debug, Clone, Default)]
struct Reading {
    at: Option<Instant>,
    cores: CoreTimes,
    cgroup_usec: u64,
    /// `cpu.pressure`'s some-total, microseconds.
    cgroup_stall_usec: Option<u64>,
    process_ticks: BTreeMap<(u32, u64), u64>,
    /// Per process, its threads' run and wait times summed.
    process_run_wait: BTreeMap<(u32, u64), RunWait>,
}

impl HostSampler {
    pub fn new(config: &HostSamplerConfig) -> Result<Self> {
        Self::with_proc_root(config, Path::new("/proc"))
    }

    /// With another `/proc` (tests point it at a fixture tree).
    pub fn with_proc_root(config: &HostSamplerConfig, proc_root: &Path) -> Result<Self> {
        config.check()?;
        let cpus = match &config.cpus {
            Some(list) => {
                Some(parse_cpu_list(list).map_err(|e| anyhow::anyhow!("sampler.host.cpus: {e}"))?)
            }
            None => None,
        };
        let stat = read_text(&proc_root.join("stat"), MAX_STAT_BYTES)
            .context("the host sampler reads /proc/stat (Linux only)")?;
        let (_, cores) = parse_proc_stat(&stat, cpus.as_deref())
            .map_err(|e| anyhow::anyhow!("sampler.host.cpus: {e}"))?;
        let cgroup_cpu = match (&config.cgroup, config.cpu) {
            (Some(dir), HostCpuSource::Cgroup) => Some(cgroup_cpu_file(dir)?),
            _ => None,
        };
        let cgroup_pressure = cgroup_cpu.as_ref().and_then(|_| {
            let file = config.cgroup.as_ref()?.join("cpu.pressure");
            read_text(&file, MAX_SMALL_BYTES)
                .is_ok_and(|t| parse_cpu_pressure(&t).is_ok())
                .then_some(file)
        });
        let cgroup_memory = match (&config.cgroup, config.memory) {
            (Some(dir), HostMemorySource::Cgroup) => Some(cgroup_memory_dir(dir)?),
            _ => None,
        };
        let total_mib = match config.memory_total_mib {
            Some(m) => Some(m),
            None => {
                let limit = match &cgroup_memory {
                    Some(dir) => cgroup_limit(dir)?,
                    None => None,
                };
                let total = match limit {
                    Some(bytes) => Some(bytes),
                    None => read_text(&proc_root.join("meminfo"), MAX_SMALL_BYTES)
                        .ok()
                        .and_then(|t| parse_meminfo_total(&t)),
                };
                total.map(|b| b as f64 / MIB)
            }
        };
        let mut sampler = Self {
            config: config.clone(),
            proc_root: proc_root.to_path_buf(),
            cpus,
            cores,
            cgroup_cpu,
            cgroup_memory,
            cgroup_pressure,
            total_mib,
            last: Reading::default(),
        };
        // A first reading, so the first sample already has a delta.
        sampler.read()?;
        Ok(sampler)
    }

    /// The selected processes now: roots (pids, pid files, commands) and, with
    /// `include_children`, their descendants. Vanished processes are skipped.
    fn scan(&self) -> Vec<Seen> {
        let mut roots: BTreeSet<u32> = self.config.pids.iter().copied().collect();
        for file in &self.config.pid_files {
            // A missing or half-written pid file is a server not (yet) running.
            if let Ok(t) = read_text(file, 64)
                && let Ok(pid) = t.trim().parse::<u32>()
                && pid > 0
            {
                roots.insert(pid);
            }
        }
        let need_all = self.config.include_children || !self.config.commands.is_empty();
        let mut all: BTreeMap<u32, ProcStat> = BTreeMap::new();
        if need_all {
            if let Ok(entries) = std::fs::read_dir(&self.proc_root) {
                for entry in entries.flatten().take(MAX_PROCESSES) {
                    let Some(pid) = entry
                        .file_name()
                        .to_str()
                        .and_then(|n| n.parse::<u32>().ok())
                    else {
                        continue;
                    };
                    let Some(stat) = self.pid_stat(pid) else {
                        continue;
                    };
                    if !self.config.commands.is_empty()
                        && let Ok(cmd) = read_capped(&entry.path().join("cmdline"), MAX_SMALL_BYTES)
                        && cmdline_matches(&cmd, &self.config.commands)
                    {
                        roots.insert(pid);
                    }
                    all.insert(pid, stat);
                }
            }
        } else {
            for &pid in &roots {
                if let Some(stat) = self.pid_stat(pid) {
                    all.insert(pid, stat);
                }
            }
        }
        let mut chosen: BTreeSet<u32> = roots
            .iter()
            .copied()
            .filter(|p| all.contains_key(p))
            .collect();
        if self.config.include_children {
            // Descendants to a fixed point; bounded by the number of processes.
            loop {
                let before = chosen.len();
                for (&pid, stat) in &all {
                    if chosen.contains(&stat.ppid) {
                        chosen.insert(pid);
                    }
                }
                if chosen.len() == before {
                    break;
                }
            }
        }
        chosen
            .into_iter()
            .filter_map(|pid| all.get(&pid).map(|&stat| Seen { pid, stat }))
            .collect()
    }

    fn pid_stat(&self, pid: u32) -> Option<ProcStat> {
        let text = read_text(
            &self.proc_root.join(pid.to_string()).join("stat"),
            MAX_SMALL_BYTES,
        )
        .ok()?;
        parse_pid_stat(&text).ok()
    }

    /// A process's threads' run and wait times summed (`None` when the kernel
    /// keeps no schedstat or the process is gone). A thread that ends between
    /// two scans takes its times with it: an undercount of one period.
    fn run_wait(&self, pid: u32) -> Option<RunWait> {
        let tasks = std::fs::read_dir(self.proc_root.join(pid.to_string()).join("task")).ok()?;
        let mut sum = RunWait::default();
        let mut any = false;
        for task in tasks.flatten().take(MAX_TASKS) {
            let Some(rw) = read_text(&task.path().join("schedstat"), MAX_SMALL_BYTES)
                .ok()
                .and_then(|t| parse_schedstat(&t).ok())
            else {
                continue;
            };
            sum.run_ns = sum.run_ns.saturating_add(rw.run_ns);
            sum.wait_ns = sum.wait_ns.saturating_add(rw.wait_ns);
            any = true;
        }
        any.then_some(sum)
    }

    fn rss(&self, pid: u32) -> Option<u64> {
        let text = read_text(
            &self.proc_root.join(pid.to_string()).join("status"),
            MAX_SMALL_BYTES,
        )
        .ok()?;
        parse_status_rss(&text)
    }

    fn read(&mut self) -> Result<Sample> {
        let now = Instant::now();
        let wall_s = self.last.at.map(|t| now.duration_since(t).as_secs_f64());
        let processes = if self.config.cpu == HostCpuSource::Processes
            || self.config.memory == HostMemorySource::Processes
        {
            self.scan()
        } else {
            Vec::new()
        };
        let mut next = Reading {
            at: Some(now),
            ..Reading::default()
        };
        let utilization = match self.config.cpu {
            HostCpuSource::Cpus => {
                let text = read_text(&self.proc_root.join("stat"), MAX_STAT_BYTES)?;
                let (times, _) = parse_proc_stat(&text, self.cpus.as_deref())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                next.cores = times;
                wall_s.and_then(|_| core_utilization(self.last.cores, times))
            }
            HostCpuSource::Cgroup => {
                let (file, kind) = self
                    .cgroup_cpu
                    .as_ref()
                    .context("internal: no cgroup cpu file")?;
                let usec = parse_cgroup_cpu(*kind, &read_text(file, MAX_SMALL_BYTES)?)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                next.cgroup_usec = usec;
                wall_s.and_then(|w| {
                    let used = usec.checked_sub(self.last.cgroup_usec)? as f64 / 1e6;
                    time_utilization(used, w, self.cores)
                })
            }
            HostCpuSource::Processes => {
                next.process_ticks = processes
                    .iter()
                    .map(|s| ((s.pid, s.stat.start), s.stat.cpu_ticks))
                    .collect();
                wall_s.and_then(|w| {
                    let ticks =
                        process_ticks_between(&self.last.process_ticks, &next.process_ticks);
                    time_utilization(ticks as f64 / USER_HZ, w, self.cores)
                })
            }
        };
        let contention = match &self.cgroup_pressure {
            Some(file) => {
                let stall = read_text(file, MAX_SMALL_BYTES)
                    .ok()
                    .and_then(|t| parse_cpu_pressure(&t).ok());
                next.cgroup_stall_usec = stall;
                // "Some task waited" is one share of the wall time, however
                // many cores: it is at most 1.
                match (wall_s, self.last.cgroup_stall_usec, stall) {
                    (Some(w), Some(a), Some(b)) if w > 0.0 && b >= a => {
                        Some(((b - a) as f64 / 1e6 / w).clamp(0.0, 1.0))
                    }
                    _ => None,
                }
            }
            None => {
                next.process_run_wait = processes
                    .iter()
                    .filter_map(|s| self.run_wait(s.pid).map(|rw| ((s.pid, s.stat.start), rw)))
                    .collect();
                wall_s.and_then(|_| {
                    wait_share_between(&self.last.process_run_wait, &next.process_run_wait)
                })
            }
        };
        let mut per_process = Vec::new();
        let used_mib = match self.config.memory {
            HostMemorySource::Processes => {
                let mut sum = 0u64;
                for s in &processes {
                    let rss = self.rss(s.pid);
                    sum += rss.unwrap_or(0);
                    per_process.push(ProcessMemory {
                        pid: s.pid,
                        used_mib: rss.map(|b| b as f64 / MIB),
                    });
                }
                // No server running holds no memory: that is a measurement (0), not unknown.
                Some(sum as f64 / MIB)
            }
            HostMemorySource::Cgroup => {
                let dir = self
                    .cgroup_memory
                    .as_ref()
                    .context("internal: no cgroup memory file")?;
                let file = cgroup_usage_file(dir);
                parse_cgroup_bytes(&read_text(&file, MAX_SMALL_BYTES)?)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?
                    .map(|b| b as f64 / MIB)
            }
        };
        self.last = next;
        Ok(Sample {
            source: "host".into(),
            vram_used_mib: used_mib,
            vram_total_mib: self.total_mib,
            utilization,
            contention,
            processes: per_process,
        })
    }
}

impl Sampler for HostSampler {
    fn sample(
        &mut self,
        _problem: &Problem,
        _applied: &[u32],
        _workload: WorkloadLevel,
    ) -> Result<Sample> {
        self.read()
    }

    fn restart_span(&mut self) {
        let _ = self.read();
    }
}

fn cgroup_cpu_file(dir: &Path) -> Result<(PathBuf, CgroupCpuFile)> {
    let v2 = dir.join("cpu.stat");
    let v1 = dir.join("cpuacct.usage");
    // cgroup v2's cpu.stat has usage_usec even without the cpu controller.
    if v2.is_file() && read_text(&v2, MAX_SMALL_BYTES).is_ok_and(|t| t.contains("usage_usec")) {
        Ok((v2, CgroupCpuFile::V2))
    } else if v1.is_file() {
        Ok((v1, CgroupCpuFile::V1))
    } else {
        bail!(
            "sampler.host.cgroup {}: neither cpu.stat (v2) nor cpuacct.usage (v1) is there",
            dir.display()
        )
    }
}

fn cgroup_memory_dir(dir: &Path) -> Result<PathBuf> {
    if cgroup_usage_file(dir).is_file() {
        Ok(dir.to_path_buf())
    } else {
        bail!(
            "sampler.host.cgroup {}: neither memory.current (v2) nor memory.usage_in_bytes (v1) is there",
            dir.display()
        )
    }
}

fn cgroup_usage_file(dir: &Path) -> PathBuf {
    let v2 = dir.join("memory.current");
    if v2.is_file() {
        v2
    } else {
        dir.join("memory.usage_in_bytes")
    }
}

/// The cgroup's memory limit, bytes (`None`: unlimited). v1 reports "no limit"
/// as a huge number; anything above 2^60 is read as unlimited.
fn cgroup_limit(dir: &Path) -> Result<Option<u64>> {
    for name in ["memory.max", "memory.limit_in_bytes"] {
        let file = dir.join(name);
        if file.is_file() {
            let limit = parse_cgroup_bytes(&read_text(&file, MAX_SMALL_BYTES)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            return Ok(limit.filter(|&b| b < 1 << 60));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_STAT: &str = "cpu  300 0 100 600 0 0 0 0 0 0\n\
        cpu0 100 0 50 300 10 0 0 0 0 0\n\
        cpu1 200 0 50 290 0 0 0 0 0 0\n\
        intr 1 2 3\nctxt 99\n";

    #[test]
    fn cpu_lists_parse_in_linux_syntax_and_bad_ones_say_why() {
        assert_eq!(
            parse_cpu_list("0-3,6, 8-9").expect("valid"),
            vec![0, 1, 2, 3, 6, 8, 9]
        );
        assert_eq!(parse_cpu_list("1,1,0").expect("valid"), vec![0, 1]);
        assert!(
            parse_cpu_list("3-1")
                .expect_err("decreasing")
                .to_string()
                .contains("decreasing")
        );
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(
            parse_cpu_list("0-4294967295")
                .expect_err("huge")
                .to_string()
                .contains("more than")
        );
    }

    #[test]
    fn proc_stat_sums_the_chosen_cores_with_iowait_as_idle() {
        let (all, n) = parse_proc_stat(PROC_STAT, None).expect("valid");
        assert_eq!(n, 2);
        assert_eq!(all.total, 460 + 540);
        assert_eq!(all.busy, (460 - 310) + (540 - 290));
        let (one, n) = parse_proc_stat(PROC_STAT, Some(&[1])).expect("valid");
        assert_eq!(
            (one, n),
            (
                CoreTimes {
                    busy: 250,
                    total: 540
                },
                1
            )
        );
        let err = parse_proc_stat(PROC_STAT, Some(&[1, 7])).expect_err("cpu7 is absent");
        assert!(err.to_string().contains("1 of the 2"), "{err}");
        assert!(parse_proc_stat("cpu0 1 2\n", None).is_err());
        assert!(parse_proc_stat("intr 1\n", None).is_err());
    }

    #[test]
    fn core_utilization_is_the_busy_share_of_the_delta() {
        let a = CoreTimes {
            busy: 100,
            total: 400,
        };
        let b = CoreTimes {
            busy: 175,
            total: 500,
        };
        assert_eq!(core_utilization(a, b), Some(0.75));
        assert_eq!(core_utilization(a, a), None, "no time passed");
        assert_eq!(core_utilization(b, a), None, "counters went back");
    }

    #[test]
    fn pid_stat_counts_fields_after_the_last_paren_of_the_command() {
        // A command with spaces and a ')' of its own, as a Python worker can have.
        let text = "4242 (python3 (w) x) S 17 4242 17 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 3 0 9001 1000 200 18446744073709551615\n";
        assert_eq!(
            parse_pid_stat(text).expect("valid"),
            ProcStat {
                ppid: 17,
                cpu_ticks: 300,
                start: 9001
            }
        );
        assert!(parse_pid_stat("4242 (x) S 1 2").is_err(), "truncated");
        assert!(parse_pid_stat("no paren").is_err());
    }

    #[test]
    fn status_meminfo_and_cgroup_files_parse_and_unknown_stays_unknown() {
        let status = "Name:\tllama-server\nVmPeak:\t  900 kB\nVmRSS:\t  2048 kB\nThreads:\t4\n";
        assert_eq!(parse_status_rss(status), Some(2048 * 1024));
        assert_eq!(parse_status_rss("Name:\tkthreadd\nThreads:\t1\n"), None);
        assert_eq!(
            parse_meminfo_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        assert_eq!(
            parse_cgroup_cpu(CgroupCpuFile::V2, "usage_usec 123456\nuser_usec 1\n"),
            Ok(123_456)
        );
        assert_eq!(parse_cgroup_cpu(CgroupCpuFile::V1, "5000000\n"), Ok(5000));
        assert!(parse_cgroup_cpu(CgroupCpuFile::V2, "user_usec 1\n").is_err());
        assert_eq!(parse_cgroup_bytes("1048576\n"), Ok(Some(1 << 20)));
        assert_eq!(parse_cgroup_bytes("max\n"), Ok(None));
        assert!(parse_cgroup_bytes("lots").is_err());
    }

    #[test]
    fn commands_match_the_program_or_the_script_an_interpreter_runs() {
        let names = ["mlserver".to_owned(), "llama-server".to_owned()];
        assert!(cmdline_matches(
            b"/opt/venv/bin/python3\0/opt/venv/bin/mlserver\0start\0.\0",
            &names
        ));
        assert!(cmdline_matches(
            b"/usr/local/bin/llama-server\0-m\0x.gguf\0",
            &names
        ));
        assert!(
            !cmdline_matches(b"grep\0mlserver\0", &names),
            "a bare argument is no program"
        );
        assert!(!cmdline_matches(b"/bin/sh\0-c\0mlserver start\0", &names));
        assert!(!cmdline_matches(b"", &names));
    }

    #[test]
    fn process_time_counts_only_processes_seen_at_both_ends() {
        let before = BTreeMap::from([((10, 1), 100), ((11, 5), 50), ((12, 7), 10)]);
        // 10 ran 30 ticks; 11 ended; 12's PID was reused by a new process; 13 is new.
        let now = BTreeMap::from([((10, 1), 130), ((12, 99), 500), ((13, 8), 40)]);
        assert_eq!(process_ticks_between(&before, &now), 30);
        assert_eq!(time_utilization(1.5, 1.0, 2), Some(0.75));
        assert_eq!(time_utilization(9.0, 1.0, 2), Some(1.0), "clamped");
        assert_eq!(time_utilization(1.0, 0.0, 2), None);
    }

    #[test]
    fn run_queue_waits_are_a_share_of_the_runnable_time() {
        assert_eq!(
            parse_schedstat("1118466 33422754 3\n"),
            Ok(RunWait {
                run_ns: 1_118_466,
                wait_ns: 33_422_754
            })
        );
        assert!(parse_schedstat("12\n").is_err());
        assert!(parse_schedstat("a b c").is_err());
        let rw = |run_ns, wait_ns| RunWait { run_ns, wait_ns };
        let before = BTreeMap::from([((10, 1), rw(100, 100)), ((11, 5), rw(50, 50))]);
        // 10 ran 300 ns and waited 100; 11 ended; 12 is new.
        let now = BTreeMap::from([((10, 1), rw(400, 200)), ((12, 9), rw(900, 900))]);
        assert_eq!(wait_share_between(&before, &now), Some(0.25));
        assert_eq!(
            wait_share_between(&now, &now),
            None,
            "nothing ran or waited"
        );
        let pressure = "some avg10=75.62 avg60=59.30 avg300=28.60 total=6020891062\n\
                        full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_cpu_pressure(pressure), Ok(6_020_891_062));
        assert!(parse_cpu_pressure("full avg10=0.00 total=0\n").is_err());
    }

    /// Threads of a fake process, each (tid, run ns, wait ns).
    fn fake_tasks(dir: &Path, pid: u32, tasks: &[(u32, u64, u64)]) {
        for &(tid, run, wait) in tasks {
            let t = dir.join(pid.to_string()).join("task").join(tid.to_string());
            std::fs::create_dir_all(&t).expect("mkdir");
            std::fs::write(t.join("schedstat"), format!("{run} {wait} 7\n")).expect("write");
        }
    }

    /// A `/proc` tree on disk: the machine's stat and meminfo, and processes
    /// given as (pid, ppid, cpu ticks, RSS kB, argv).
    fn fake_proc(dir: &Path, stat: &str, procs: &[(u32, u32, u64, u64, &[u8])]) {
        std::fs::write(dir.join("stat"), stat).expect("write");
        std::fs::write(dir.join("meminfo"), "MemTotal: 2097152 kB\n").expect("write");
        for &(pid, ppid, ticks, rss, argv) in procs {
            let p = dir.join(pid.to_string());
            std::fs::create_dir_all(&p).expect("mkdir");
            let stat =
                format!("{pid} (x) S {ppid} 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 77 0 0\n");
            std::fs::write(p.join("stat"), stat).expect("write");
            std::fs::write(p.join("status"), format!("Name:\tx\nVmRSS:\t{rss} kB\n"))
                .expect("write");
            std::fs::write(p.join("cmdline"), argv).expect("write");
        }
    }

    #[test]
    fn the_sampler_follows_commands_and_their_children_and_skips_vanished_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let procs: &[(u32, u32, u64, u64, &[u8])] = &[
            (
                100,
                1,
                1000,
                1024,
                b"/venv/bin/python3\0/venv/bin/mlserver\0start\0",
            ),
            (
                101,
                100,
                500,
                2048,
                b"/venv/bin/python3\0-c\0from multiprocessing\0",
            ),
            (200, 1, 300, 4096, b"/opt/llama-server\0-m\0g.gguf\0"),
            (300, 1, 9999, 8192, b"/usr/bin/cc1plus\0x.cpp\0"),
        ];
        fake_proc(dir.path(), PROC_STAT, procs);
        fake_tasks(dir.path(), 100, &[(100, 1000, 100), (102, 500, 0)]);
        fake_tasks(dir.path(), 200, &[(200, 2000, 500)]);
        fake_tasks(dir.path(), 300, &[(300, 1, 1_000_000)]);
        let config = HostSamplerConfig {
            commands: vec!["mlserver".into(), "llama-server".into()],
            ..HostSamplerConfig::default()
        };
        let mut s = HostSampler::with_proc_root(&config, dir.path()).expect("fixture /proc");
        assert_eq!(s.cores, 2);
        assert_eq!(s.total_mib, Some(2048.0));
        let first = s.read().expect("reads");
        // The compiler (300) is not a server: 1 + 2 + 4 MiB.
        assert_eq!(first.vram_used_mib, Some(7.0));
        let pids: Vec<u32> = first.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![100, 101, 200]);
        assert_eq!(first.source, "host");
        // The worker vanishes; mlserver runs 100 more ticks.
        std::fs::remove_dir_all(dir.path().join("101")).expect("rm");
        fake_proc(dir.path(), PROC_STAT, &[(100, 1, 1100, 1024, procs[0].4)]);
        fake_tasks(dir.path(), 100, &[(100, 1600, 400)]);
        fake_tasks(dir.path(), 200, &[(200, 2400, 600)]);
        fake_tasks(dir.path(), 300, &[(300, 1, 9_000_000)]);
        let second = s.read().expect("a vanished process is no error");
        assert_eq!(second.vram_used_mib, Some(5.0));
        let u = second.utilization.expect("a delta exists");
        assert!((0.0..=1.0).contains(&u), "{u}");
        // The servers' threads ran 600 + 400 ns and waited 300 + 100 ns; the
        // compiler's waits are not theirs.
        let c = second.contention.expect("a delta exists");
        assert!((c - 400.0 / 1400.0).abs() < 1e-12, "{c}");
    }

    #[test]
    fn cores_and_cgroups_are_read_and_a_missing_cgroup_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        fake_proc(dir.path(), PROC_STAT, &[]);
        let cg = dir.path().join("cg");
        std::fs::create_dir_all(&cg).expect("mkdir");
        std::fs::write(cg.join("cpu.stat"), "usage_usec 1000000\n").expect("write");
        std::fs::write(cg.join("memory.current"), "10485760\n").expect("write");
        std::fs::write(cg.join("memory.max"), "104857600\n").expect("write");
        std::fs::write(
            cg.join("cpu.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=5000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .expect("write");
        let config = HostSamplerConfig {
            cpu: HostCpuSource::Cgroup,
            memory: HostMemorySource::Cgroup,
            cgroup: Some(cg.clone()),
            cpus: Some("1".into()),
            ..HostSamplerConfig::default()
        };
        let mut s = HostSampler::with_proc_root(&config, dir.path()).expect("cgroup");
        assert_eq!(s.total_mib, Some(100.0), "the cgroup's limit is the total");
        // No task waited since the sampler's first reading: pressure 0. Then
        // a stall longer than any wall time between two reads: clamped to 1.
        let read = s.read().expect("reads");
        assert_eq!(read.vram_used_mib, Some(10.0));
        assert_eq!(read.contention, Some(0.0));
        std::fs::write(cg.join("cpu.pressure"), "some total=999999999999\n").expect("write");
        assert_eq!(s.read().expect("reads").contention, Some(1.0));
        let cores = HostSamplerConfig {
            cpu: HostCpuSource::Cpus,
            cpus: Some("0".into()),
            pids: vec![1],
            ..HostSamplerConfig::default()
        };
        let mut s = HostSampler::with_proc_root(&cores, dir.path()).expect("cores");
        let next = PROC_STAT.replace("cpu0 100 0 50 300 10", "cpu0 175 0 50 325 10");
        std::fs::write(dir.path().join("stat"), next).expect("write");
        assert_eq!(s.read().expect("reads").utilization, Some(0.75));
        let missing = HostSamplerConfig {
            cgroup: Some(dir.path().join("nope")),
            ..config
        };
        let err = format!(
            "{:#}",
            HostSampler::with_proc_root(&missing, dir.path()).expect_err("no cgroup")
        );
        assert!(
            err.contains("sampler.host.cgroup") && err.contains("nope"),
            "{err}"
        );
        let bad_cpus = HostSamplerConfig {
            cpus: Some("0-5".into()),
            ..cores
        };
        let err = format!(
            "{:#}",
            HostSampler::with_proc_root(&bad_cpus, dir.path()).expect_err("6 cores")
        );
        assert!(err.contains("sampler.host.cpus"), "{err}");
    }
}
