//! The decision log: one record per tick, appended, never rewritten.
//!
//! File layout (version 3): the 8-byte magic `MFSDLOG3`, then frames of
//! `[sync marker: 4 bytes][payload length: u32 LE][CRC-32 of payload: u32 LE]
//! [CRC-32 of the 12 bytes before: u32 LE][payload]`, the payload a bincode 2
//! encoding (serde, standard config) of an [`Entry`]: a [`RunRecord`] when a
//! daemon starts appending (what it decided with: the scenario's text, the
//! bundle's hash, the field, the seed), then one [`TickRecord`] per tick, which
//! holds the configuration running before the tick, so any tick can be decided
//! again by another policy (`mfsched replay --policy`), and a [`ComponentRecord`]
//! before the first tick a component answers in (at start and after each hot
//! reload): its SHA-256, by which tick records name it, and what it declares
//! about itself (name, version, authors), and a [`UtilityRecord`] before the
//! first tick scored with a utility (a build, with its parameters) other than
//! the previous tick's: at start and after a hot swap. Each frame is written
//! with a single `write_all` right after its tick, so a crash loses at most the
//! record being written; a reader reports such a torn tail and keeps every
//! record before it. A corrupt frame in the middle (a flipped byte) is skipped:
//! the reader resynchronises on the next sync marker whose header checksum
//! holds, keeps every intact record after it and reports what it skipped.
//!
//! Version 2 logs (`MFSDLOG2`: the same frames, each a tick record without the
//! previous configuration and the load) and version 1 logs (`MFSDLOG1`, frames
//! without marker or header checksum; a reader stops at their first bad frame)
//! are still read. Opening one for appending moves it aside (`<name>.v1`,
//! `<name>.v2`) and starts a version 3 log; tick numbers go on.
//!
//! bincode is used only in this module (it is unmaintained upstream; swapping it
//! touches nothing else).

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::sampler::Sample;
use mfsched_core::{GpuState, JointConfig};
use mfsched_plugin_host::ComponentIdentity;
pub use mfsched_plugin_host::PolicyRecord;

const MAGIC: &[u8; 8] = b"MFSDLOG3";
const MAGIC_V2: &[u8; 8] = b"MFSDLOG2";
const MAGIC_V1: &[u8; 8] = b"MFSDLOG1";
/// Starts every version 2 frame; not valid UTF-8, rare in bincode payloads, and
/// only trusted together with the header checksum after it.
const SYNC: &[u8; 4] = b"\xF5MFR";
const FRAME_HEADER: usize = 16;
const FRAME_HEADER_V1: usize = 8;
/// No honest record comes near this; a larger length means a corrupt frame.
const MAX_RECORD_BYTES: u32 = 16 << 20;
/// Resynchronising tries each later sync marker whose header checksum holds,
/// hashing (and decoding) the payload that header claims: a forged stretch of
/// valid-looking headers, each claiming megabytes, would make that quadratic.
/// The payload bytes tried while resynchronising are capped at the log's own
/// length plus this; past it the rest of the log is given up (reported).
const RESYNC_WORK_BYTES: u64 = 256 << 20;

/// One frame's payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Entry {
    Run(RunRecord),
    Tick(Box<TickRecord>),
    Component(ComponentRecord),
    /// Appended last: bincode numbers variants in order, so logs written
    /// before it existed read as they did.
    Reconfig(ReconfigRecord),
    /// After `Reconfig`, for the same reason: a log without one names its
    /// utility only in its run records.
    Utility(UtilityRecord),
    /// Last, for the same reason: a log without one measured nothing (or
    /// predates the correction).
    Measured(MeasuredRecord),
    /// Last, for the same reason: a log without one enforced its floors on
    /// the point prediction.
    Floors(FloorsRecord),
    /// Last, for the same reason: a log without one had no contention reading.
    Contention(ContentionRecord),
    /// Last, for the same reason: a log without one held no floor at its
    /// reach and decided every tick on the state it read.
    Held(HeldRecord),
    /// Last, for the same reason: how the floors of the start whose floors
    /// record it follows treated a floor out of reach (a log without one:
    /// `keep`, the only way there was).
    OutOfReach(mfsched_core::OutOfReach),
    /// Last, for the same reason: a log without one decided every tick with
    /// its scenario's reconfiguration costs.
    Costs(CostsRecord),
}

/// [`Entry`] as it is written, borrowed: the same variants in the same order,
/// so the same bytes, without copying a record to append it.
#[derive(Debug, Serialize)]
enum EntryRef<'a> {
    Run(&'a RunRecord),
    Tick(&'a TickRecord),
    Component(&'a ComponentRecord),
    Reconfig(&'a ReconfigRecord),
    Utility(&'a UtilityRecord),
    Measured(&'a MeasuredRecord),
    Floors(&'a FloorsRecord),
    Contention(&'a ContentionRecord),
    Held(&'a HeldRecord),
    OutOfReach(mfsched_core::OutOfReach),
    Costs(&'a CostsRecord),
}

/// What tick `tick` held, written just before its record where it held
/// anything (the tick record keeps the encoding it had before, as with
/// [`ContentionRecord`], and a reader puts these back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldRecord {
    pub tick: u64,
    /// [`TickRecord::floors_held`].
    pub floors: Vec<u32>,
    /// [`TickRecord::state_held`].
    pub state: bool,
}

/// The contention readings of tick `tick`, written just before its record:
/// what the sampler read and what the tick decided with (averaged over time).
/// The tick record's state and sample keep the encoding they had before the
/// reading existed ([`state_wire`], [`sample_wire`]), so every older log reads
/// as it did, and a reader puts the readings back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ContentionRecord {
    pub tick: u64,
    pub sample: Option<f64>,
    pub state: Option<f64>,
}

/// A [`GpuState`] as every log version encodes it (workload, memory,
/// utilisation); its contention reading travels in a [`ContentionRecord`].
mod state_wire {
    use mfsched_core::{GpuState, WorkloadLevel};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Wire {
        workload: WorkloadLevel,
        vram_used_mib: f64,
        utilization: f64,
    }

    pub fn serialize<S: Serializer>(s: &GpuState, ser: S) -> Result<S::Ok, S::Error> {
        Wire {
            workload: s.workload,
            vram_used_mib: s.vram_used_mib,
            utilization: s.utilization,
        }
        .serialize(ser)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<GpuState, D::Error> {
        let w = Wire::deserialize(de)?;
        Ok(GpuState::new(w.workload, w.vram_used_mib, w.utilization))
    }
}

/// A [`Sample`] as every log version encodes it, without its contention
/// reading (as [`state_wire`]).
mod sample_wire {
    use crate::sampler::{ProcessMemory, Sample};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    struct WireRef<'a> {
        source: &'a str,
        vram_used_mib: Option<f64>,
        vram_total_mib: Option<f64>,
        utilization: Option<f64>,
        processes: &'a [ProcessMemory],
    }

    #[derive(Deserialize)]
    struct Wire {
        source: String,
        vram_used_mib: Option<f64>,
        vram_total_mib: Option<f64>,
        utilization: Option<f64>,
        processes: Vec<ProcessMemory>,
    }

    pub fn serialize<S: Serializer>(s: &Sample, ser: S) -> Result<S::Ok, S::Error> {
        WireRef {
            source: &s.source,
            vram_used_mib: s.vram_used_mib,
            vram_total_mib: s.vram_total_mib,
            utilization: s.utilization,
            processes: &s.processes,
        }
        .serialize(ser)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Sample, D::Error> {
        let w = Wire::deserialize(de)?;
        Ok(Sample {
            source: w.source,
            vram_used_mib: w.vram_used_mib,
            vram_total_mib: w.vram_total_mib,
            utilization: w.utilization,
            contention: None,
            processes: w.processes,
        })
    }
}

/// How the ticks that follow (until the next daemon start) enforced their
/// floors: written once per start, after its [`RunRecord`], so `replay
/// --policy` decides under the same floors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloorsRecord {
    /// The `[floors] miss_rate` the margins were taken at (`None`: point floors).
    pub miss_rate: Option<f64>,
    /// Per model: the declared floor, and the one decisions were checked with.
    pub declared: Vec<f64>,
    pub enforced: Vec<f64>,
    /// What a tick did with a floor out of reach (logs before it: `keep`,
    /// the only way there was). Not in this record's bytes: it travels in the
    /// entry after it, and a reader puts it back.
    #[serde(skip)]
    pub out_of_reach: mfsched_core::OutOfReach,
}

/// What the servers measured for the configuration that ran before tick
/// `tick` decided (its record's `previous`), and the online correction that
/// learnt from it, when one did: `replay --policy` corrects as the daemon
/// did. Written before the tick's record, when a model's throughput is measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredRecord {
    pub tick: u64,
    /// Per model, its server's throughput (none where not measured, or
    /// where the model was reconfigured over the period: a measurement of
    /// its downtime the correction does not learn from).
    pub throughput: Vec<Option<f64>>,
    /// The correction's settings (`None`: the daemon decided uncorrected).
    pub correction: Option<mfsched_core::CorrectionConfig>,
}

/// One reconfiguration a v2-repository or process actuator finished: how long
/// the model did not serve (request to ready) and whether the new
/// configuration took. Written before the record of the tick that saw it finish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconfigRecord {
    /// The model's index in the scenario.
    pub model: u32,
    /// The tick whose decision asked for it.
    pub tick: u64,
    /// `v2-repository` or `process`.
    pub actuator: String,
    /// The configuration it replaced (none for the first) and the new one.
    pub from: Option<u32>,
    pub to: u32,
    /// The variant changed (not only a runtime knob).
    pub variant_switch: bool,
    /// Request to ready (to the failure, when it failed), ms.
    pub downtime_ms: f64,
    /// Why the new configuration did not take; none when it did.
    pub error: Option<String>,
    /// The configuration serving afterwards: `to`, or on failure the one kept.
    pub serving: Option<u32>,
}

/// The utility the ticks from `tick` on were scored with, until the next one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UtilityRecord {
    /// The first tick scored with it.
    pub tick: u64,
    /// Its registry name.
    pub name: String,
    pub identity: ComponentIdentity,
    /// Every parameter it was called with (given or at its default).
    pub params: Vec<(String, String)>,
}

impl UtilityRecord {
    /// `name@hash`, then its parameters, for people.
    pub fn label(&self) -> String {
        let mut label = format!(
            "{}@{}",
            mfsched_core::printable(&self.name, mfsched_plugin_host::OUTPUT_NAME_BYTES),
            mfsched_core::short_digest(&self.identity.sha256)
        );
        for (k, v) in &self.params {
            label.push_str(&format!(
                " {}={}",
                mfsched_core::printable(k, mfsched_plugin_host::OUTPUT_NAME_BYTES),
                mfsched_core::printable(v, mfsched_plugin_host::OUTPUT_NAME_BYTES)
            ));
        }
        label
    }
}

/// The reconfiguration costs the ticks from `tick` on were decided with,
/// until the next one: written once per daemon start and whenever they
/// change (with `actuator.downtime_as_cost`, each model's measured downtime
/// replaces its scenario costs as reconfigurations finish), so `replay
/// --policy` prices a change as the daemon did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostsRecord {
    /// The first tick decided with them.
    pub tick: u64,
    /// Per model, parallel to the scenario's models.
    pub costs: Vec<mfsched_core::ReconfigCosts>,
}

/// A policy component the ticks after it name by SHA-256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentRecord {
    /// The registry name it answered under when first recorded.
    pub policy: String,
    pub identity: ComponentIdentity,
}

/// What a daemon decided with, written when it starts appending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub unix_ms: u64,
    /// The scenario's name and the TOML text it was read from.
    pub scenario: String,
    pub scenario_toml: String,
    /// The predictor the policies were served (surrogate, backend, bundle, field).
    pub predictor: String,
    /// SHA-256 of the MeanField bundle (metadata and weights) the predictions came from.
    pub bundle_sha256: Option<String>,
    /// The field the joint predictions were made under.
    pub field: mfsched_core::Field,
    /// The seed every policy was passed.
    pub seed: u64,
    /// The utility component the policies optimised.
    pub utility: String,
    pub active: String,
    pub shadows: Vec<String>,
}

/// The load a tick decided for, as the load source read it (none for a fixed
/// level or a synthetic trace).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadRecord {
    /// Mean load ratio over the models read.
    pub observed: Option<f64>,
    /// The forecast ratio the regime was chosen from.
    pub forecast: Option<f64>,
    /// `held` or `safe` when the tick fell back.
    pub fallback: Option<String>,
}

/// Everything one tick did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TickRecord {
    pub tick: u64,
    /// Wall-clock time the tick started, ms since the Unix epoch.
    pub unix_ms: u64,
    /// Ticks missed (not started on time) since the previous record.
    pub missed_before: u64,
    #[serde(with = "sample_wire")]
    pub sample: Sample,
    /// The state the policies decided for.
    #[serde(with = "state_wire")]
    pub state: GpuState,
    /// The load it came from.
    pub load: LoadRecord,
    /// The configuration running when the tick started (the policies' current
    /// one); `None` in records read from a version 1 or 2 log.
    pub previous: Option<JointConfig>,
    pub active: PolicyRecord,
    /// Shadow (A/B) policies: decided on the same state, never applied.
    pub shadows: Vec<PolicyRecord>,
    /// The configuration running after this tick.
    pub applied: JointConfig,
    /// The active policy failed, so the last valid configuration was kept.
    pub kept_last_valid: bool,
    /// Indices of the models whose configuration changed (and was sent).
    pub changed_models: Vec<u32>,
    /// Indices of the models whose floor no configuration was predicted to
    /// reach at the tick's state (or only within the reach band of the best),
    /// held at the band's edge for it (`[floors] out_of_reach =
    /// "best-effort"`). In a [`HeldRecord`] on disk.
    #[serde(skip)]
    pub floors_held: Vec<u32>,
    /// `state` is the last one read while no reconfiguration was in flight
    /// (at this tick's load): `sample` was read during one, or over a period
    /// in which one finished. In a [`HeldRecord`] on disk.
    #[serde(skip)]
    pub state_held: bool,
}

/// A tick record of a version 1 or 2 log.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct TickRecordV2 {
    tick: u64,
    unix_ms: u64,
    missed_before: u64,
    #[serde(with = "sample_wire")]
    sample: Sample,
    #[serde(with = "state_wire")]
    state: GpuState,
    active: PolicyRecord,
    shadows: Vec<PolicyRecord>,
    applied: JointConfig,
    kept_last_valid: bool,
    changed_models: Vec<u32>,
}

impl From<TickRecordV2> for TickRecord {
    fn from(r: TickRecordV2) -> Self {
        Self {
            tick: r.tick,
            unix_ms: r.unix_ms,
            missed_before: r.missed_before,
            sample: r.sample,
            state: r.state,
            load: LoadRecord::default(),
            previous: None,
            active: r.active,
            shadows: r.shadows,
            applied: r.applied,
            kept_last_valid: r.kept_last_valid,
            changed_models: r.changed_models,
            floors_held: Vec::new(),
            state_held: false,
        }
    }
}

/// Bytes at the end of a log that do not form a whole, intact record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the intact records end.
    pub offset: u64,
    pub bytes: u64,
    pub reason: String,
    /// Resynchronising was given up (over [`RESYNC_WORK_BYTES`]): the bytes
    /// may still hold intact records, so they are moved aside, never cut.
    pub gave_up: bool,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "torn tail: {} byte(s) after offset {} ({})",
            self.bytes, self.offset, self.reason
        )
    }
}

/// Bytes in the middle of a log that were not an intact record, skipped to
/// reach the intact records after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub offset: u64,
    pub bytes: u64,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "skipped {} corrupt byte(s) at offset {} ({})",
            self.bytes, self.offset, self.reason
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogContents {
    pub records: Vec<TickRecord>,
    /// Each daemon start: the index in `records` of its first tick, and what it decided with.
    pub runs: Vec<(usize, RunRecord)>,
    /// Every component the ticks name, in the order first recorded.
    pub components: Vec<ComponentRecord>,
    /// Every finished reconfiguration, in log order (none before they were recorded).
    pub reconfigurations: Vec<ReconfigRecord>,
    /// Each change of the utility the ticks were scored with, in tick order
    /// (none in logs written before they were recorded).
    pub utilities: Vec<UtilityRecord>,
    /// What was measured before each tick that measured anything, in tick order.
    pub measured: Vec<MeasuredRecord>,
    /// Each daemon start's floors: the index in `records` of its first tick,
    /// and how they were enforced (none in logs written before they were).
    pub floors: Vec<(usize, FloorsRecord)>,
    /// Each change of the reconfiguration costs the ticks were decided with,
    /// in tick order (none in logs written before they were recorded).
    pub costs: Vec<CostsRecord>,
    /// Corrupt stretches between intact records.
    pub skipped: Vec<Skipped>,
    pub torn: Option<TornTail>,
}

/// The standard config, with a decoding limit: no string or list in a record
/// can claim more bytes than a record may have, so a forged length is a
/// decoding error, never an allocation.
fn config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<{ MAX_RECORD_BYTES as usize }>,
> {
    bincode::config::standard().with_limit::<{ MAX_RECORD_BYTES as usize }>()
}

/// Of `entries` in tick order, the last at or before `tick` (a binary
/// search: a replay looks one up per tick).
fn latest_at_or_before<T>(entries: &[T], tick: u64, tick_of: impl Fn(&T) -> u64) -> Option<&T> {
    let after = entries.partition_point(|e| tick_of(e) <= tick);
    after.checked_sub(1).map(|i| &entries[i])
}

/// Of entries written once per daemon start (each with the index of its
/// first tick record), the one of the start that wrote record `i`.
fn of_the_start<T>(entries: &[(usize, T)], i: usize) -> Option<&T> {
    entries
        .iter()
        .rev()
        .find(|(first, _)| *first <= i)
        .map(|(_, entry)| entry)
}

impl LogContents {
    /// What the daemon that wrote record `i` decided with (`None` in logs
    /// before version 3).
    pub fn run_of(&self, i: usize) -> Option<&RunRecord> {
        of_the_start(&self.runs, i)
    }

    /// How the daemon that wrote record `i` enforced its floors, when the
    /// log records it.
    pub fn floors_of(&self, i: usize) -> Option<&FloorsRecord> {
        of_the_start(&self.floors, i)
    }

    /// What was measured before tick `tick` decided, when the log records it.
    pub fn measured_of(&self, tick: u64) -> Option<&MeasuredRecord> {
        latest_at_or_before(&self.measured, tick, |m| m.tick).filter(|m| m.tick == tick)
    }

    /// The utility tick `tick` was scored with, when the log records it.
    pub fn utility_of(&self, tick: u64) -> Option<&UtilityRecord> {
        latest_at_or_before(&self.utilities, tick, |u| u.tick)
    }

    /// The reconfiguration costs tick `tick` was decided with, when the log
    /// records them.
    pub fn costs_of(&self, tick: u64) -> Option<&CostsRecord> {
        latest_at_or_before(&self.costs, tick, |c| c.tick)
    }
}

fn encode_frame(entry: &EntryRef<'_>) -> Result<Vec<u8>> {
    let payload =
        bincode::serde::encode_to_vec(entry, config()).context("encoding a log record")?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= MAX_RECORD_BYTES)
        .context("log record too large")?;
    let mut frame = Vec::with_capacity(FRAME_HEADER + payload.len());
    frame.extend_from_slice(SYNC);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    let header_crc = crc32fast::hash(&frame);
    frame.extend_from_slice(&header_crc.to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The frame at the start of `rest`: its entry and length, or why there is
/// none. `version` 2 frames hold a tick record of that version.
fn frame_at(rest: &[u8], version: u8) -> Result<(Entry, usize), &'static str> {
    if rest.len() < FRAME_HEADER {
        return Err("incomplete frame header");
    }
    if &rest[..4] != SYNC || crc32fast::hash(&rest[..12]) != u32_at(rest, 12) {
        return Err("corrupt frame header");
    }
    let len = u32_at(rest, 4);
    if len > MAX_RECORD_BYTES {
        return Err("implausible record length");
    }
    let end = FRAME_HEADER + len as usize;
    if rest.len() < end {
        return Err("incomplete record");
    }
    let payload = &rest[FRAME_HEADER..end];
    if crc32fast::hash(payload) != u32_at(rest, 8) {
        return Err("checksum mismatch");
    }
    let decoded = if version == 2 {
        bincode::serde::decode_from_slice::<TickRecordV2, _>(payload, config())
            .map(|(r, used)| (Entry::Tick(Box::new(r.into())), used))
    } else {
        bincode::serde::decode_from_slice::<Entry, _>(payload, config())
    };
    match decoded {
        Ok((entry, used)) if used == payload.len() => Ok((entry, end)),
        _ => Err("record does not decode"),
    }
}

/// Parses a whole log held in memory.
pub fn parse(bytes: &[u8]) -> Result<LogContents> {
    if bytes.len() >= MAGIC_V1.len() && &bytes[..MAGIC_V1.len()] == MAGIC_V1 {
        return Ok(parse_v1(bytes));
    }
    let version = if bytes.starts_with(MAGIC) {
        3
    } else if bytes.starts_with(MAGIC_V2) {
        2
    } else {
        bail!("not an mfsched decision log (missing the MFSDLOG3 header)");
    };
    let mut records = Vec::new();
    let mut runs = Vec::new();
    let mut components = Vec::new();
    let mut reconfigurations = Vec::new();
    let mut utilities = Vec::new();
    let mut measured = Vec::new();
    let mut floors = Vec::new();
    let mut costs = Vec::new();
    let mut contention: Option<ContentionRecord> = None;
    let mut held: Option<HeldRecord> = None;
    let mut skipped = Vec::new();
    let mut at = MAGIC.len();
    let budget = (bytes.len() as u64).saturating_add(RESYNC_WORK_BYTES);
    let mut work = 0u64;
    let torn = loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            break None;
        }
        match frame_at(rest, version) {
            Ok((entry, len)) => {
                match entry {
                    Entry::Tick(mut record) => {
                        // What was written just before this tick's record.
                        if let Some(c) = contention.take().filter(|c| c.tick == record.tick) {
                            record.state.contention = c.state;
                            record.sample.contention = c.sample;
                        }
                        if let Some(h) = held.take().filter(|h| h.tick == record.tick) {
                            record.floors_held = h.floors;
                            record.state_held = h.state;
                        }
                        records.push(*record);
                    }
                    Entry::Run(run) => runs.push((records.len(), run)),
                    Entry::Component(c) => components.push(c),
                    Entry::Reconfig(r) => reconfigurations.push(r),
                    Entry::Utility(u) => utilities.push(u),
                    Entry::Measured(m) => measured.push(m),
                    Entry::Floors(f) => floors.push((records.len(), f)),
                    Entry::Contention(c) => contention = Some(c),
                    Entry::Held(h) => held = Some(h),
                    Entry::Costs(c) => costs.push(c),
                    Entry::OutOfReach(o) => {
                        if let Some((_, f)) = floors.last_mut() {
                            f.out_of_reach = o;
                        }
                    }
                }
                at += len;
            }
            Err(reason) => {
                // Resynchronise: the next sync marker that starts an intact
                // frame, trying payloads within the work budget.
                let mut exhausted = false;
                let next = (1..rest.len())
                    .filter(|&k| rest[k..].starts_with(SYNC))
                    .find(|&k| {
                        let candidate = &rest[k..];
                        if candidate.len() >= 12 {
                            let claimed = u64::from(u32_at(candidate, 4).min(MAX_RECORD_BYTES));
                            work = work.saturating_add(claimed.min(candidate.len() as u64));
                        }
                        if work > budget {
                            exhausted = true;
                            return true;
                        }
                        frame_at(candidate, version).is_ok()
                    });
                if exhausted {
                    break Some(TornTail {
                        offset: at as u64,
                        bytes: rest.len() as u64,
                        reason: format!(
                            "{reason}; resynchronising gave up after trying {} MiB of payloads",
                            work >> 20
                        ),
                        gave_up: true,
                    });
                }
                match next {
                    Some(k) => {
                        skipped.push(Skipped {
                            offset: at as u64,
                            bytes: k as u64,
                            reason: reason.to_owned(),
                        });
                        at += k;
                    }
                    None => {
                        break Some(TornTail {
                            offset: at as u64,
                            bytes: rest.len() as u64,
                            reason: reason.to_owned(),
                            gave_up: false,
                        });
                    }
                }
            }
        }
    };
    // In tick order, so that each replayed tick finds its entries by binary
    // search (ticks number on across daemon starts: a log read back is in
    // that order already, and a stable sort keeps log order among equals).
    utilities.sort_by_key(|u| u.tick);
    measured.sort_by_key(|m| m.tick);
    costs.sort_by_key(|c| c.tick);
    Ok(LogContents {
        records,
        runs,
        components,
        reconfigurations,
        utilities,
        measured,
        floors,
        costs,
        skipped,
        torn,
    })
}

/// A version 1 log: read up to its first bad frame.
fn parse_v1(bytes: &[u8]) -> LogContents {
    let mut records = Vec::new();
    let mut at = MAGIC_V1.len();
    let torn = loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            break None;
        }
        let tail = |reason: &str| TornTail {
            offset: at as u64,
            bytes: rest.len() as u64,
            reason: reason.to_owned(),
            gave_up: false,
        };
        if rest.len() < FRAME_HEADER_V1 {
            break Some(tail("incomplete frame header"));
        }
        let len = u32_at(rest, 0);
        let crc = u32_at(rest, 4);
        if len > MAX_RECORD_BYTES {
            break Some(tail("implausible record length"));
        }
        let end = FRAME_HEADER_V1 + len as usize;
        if rest.len() < end {
            break Some(tail("incomplete record"));
        }
        let payload = &rest[FRAME_HEADER_V1..end];
        if crc32fast::hash(payload) != crc {
            break Some(tail("checksum mismatch"));
        }
        match bincode::serde::decode_from_slice::<TickRecordV2, _>(payload, config()) {
            Ok((record, used)) if used == payload.len() => records.push(record.into()),
            _ => break Some(tail("record does not decode")),
        }
        at += end;
    };
    LogContents {
        records,
        torn,
        ..LogContents::default()
    }
}

/// The largest log read (by `replay`, or by a daemon starting to append): a
/// regular file only, refused past this before anything is read.
pub const MAX_LOG_BYTES: u64 = 256 << 20;

pub fn read(path: &Path) -> Result<LogContents> {
    let bytes = mfsched_core::read_capped(path, MAX_LOG_BYTES, "decision log")?;
    parse(&bytes).with_context(|| format!("log {}", path.display()))
}

/// `<log>.<extension>`, or with `.1`, `.2`… after it where that is taken:
/// moving a log aside never overwrites an earlier one.
fn free_aside(path: &Path, extension: &str) -> Result<PathBuf> {
    let first = path.with_extension(extension);
    std::iter::once(first.clone())
        .chain((1..1000).map(|i| path.with_extension(format!("{extension}.{i}"))))
        .find(|p| !p.exists())
        .with_context(|| format!("no free name beside {} to move the log to", first.display()))
}

/// The writer's hold on a log: an exclusive `flock` on `<log>.lock`, which
/// holds the writer's pid for the refusal a second writer gets. The kernel
/// drops the lock when the process ends, however it ends.
#[derive(Debug)]
struct WriterLock {
    _file: File,
}

impl WriterLock {
    fn acquire(log: &Path) -> Result<Self> {
        let mut name = log.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the log's lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = (&file).take(32).read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = if !holder.is_empty() && holder.bytes().all(|b| b.is_ascii_digit()) {
                    format!("pid {holder}")
                } else {
                    "a process".to_owned()
                };
                bail!(
                    "decision log {} is in use: {holder} holds {}; give each daemon its own log.path",
                    log.display(),
                    path.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self { _file: file })
    }
}

/// What opening a log found and did: a torn tail cut off, corrupt stretches
/// skipped (left in place), a log of an older version moved aside.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovery {
    pub torn: Option<TornTail>,
    pub skipped: Vec<Skipped>,
    pub moved_aside: Option<PathBuf>,
    /// The log had reached [`MAX_LOG_BYTES`]: it was moved aside whole
    /// (`moved_aside`) and a new one started; only its tail was read.
    pub rotated: bool,
}

impl Recovery {
    /// One line per thing found, for the daemon's log.
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self.skipped.iter().map(|s| s.to_string()).collect();
        let gave_up = self.torn.as_ref().is_some_and(|t| t.gave_up);
        if let Some(t) = &self.torn {
            notes.push(if gave_up {
                format!("{t}; not cut")
            } else {
                format!("{t}; cut off, appending after the last intact record")
            });
        }
        if let (true, Some(p)) = (self.rotated, &self.moved_aside) {
            notes.push(format!(
                "the log had reached the {} MiB a log may have: moved to {}; a new log starts here, tick numbers go on",
                MAX_LOG_BYTES >> 20,
                p.display()
            ));
        } else if let (true, Some(p)) = (gave_up, &self.moved_aside) {
            notes.push(format!(
                "the whole log was moved to {}; a new log starts here, tick numbers go on",
                p.display()
            ));
        } else if let Some(p) = &self.moved_aside {
            notes.push(format!(
                "a log of an older version was moved to {}; a version 3 log starts here",
                p.display()
            ));
        }
        notes
    }
}

/// The open log, appending.
#[derive(Debug)]
pub struct DecisionLog {
    file: File,
    path: PathBuf,
    records: u64,
    last_tick: Option<u64>,
    /// SHA-256 of every component the file already describes.
    described: HashSet<String>,
    /// The utility (hash, parameters) the last [`UtilityRecord`] this
    /// process wrote names.
    scored_with: Option<(String, Vec<(String, String)>)>,
    /// The costs the last [`CostsRecord`] this process wrote holds.
    priced_with: Option<Vec<mfsched_core::ReconfigCosts>>,
    /// Held as long as the log is open for appending.
    _lock: WriterLock,
}

impl DecisionLog {
    /// Opens (or creates) a log for appending. A torn tail left by a crash is cut
    /// off so new records follow the last intact one; it is returned to be reported.
    /// Only one process appends to a log: a second is refused, naming the
    /// first's pid.
    /// A log that has reached [`MAX_LOG_BYTES`] is moved aside whole and a
    /// new one started after its last tick: only its tail is read, so a start
    /// costs the same however long the daemon has run.
    pub fn open(path: &Path) -> Result<(Self, Recovery)> {
        Self::open_with_limit(path, MAX_LOG_BYTES)
    }

    fn open_with_limit(path: &Path, max_bytes: u64) -> Result<(Self, Recovery)> {
        // The file first: a log.path that is no regular file is refused
        // before a lock file is made beside it.
        let mut file = Self::open_file(path)?;
        let lock = WriterLock::acquire(path)?;
        let mut recovery = Recovery::default();
        let len = file
            .metadata()
            .with_context(|| format!("cannot stat log {}", path.display()))?
            .len();
        if len > max_bytes {
            return Self::rotate(path, file, len, lock);
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read log {}", path.display()))?;
        if bytes.len() as u64 > max_bytes {
            bail!(
                "decision log {} grew past the {} MiB a log may have while it was read",
                path.display(),
                max_bytes >> 20
            );
        }
        let mut old_last_tick = None;
        let older = [(MAGIC_V1, "log.v1"), (MAGIC_V2, "log.v2")]
            .into_iter()
            .find(|(magic, _)| bytes.starts_with(*magic));
        if let Some((_, extension)) = older {
            // Keep the old log whole beside the new one; tick numbers go on.
            old_last_tick = parse(&bytes)
                .ok()
                .and_then(|c| c.records.last().map(|r| r.tick));
            let aside = free_aside(path, extension)?;
            drop(file);
            std::fs::rename(path, &aside)
                .with_context(|| format!("cannot move the older log {} aside", path.display()))?;
            recovery.moved_aside = Some(aside);
            file = Self::open_file(path)?;
            bytes.clear();
        }
        let mut described = HashSet::new();
        let (last_tick, records) = if bytes.is_empty() {
            file.write_all(MAGIC)
                .with_context(|| format!("cannot write log {}", path.display()))?;
            (old_last_tick, 0)
        } else {
            let contents = parse(&bytes).with_context(|| format!("log {}", path.display()))?;
            let gave_up = contents.torn.as_ref().is_some_and(|t| t.gave_up);
            if let Some(t) = contents.torn.as_ref().filter(|t| t.gave_up) {
                // Not cut: what was not scanned may be intact. The whole file
                // is kept beside, and a new log starts after its last tick.
                let aside = free_aside(path, "log.unreadable")?;
                std::fs::rename(path, &aside).with_context(|| {
                    format!(
                        "cannot move the unreadable log {} aside ({t})",
                        path.display()
                    )
                })?;
                drop(file);
                file = Self::open_file(path)?;
                file.write_all(MAGIC)
                    .with_context(|| format!("cannot write log {}", path.display()))?;
                recovery.moved_aside = Some(aside);
            } else if let Some(t) = &contents.torn {
                file.set_len(t.offset)
                    .with_context(|| format!("cannot cut the torn tail of {}", path.display()))?;
            }
            recovery.torn = contents.torn;
            recovery.skipped = contents.skipped;
            let last = contents.records.last().map(|r| r.tick);
            if gave_up {
                (last, 0)
            } else {
                described.extend(contents.components.into_iter().map(|c| c.identity.sha256));
                (last, contents.records.len() as u64)
            }
        };
        file.seek(SeekFrom::End(0))
            .with_context(|| format!("cannot seek log {}", path.display()))?;
        Ok((
            Self {
                file,
                path: path.to_owned(),
                records,
                last_tick,
                described,
                scored_with: None,
                priced_with: None,
                _lock: lock,
            },
            recovery,
        ))
    }

    /// Moves a full log aside whole and starts a new one after the last tick
    /// of its tail (the last two records' worth of bytes at most).
    fn rotate(path: &Path, mut file: File, len: u64, lock: WriterLock) -> Result<(Self, Recovery)> {
        let mut tail = vec![0u8; MAGIC.len()];
        file.read_exact(&mut tail)
            .with_context(|| format!("cannot read log {}", path.display()))?;
        let versioned = tail.as_slice() == MAGIC || tail.as_slice() == MAGIC_V2;
        let wanted =
            (2 * u64::from(MAX_RECORD_BYTES) + FRAME_HEADER as u64).min(len - MAGIC.len() as u64);
        file.seek(SeekFrom::Start(len - wanted))
            .and_then(|_| (&mut file).take(wanted).read_to_end(&mut tail))
            .with_context(|| format!("cannot read log {}", path.display()))?;
        // The magic, then the tail: the reader resynchronises on the first
        // whole frame in it. A version 1 log has no sync marker to find.
        let last_tick = if versioned {
            parse(&tail)
                .ok()
                .and_then(|c| c.records.last().map(|r| r.tick))
        } else {
            None
        };
        let aside = free_aside(path, "log.full")?;
        drop(file);
        std::fs::rename(path, &aside)
            .with_context(|| format!("cannot move the full log {} aside", path.display()))?;
        let mut file = Self::open_file(path)?;
        file.write_all(MAGIC)
            .with_context(|| format!("cannot write log {}", path.display()))?;
        Ok((
            Self {
                file,
                path: path.to_owned(),
                records: 0,
                last_tick,
                described: HashSet::new(),
                scored_with: None,
                priced_with: None,
                _lock: lock,
            },
            Recovery {
                moved_aside: Some(aside),
                rotated: true,
                ..Recovery::default()
            },
        ))
    }

    fn open_file(path: &Path) -> Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking open, checked on the descriptor: a FIFO or a device as
        // log.path is refused, never read or written.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .with_context(|| format!("cannot open log {}", path.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("cannot stat log {}", path.display()))?;
        if !meta.is_file() {
            bail!(
                "log.path {} is not a regular file ({})",
                path.display(),
                mfsched_core::file_kind(&meta.file_type())
            );
        }
        Ok(file)
    }

    /// Appends one tick record in a single write (after its contention
    /// readings and what it held, where it has any: a crash between them
    /// loses the tick only).
    pub fn append(&mut self, record: &TickRecord) -> Result<()> {
        let (sample, state) = (record.sample.contention, record.state.contention);
        if sample.is_some() || state.is_some() {
            self.write(&EntryRef::Contention(&ContentionRecord {
                tick: record.tick,
                sample,
                state,
            }))?;
        }
        if !record.floors_held.is_empty() || record.state_held {
            self.write(&EntryRef::Held(&HeldRecord {
                tick: record.tick,
                floors: record.floors_held.clone(),
                state: record.state_held,
            }))?;
        }
        self.write(&EntryRef::Tick(record))?;
        self.records += 1;
        self.last_tick = Some(record.tick);
        Ok(())
    }

    /// Records a finished reconfiguration.
    pub fn append_reconfig(&mut self, record: &ReconfigRecord) -> Result<()> {
        self.write(&EntryRef::Reconfig(record))
    }

    /// Records what was measured before the next tick decided.
    pub fn append_measured(&mut self, record: &MeasuredRecord) -> Result<()> {
        self.write(&EntryRef::Measured(record))
    }

    /// Records how the ticks that follow enforce their floors (once per
    /// daemon start, after its run record).
    pub fn append_floors(&mut self, record: &FloorsRecord) -> Result<()> {
        self.write(&EntryRef::Floors(record))?;
        self.write(&EntryRef::OutOfReach(record.out_of_reach))
    }

    /// Records what the ticks that follow are decided with (once per daemon start).
    pub fn append_run(&mut self, run: &RunRecord) -> Result<()> {
        self.write(&EntryRef::Run(run))
    }

    /// Records the utility the next tick is scored with, unless it is the
    /// one (same build, same parameters) the last record this process wrote
    /// names: once per daemon start and once per change.
    pub fn scored_with(&mut self, record: &UtilityRecord) -> Result<()> {
        let key = (record.identity.sha256.clone(), record.params.clone());
        if self.scored_with.as_ref() == Some(&key) {
            return Ok(());
        }
        self.write(&EntryRef::Utility(record))?;
        self.scored_with = Some(key);
        Ok(())
    }

    /// Records the reconfiguration costs tick `tick` is decided with, unless
    /// they are those the last record this process wrote holds: once per
    /// daemon start and once per change.
    pub fn priced_with(&mut self, tick: u64, costs: &[mfsched_core::ReconfigCosts]) -> Result<()> {
        if self.priced_with.as_deref() == Some(costs) {
            return Ok(());
        }
        self.write(&EntryRef::Costs(&CostsRecord {
            tick,
            costs: costs.to_vec(),
        }))?;
        self.priced_with = Some(costs.to_vec());
        Ok(())
    }

    /// Describes the component `policy` answered with, unless the log already
    /// does: once per component per file, before the first tick naming it.
    pub fn describe(&mut self, policy: &str, identity: &ComponentIdentity) -> Result<()> {
        if self.described.contains(&identity.sha256) {
            return Ok(());
        }
        self.write(&EntryRef::Component(&ComponentRecord {
            policy: policy.to_owned(),
            identity: identity.clone(),
        }))?;
        self.described.insert(identity.sha256.clone());
        Ok(())
    }

    fn write(&mut self, entry: &EntryRef<'_>) -> Result<()> {
        let frame = encode_frame(entry)?;
        self.file
            .write_all(&frame)
            .with_context(|| format!("cannot append to log {}", self.path.display()))
    }

    /// Records in the file, including those there before it was opened.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The last tick number in the log, if any.
    pub fn last_tick(&self) -> Option<u64> {
        self.last_tick
    }

    /// Makes the log durable (at shutdown).
    pub fn sync(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .with_context(|| format!("cannot sync log {}", self.path.display()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mfsched_plugin_host::{Failure, FailureKind, Proposal};

    /// Two models' reconfiguration costs: the scenario's defaults, then as
    /// measured downtimes would replace them (an MLServer reload, a
    /// `llama-server` restart longer than the period).
    pub(crate) fn two_models_costs() -> (
        Vec<mfsched_core::ReconfigCosts>,
        Vec<mfsched_core::ReconfigCosts>,
    ) {
        use mfsched_core::ReconfigCosts;
        let measured = |cost| ReconfigCosts {
            variant_switch: cost,
            knob_change: cost,
        };
        (
            vec![ReconfigCosts::default(); 2],
            vec![measured(0.04), measured(1.0)],
        )
    }

    pub(crate) fn record(tick: u64) -> TickRecord {
        TickRecord {
            tick,
            unix_ms: 1_700_000_000_000 + tick,
            missed_before: 0,
            sample: Sample {
                source: "footprint".into(),
                vram_used_mib: Some(1234.0),
                vram_total_mib: Some(24576.0),
                utilization: None,
                contention: None,
                processes: vec![],
            },
            state: GpuState {
                workload: mfsched_core::WorkloadLevel::High,
                vram_used_mib: 1234.0,
                utilization: 0.5,
                contention: None,
            },
            load: LoadRecord {
                observed: Some(0.8),
                forecast: Some(0.82),
                fallback: None,
            },
            previous: Some(vec![0, 2]),
            active: PolicyRecord {
                policy: "hold".into(),
                outcome: Ok(Proposal {
                    joint: vec![1, 2],
                    predicted_utility: Some(0.75),
                    predicted_throughput: None,
                }),
                latency_us: 42,
                component: Some("ab".repeat(32)),
            },
            shadows: vec![PolicyRecord {
                policy: "other".into(),
                outcome: Err(Failure {
                    kind: FailureKind::Deadline,
                    message: "over 5 ms".into(),
                }),
                latency_us: 5000,
                component: None,
            }],
            applied: vec![1, 2],
            kept_last_valid: false,
            changed_models: vec![0],
            floors_held: Vec::new(),
            state_held: false,
        }
    }

    #[test]
    fn records_round_trip_and_reopening_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (mut log, recovery) = DecisionLog::open(&path).expect("open");
        assert_eq!((recovery, log.last_tick()), (Recovery::default(), None));
        log.append(&record(0)).expect("append");
        log.append(&record(1)).expect("append");
        drop(log);
        let (mut log, recovery) = DecisionLog::open(&path).expect("reopen");
        assert_eq!((recovery, log.last_tick()), (Recovery::default(), Some(1)));
        log.append(&record(2)).expect("append");
        let contents = read(&path).expect("read");
        assert_eq!(contents.torn, None);
        assert_eq!(contents.records, vec![record(0), record(1), record(2)]);
    }

    /// A tick's contention reading travels in its own entry before the tick
    /// record, whose bytes are those of a record without one: older readers'
    /// encoding is kept, and this reader puts the reading back.
    #[test]
    fn a_contention_reading_round_trips_and_leaves_the_tick_encoding_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        let mut measured = record(1);
        measured.state.contention = Some(0.42);
        measured.sample.contention = Some(0.55);
        log.append(&record(0)).expect("append");
        log.append(&measured).expect("append");
        log.append(&record(2)).expect("append");
        drop(log);
        let contents = read(&path).expect("read");
        assert_eq!(
            contents.records,
            vec![record(0), measured.clone(), record(2)]
        );
        let plain =
            bincode::serde::encode_to_vec(EntryRef::Tick(&record(1)), config()).expect("encodes");
        let with =
            bincode::serde::encode_to_vec(EntryRef::Tick(&measured), config()).expect("encodes");
        assert_eq!(plain, with, "the reading is not in the tick record's bytes");
    }

    /// What a tick held, and how a start treated a floor out of reach,
    /// travel in entries of their own: the tick and floors records keep the
    /// bytes older readers read, and this reader puts them back.
    #[test]
    fn held_floors_and_states_round_trip_and_leave_older_encodings_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        let floors = FloorsRecord {
            miss_rate: Some(0.05),
            declared: vec![1.0, 2.0],
            enforced: vec![1.5, 2.5],
            out_of_reach: mfsched_core::OutOfReach::BestEffort,
        };
        let mut held = record(1);
        held.floors_held = vec![1];
        held.state_held = true;
        log.append_floors(&floors).expect("append");
        log.append(&record(0)).expect("append");
        log.append(&held).expect("append");
        log.append(&record(2)).expect("append");
        drop(log);
        let contents = read(&path).expect("read");
        assert_eq!(contents.records, vec![record(0), held.clone(), record(2)]);
        assert_eq!(contents.floors, vec![(0, floors.clone())]);
        let plain =
            bincode::serde::encode_to_vec(EntryRef::Tick(&record(1)), config()).expect("encodes");
        let with = bincode::serde::encode_to_vec(EntryRef::Tick(&held), config()).expect("encodes");
        assert_eq!(
            plain, with,
            "what it held is not in the tick record's bytes"
        );
        let keep = FloorsRecord {
            out_of_reach: mfsched_core::OutOfReach::Keep,
            ..floors.clone()
        };
        assert_eq!(
            bincode::serde::encode_to_vec(EntryRef::Floors(&floors), config()).expect("encodes"),
            bincode::serde::encode_to_vec(EntryRef::Floors(&keep), config()).expect("encodes"),
        );
    }

    #[test]
    fn reconfigurations_round_trip_beside_ticks_and_older_entries_keep_their_encoding() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        let reconfig = ReconfigRecord {
            model: 1,
            tick: 0,
            actuator: "v2-repository".into(),
            from: Some(3),
            to: 4,
            variant_switch: false,
            downtime_ms: 18.5,
            error: None,
            serving: Some(4),
        };
        log.append(&record(0)).expect("append");
        log.append_reconfig(&reconfig).expect("append");
        log.append(&record(1)).expect("append");
        let contents = read(&path).expect("read");
        assert_eq!(contents.records, vec![record(0), record(1)]);
        assert_eq!(contents.reconfigurations, vec![reconfig.clone()]);
        // bincode numbers variants in declaration order: the variants logs
        // held before reconfigurations were recorded keep their numbers.
        let tag = |e: &EntryRef<'_>| bincode::serde::encode_to_vec(e, config()).expect("encode")[0];
        assert_eq!(tag(&EntryRef::Tick(&record(0))), 1);
        assert_eq!(tag(&EntryRef::Reconfig(&reconfig)), 3);
    }

    /// Costs are recorded once per daemon start and once per change, and
    /// each tick reads back the costs it was decided with; the variants
    /// older logs hold keep their numbers.
    #[test]
    fn the_costs_each_tick_decided_with_are_recorded_when_they_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (scenario, measured) = two_models_costs();
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        for (tick, costs) in [
            (0, &scenario),
            (1, &scenario),
            (2, &measured),
            (3, &measured),
        ] {
            log.priced_with(tick, costs).expect("costs");
            log.append(&record(tick)).expect("append");
        }
        drop(log);
        // A new daemon start records its costs again, though unchanged.
        let (mut log, _) = DecisionLog::open(&path).expect("reopen");
        log.priced_with(4, &measured).expect("costs");
        log.append(&record(4)).expect("append");
        let contents = read(&path).expect("read");
        assert_eq!(contents.records.len(), 5);
        let firsts: Vec<u64> = contents.costs.iter().map(|c| c.tick).collect();
        assert_eq!(firsts, vec![0, 2, 4]);
        assert_eq!(contents.costs_of(1).map(|c| &c.costs), Some(&scenario));
        assert_eq!(contents.costs_of(3).map(|c| &c.costs), Some(&measured));
        let tag = |e: &EntryRef<'_>| bincode::serde::encode_to_vec(e, config()).expect("encode")[0];
        assert_eq!(
            tag(&EntryRef::OutOfReach(mfsched_core::OutOfReach::default())),
            9
        );
        assert_eq!(tag(&EntryRef::Costs(&contents.costs[0])), 10);
    }

    /// Each component is described once per file, before the first tick
    /// that names it, also across reopening.
    #[test]
    fn a_component_is_described_once_per_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let identity = ComponentIdentity {
            sha256: "ab".repeat(32),
            metadata: mfsched_plugin_host::ComponentMetadata {
                name: Some("annealer".into()),
                version: Some("0.3.1".into()),
                authors: None,
            },
        };
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        log.describe("hold", &identity).expect("describe");
        log.append(&record(0)).expect("append");
        log.describe("hold", &identity).expect("already described");
        log.append(&record(1)).expect("append");
        drop(log);
        let (mut log, _) = DecisionLog::open(&path).expect("reopen");
        log.describe("renamed", &identity)
            .expect("described before reopening");
        let reloaded = ComponentIdentity {
            sha256: "cd".repeat(32),
            ..identity.clone()
        };
        log.describe("hold", &reloaded).expect("describe");
        log.append(&record(2)).expect("append");
        let contents = read(&path).expect("read");
        assert_eq!(contents.records.len(), 3);
        let described: Vec<(&str, &ComponentIdentity)> = contents
            .components
            .iter()
            .map(|c| (c.policy.as_str(), &c.identity))
            .collect();
        assert_eq!(described, vec![("hold", &identity), ("hold", &reloaded)]);
        assert_eq!(
            contents
                .components
                .iter()
                .find(|c| c.identity.sha256 == "cd".repeat(32))
                .map(|c| &c.identity),
            Some(&reloaded)
        );
    }

    #[test]
    fn a_record_truncated_mid_write_is_a_reported_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        for t in 0..3 {
            log.append(&record(t)).expect("append");
        }
        drop(log);
        let full = std::fs::metadata(&path).expect("meta").len();
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        file.set_len(full - 7).expect("truncate mid-record");
        drop(file);
        let contents = read(&path).expect("torn is not fatal");
        assert_eq!(contents.records.len(), 2);
        let torn = contents.torn.expect("reported");
        assert_eq!(torn.reason, "incomplete record");
        // Reopening cuts the tail so the next record follows the last intact one.
        let (mut log, recovery) = DecisionLog::open(&path).expect("reopen");
        assert!(recovery.torn.is_some());
        assert_eq!(log.last_tick(), Some(1));
        log.append(&record(2)).expect("append");
        let contents = read(&path).expect("read");
        assert_eq!(contents.torn, None);
        assert_eq!(contents.records.len(), 3);
    }

    #[test]
    fn a_flipped_byte_fails_the_checksum() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend(encode_frame(&EntryRef::Tick(&record(0))).expect("encode"));
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let contents = parse(&bytes).expect("not fatal");
        assert!(contents.records.is_empty());
        assert_eq!(contents.torn.expect("torn").reason, "checksum mismatch");
        assert!(parse(b"garbage!").is_err());
    }

    /// A flipped byte anywhere in a middle record (header or payload) costs that
    /// record only: every intact record after it is kept, the stretch reported.
    #[test]
    fn a_corrupt_record_mid_log_is_skipped_and_the_rest_kept() {
        let frames: Vec<Vec<u8>> = (0..5)
            .map(|t| encode_frame(&EntryRef::Tick(&record(t))).expect("encode"))
            .collect();
        let start_of_2 = MAGIC.len() + frames[0].len() + frames[1].len();
        for flip in [0, 5, 13, 20, frames[2].len() - 1] {
            let mut bytes = MAGIC.to_vec();
            for f in &frames {
                bytes.extend(f);
            }
            bytes[start_of_2 + flip] ^= 0x5a;
            let contents = parse(&bytes).expect("not fatal");
            let ticks: Vec<u64> = contents.records.iter().map(|r| r.tick).collect();
            assert_eq!(ticks, [0, 1, 3, 4], "flip at {flip}");
            assert_eq!(contents.torn, None);
            assert_eq!(contents.skipped.len(), 1);
            assert_eq!(contents.skipped[0].offset, start_of_2 as u64);
            assert_eq!(contents.skipped[0].bytes, frames[2].len() as u64);
        }
    }

    #[test]
    fn reopening_a_log_with_a_corrupt_middle_keeps_it_and_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        for t in 0..3 {
            log.append(&record(t)).expect("append");
        }
        drop(log);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[MAGIC.len() + 30] ^= 0xff;
        std::fs::write(&path, &bytes).expect("write");
        let (mut log, recovery) = DecisionLog::open(&path).expect("reopen");
        assert_eq!(recovery.skipped.len(), 1);
        assert_eq!(log.last_tick(), Some(2));
        log.append(&record(3)).expect("append");
        let contents = read(&path).expect("read");
        let ticks: Vec<u64> = contents.records.iter().map(|r| r.tick).collect();
        assert_eq!(ticks, [1, 2, 3]);
    }

    /// Tick `t` as a version 1 or 2 log held it.
    fn record_v2(t: u64) -> TickRecordV2 {
        let r = record(t);
        TickRecordV2 {
            tick: r.tick,
            unix_ms: r.unix_ms,
            missed_before: r.missed_before,
            sample: r.sample,
            state: r.state,
            active: r.active,
            shadows: r.shadows,
            applied: r.applied,
            kept_last_valid: r.kept_last_valid,
            changed_models: r.changed_models,
        }
    }

    #[test]
    fn runs_say_what_the_ticks_after_them_were_decided_with() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let run = |seed| RunRecord {
            unix_ms: 1,
            scenario: "paper-n2".into(),
            scenario_toml: "name = \"paper-n2\"".into(),
            predictor: "MeanField".into(),
            bundle_sha256: Some("cd".repeat(32)),
            field: mfsched_core::Field::Observed,
            seed,
            utility: "utility".into(),
            active: "exact".into(),
            shadows: vec!["ga".into()],
        };
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        log.append_run(&run(1)).expect("run");
        log.append(&record(0)).expect("append");
        log.append(&record(1)).expect("append");
        drop(log);
        let (mut log, _) = DecisionLog::open(&path).expect("reopen");
        assert_eq!(log.records(), 2, "runs are not tick records");
        log.append_run(&run(2)).expect("run");
        log.append(&record(2)).expect("append");
        let contents = read(&path).expect("read");
        assert_eq!(contents.records.len(), 3);
        assert_eq!(contents.runs, vec![(0, run(1)), (2, run(2))]);
        assert_eq!(contents.run_of(1).map(|r| r.seed), Some(1));
        assert_eq!(contents.run_of(2).map(|r| r.seed), Some(2));
    }

    #[test]
    fn a_version_2_log_is_read_without_previous_configurations_and_moved_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let mut bytes = MAGIC_V2.to_vec();
        for t in 0..2 {
            let payload = bincode::serde::encode_to_vec(record_v2(t), config()).expect("encode");
            let len = payload.len() as u32;
            let mut frame = SYNC.to_vec();
            frame.extend(len.to_le_bytes());
            frame.extend(crc32fast::hash(&payload).to_le_bytes());
            let header_crc = crc32fast::hash(&frame);
            frame.extend(header_crc.to_le_bytes());
            frame.extend(payload);
            bytes.extend(frame);
        }
        std::fs::write(&path, &bytes).expect("write");
        let old = read(&path).expect("v2 reads");
        assert_eq!(old.records.len(), 2);
        assert_eq!(old.records[1].previous, None);
        assert_eq!(old.records[1].applied, record(1).applied);
        let (mut log, recovery) = DecisionLog::open(&path).expect("open");
        assert_eq!(recovery.moved_aside, Some(path.with_extension("log.v2")));
        assert_eq!(log.last_tick(), Some(1), "tick numbers go on");
        log.append(&record(2)).expect("append");
        assert_eq!(read(&path).expect("v3").records, vec![record(2)]);
    }

    #[test]
    fn a_version_1_log_is_read_and_moved_aside_when_appended_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let mut bytes = MAGIC_V1.to_vec();
        for t in 0..2 {
            let payload = bincode::serde::encode_to_vec(record_v2(t), config()).expect("encode");
            bytes.extend((payload.len() as u32).to_le_bytes());
            bytes.extend(crc32fast::hash(&payload).to_le_bytes());
            bytes.extend(payload);
        }
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(read(&path).expect("v1 reads").records.len(), 2);
        let (mut log, recovery) = DecisionLog::open(&path).expect("open");
        let aside = recovery.moved_aside.expect("moved aside");
        assert_eq!(std::fs::read(&aside).expect("kept whole"), bytes);
        assert_eq!(log.last_tick(), Some(1), "tick numbers go on");
        log.append(&record(2)).expect("append");
        assert_eq!(read(&path).expect("v3").records, vec![record(2)]);
    }

    /// A log past the size limit is moved aside whole and a new one starts
    /// after its last tick, reading only its tail; a second rotation does not
    /// overwrite the first.
    #[test]
    fn a_full_log_is_rotated_reading_only_its_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (mut log, _) = DecisionLog::open(&path).expect("open");
        for t in 0..50 {
            log.append(&record(t)).expect("append");
        }
        drop(log);
        let full = std::fs::read(&path).expect("read");
        let (mut log, recovery) = DecisionLog::open_with_limit(&path, 1024).expect("rotates");
        assert!(recovery.rotated, "{recovery:?}");
        let aside = recovery.moved_aside.clone().expect("moved aside");
        assert_eq!(std::fs::read(&aside).expect("kept whole"), full);
        assert_eq!(log.last_tick(), Some(49), "tick numbers go on");
        assert!(recovery.notes().iter().any(|n| n.contains("moved to")));
        log.append(&record(50)).expect("append");
        drop(log);
        assert_eq!(read(&path).expect("new log").records, vec![record(50)]);
        for t in 51..80 {
            let (mut log, _) = DecisionLog::open(&path).expect("open");
            log.append(&record(t)).expect("append");
        }
        let (_, again) = DecisionLog::open_with_limit(&path, 1024).expect("rotates");
        assert_ne!(again.moved_aside, Some(aside.clone()), "not overwritten");
        assert_eq!(read(&aside).expect("first kept").records.len(), 50);
    }

    /// A forged string length in a frame whose checksums hold is a record
    /// that does not decode (the decoding limit), never a 1 TiB allocation.
    #[test]
    fn a_forged_length_is_a_decoding_error_not_an_allocation() {
        let mut payload = vec![0u8, 1, 0xfd];
        payload.extend((1u64 << 40).to_le_bytes());
        payload.extend([b'x'; 16]);
        let mut frame = SYNC.to_vec();
        frame.extend((payload.len() as u32).to_le_bytes());
        frame.extend(crc32fast::hash(&payload).to_le_bytes());
        let header_crc = crc32fast::hash(&frame);
        frame.extend(header_crc.to_le_bytes());
        frame.extend(payload);
        let mut bytes = MAGIC.to_vec();
        bytes.extend(&frame);
        bytes.extend(encode_frame(&EntryRef::Tick(&record(3))).expect("encode"));
        let contents = parse(&bytes).expect("not fatal");
        assert_eq!(contents.records, vec![record(3)]);
        assert_eq!(contents.skipped.len(), 1);
        assert_eq!(contents.skipped[0].reason, "record does not decode");
    }

    /// Valid-looking headers each claiming megabytes: resynchronising stops
    /// at its work budget instead of hashing megabytes per header.
    #[test]
    fn resynchronising_over_forged_headers_is_bounded() {
        let mut header = SYNC.to_vec();
        header.extend((8u32 << 20).to_le_bytes());
        header.extend(0u32.to_le_bytes());
        let crc = crc32fast::hash(&header);
        header.extend(crc.to_le_bytes());
        let mut bytes = MAGIC.to_vec();
        bytes.extend(encode_frame(&EntryRef::Tick(&record(0))).expect("encode"));
        for _ in 0..100_000 {
            bytes.extend(&header);
        }
        bytes.extend(vec![0u8; 8 << 20]);
        let contents = parse(&bytes).expect("not fatal");
        assert_eq!(contents.records, vec![record(0)]);
        let torn = contents.torn.expect("given up");
        assert!(torn.gave_up, "{torn}");
        assert!(torn.reason.contains("gave up"), "{torn}");
    }

    #[test]
    fn a_second_writer_is_refused_naming_the_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let (log, _) = DecisionLog::open(&path).expect("open");
        let err = format!("{:#}", DecisionLog::open(&path).expect_err("locked"));
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(log);
        DecisionLog::open(&path).expect("free again");
    }
}
