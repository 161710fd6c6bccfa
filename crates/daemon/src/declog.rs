//! The decision log: one record per tick, appended, never rewritten.
//!
//! File layout (version 2): the 8-byte magic `MFSDLOG2`, then frames of
//! `[sync marker: 4 bytes][payload length: u32 LE][CRC-32 of payload: u32 LE]
//! [CRC-32 of the 12 bytes before: u32 LE][payload]`, the payload a bincode 2
//! encoding (serde, standard config) of a [`TickRecord`]. Each frame is written
//! with a single `write_all` right after its tick, so a crash loses at most the
//! record being written; a reader reports such a torn tail and keeps every
//! record before it. A corrupt frame in the middle (a flipped byte) is skipped:
//! the reader resynchronises on the next sync marker whose header checksum
//! holds, keeps every intact record after it and reports what it skipped.
//!
//! Version 1 logs (`MFSDLOG1`, frames without marker or header checksum) are
//! still read; a reader stops at their first bad frame. Opening one for
//! appending moves it aside (`<name>.v1`) and starts a version 2 log.
//!
//! bincode is used only in this module (it is unmaintained upstream; swapping it
//! touches nothing else).

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::outcome::DecideOutcome;
use super::sampler::Sample;
use mfsched_core::domain::{GpuState, JointConfig};

const MAGIC: &[u8; 8] = b"MFSDLOG2";
const MAGIC_V1: &[u8; 8] = b"MFSDLOG1";
/// Starts every version 2 frame; not valid UTF-8, rare in bincode payloads, and
/// only trusted together with the header checksum after it.
const SYNC: &[u8; 4] = b"\xF5MFR";
const FRAME_HEADER: usize = 16;
const FRAME_HEADER_V1: usize = 8;
/// No honest record comes near this; a larger length means a corrupt frame.
const MAX_RECORD_BYTES: u32 = 16 << 20;

/// Everything one tick did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TickRecord {
    pub tick: u64,
    /// Wall-clock time the tick started, ms since the Unix epoch.
    pub unix_ms: u64,
    /// Ticks missed (not started on time) since the previous record.
    pub missed_before: u64,
    pub sample: Sample,
    /// The state the policies decided for.
    pub state: GpuState,
    pub active: PolicyRecord,
    /// Shadow (A/B) policies: decided on the same state, never applied.
    pub shadows: Vec<PolicyRecord>,
    /// The configuration running after this tick.
    pub applied: JointConfig,
    /// The active policy failed, so the last valid configuration was kept.
    pub kept_last_valid: bool,
    /// Indices of the models whose configuration changed (and was sent).
    pub changed_models: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRecord {
    pub policy: String,
    pub outcome: DecideOutcome,
    pub latency_us: u64,
    /// SHA-256 of the component that answered (none for `hold`, or when the
    /// call failed before it answered): which build decided, whatever its name.
    pub component: Option<String>,
}

/// Bytes at the end of a log that do not form a whole, intact record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the intact records end.
    pub offset: u64,
    pub bytes: u64,
    pub reason: String,
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

#[derive(Debug, Clone, PartialEq)]
pub struct LogContents {
    pub records: Vec<TickRecord>,
    /// Corrupt stretches between intact records.
    pub skipped: Vec<Skipped>,
    pub torn: Option<TornTail>,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

fn encode_frame(record: &TickRecord) -> Result<Vec<u8>> {
    let payload =
        bincode::serde::encode_to_vec(record, config()).context("encoding a log record")?;
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

/// The frame at the start of `rest`: its record and length, or why there is none.
fn frame_at(rest: &[u8]) -> Result<(TickRecord, usize), &'static str> {
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
    match bincode::serde::decode_from_slice::<TickRecord, _>(payload, config()) {
        Ok((record, used)) if used == payload.len() => Ok((record, end)),
        _ => Err("record does not decode"),
    }
}

/// Parses a whole log held in memory.
pub fn parse(bytes: &[u8]) -> Result<LogContents> {
    if bytes.len() >= MAGIC_V1.len() && &bytes[..MAGIC_V1.len()] == MAGIC_V1 {
        return Ok(parse_v1(bytes));
    }
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        bail!("not an mfsched decision log (missing the MFSDLOG2 header)");
    }
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    let mut at = MAGIC.len();
    let torn = loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            break None;
        }
        match frame_at(rest) {
            Ok((record, len)) => {
                records.push(record);
                at += len;
            }
            Err(reason) => {
                // Resynchronise: the next sync marker that starts an intact frame.
                let next = (1..rest.len())
                    .filter(|&k| rest[k..].starts_with(SYNC))
                    .find(|&k| frame_at(&rest[k..]).is_ok());
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
                        });
                    }
                }
            }
        }
    };
    Ok(LogContents {
        records,
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
        match bincode::serde::decode_from_slice::<TickRecord, _>(payload, config()) {
            Ok((record, used)) if used == payload.len() => records.push(record),
            _ => break Some(tail("record does not decode")),
        }
        at += end;
    };
    LogContents {
        records,
        skipped: Vec::new(),
        torn,
    }
}

pub fn read(path: &Path) -> Result<LogContents> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read log {}", path.display()))?;
    parse(&bytes).with_context(|| format!("log {}", path.display()))
}

/// What opening a log found and did: a torn tail cut off, corrupt stretches
/// skipped (left in place), a version 1 log moved aside.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovery {
    pub torn: Option<TornTail>,
    pub skipped: Vec<Skipped>,
    pub moved_aside: Option<PathBuf>,
}

impl Recovery {
    /// One line per thing found, for the daemon's log.
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self.skipped.iter().map(|s| s.to_string()).collect();
        if let Some(t) = &self.torn {
            notes.push(format!(
                "{t}; cut off, appending after the last intact record"
            ));
        }
        if let Some(p) = &self.moved_aside {
            notes.push(format!(
                "a version 1 log was moved to {}; a version 2 log starts here",
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
}

impl DecisionLog {
    /// Opens (or creates) a log for appending. A torn tail left by a crash is cut
    /// off so new records follow the last intact one; it is returned to be reported.
    pub fn open(path: &Path) -> Result<(Self, Recovery)> {
        let mut recovery = Recovery::default();
        let mut file = Self::open_file(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("cannot read log {}", path.display()))?;
        let mut v1_last_tick = None;
        if bytes.starts_with(MAGIC_V1) {
            // Keep the old log whole beside the new one; tick numbers go on.
            v1_last_tick = parse_v1(&bytes).records.last().map(|r| r.tick);
            let aside = path.with_extension("log.v1");
            drop(file);
            std::fs::rename(path, &aside).with_context(|| {
                format!("cannot move the version 1 log {} aside", path.display())
            })?;
            recovery.moved_aside = Some(aside);
            file = Self::open_file(path)?;
            bytes.clear();
        }
        let (last_tick, records) = if bytes.is_empty() {
            file.write_all(MAGIC)
                .with_context(|| format!("cannot write log {}", path.display()))?;
            (v1_last_tick, 0)
        } else {
            let contents = parse(&bytes).with_context(|| format!("log {}", path.display()))?;
            if let Some(t) = &contents.torn {
                file.set_len(t.offset)
                    .with_context(|| format!("cannot cut the torn tail of {}", path.display()))?;
            }
            recovery.torn = contents.torn;
            recovery.skipped = contents.skipped;
            let last = contents.records.last().map(|r| r.tick);
            (last, contents.records.len() as u64)
        };
        file.seek(SeekFrom::End(0))
            .with_context(|| format!("cannot seek log {}", path.display()))?;
        Ok((
            Self {
                file,
                path: path.to_owned(),
                records,
                last_tick,
            },
            recovery,
        ))
    }

    fn open_file(path: &Path) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open log {}", path.display()))
    }

    /// Appends one record in a single write.
    pub fn append(&mut self, record: &TickRecord) -> Result<()> {
        let frame = encode_frame(record)?;
        self.file
            .write_all(&frame)
            .with_context(|| format!("cannot append to log {}", self.path.display()))?;
        self.records += 1;
        self.last_tick = Some(record.tick);
        Ok(())
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
mod tests {
    use super::*;
    use crate::outcome::{Failure, FailureKind, Proposal};

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
                processes: vec![],
            },
            state: GpuState {
                workload: mfsched_core::domain::WorkloadLevel::High,
                vram_used_mib: 1234.0,
                utilization: 0.5,
            },
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
        bytes.extend(encode_frame(&record(0)).expect("encode"));
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
            .map(|t| encode_frame(&record(t)).expect("encode"))
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

    #[test]
    fn a_version_1_log_is_read_and_moved_aside_when_appended_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d.log");
        let mut bytes = MAGIC_V1.to_vec();
        for t in 0..2 {
            let payload = bincode::serde::encode_to_vec(record(t), config()).expect("encode");
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
        assert_eq!(read(&path).expect("v2").records, vec![record(2)]);
    }
}
