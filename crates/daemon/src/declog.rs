//! The decision log: one record per tick, appended, never rewritten.
//!
//! File layout: the 8-byte magic `MFSDLOG1`, then frames of
//! `[payload length: u32 LE][CRC-32 of payload: u32 LE][payload]`, the payload a
//! bincode 2 encoding (serde, standard config) of a [`TickRecord`]. Each frame is
//! written with a single `write_all` right after its tick, so a crash loses at most
//! the record being written; a reader reports such a torn tail and keeps every
//! record before it. bincode is used only in this module (it is unmaintained
//! upstream; swapping it touches nothing else).

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::outcome::DecideOutcome;
use super::sampler::Sample;
use mfsched_core::domain::{GpuState, JointConfig};

const MAGIC: &[u8; 8] = b"MFSDLOG1";
const FRAME_HEADER: usize = 8;
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

#[derive(Debug, Clone, PartialEq)]
pub struct LogContents {
    pub records: Vec<TickRecord>,
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
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Parses a whole log held in memory.
pub fn parse(bytes: &[u8]) -> Result<LogContents> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        bail!("not an mfsched decision log (missing the MFSDLOG1 header)");
    }
    let mut records = Vec::new();
    let mut at = MAGIC.len();
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
        if rest.len() < FRAME_HEADER {
            break Some(tail("incomplete frame header"));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len > MAX_RECORD_BYTES {
            break Some(tail("implausible record length"));
        }
        let end = FRAME_HEADER + len as usize;
        if rest.len() < end {
            break Some(tail("incomplete record"));
        }
        let payload = &rest[FRAME_HEADER..end];
        if crc32fast::hash(payload) != crc {
            break Some(tail("checksum mismatch"));
        }
        match bincode::serde::decode_from_slice::<TickRecord, _>(payload, config()) {
            Ok((record, used)) if used == payload.len() => records.push(record),
            _ => break Some(tail("record does not decode")),
        }
        at += end;
    };
    Ok(LogContents { records, torn })
}

pub fn read(path: &Path) -> Result<LogContents> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read log {}", path.display()))?;
    parse(&bytes).with_context(|| format!("log {}", path.display()))
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
    pub fn open(path: &Path) -> Result<(Self, Option<TornTail>)> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open log {}", path.display()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("cannot read log {}", path.display()))?;
        let (torn, last_tick, records) = if bytes.is_empty() {
            file.write_all(MAGIC)
                .with_context(|| format!("cannot write log {}", path.display()))?;
            (None, None, 0)
        } else {
            let contents = parse(&bytes).with_context(|| format!("log {}", path.display()))?;
            if let Some(t) = &contents.torn {
                file.set_len(t.offset)
                    .with_context(|| format!("cannot cut the torn tail of {}", path.display()))?;
            }
            let last = contents.records.last().map(|r| r.tick);
            (contents.torn, last, contents.records.len() as u64)
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
            torn,
        ))
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
            },
            shadows: vec![PolicyRecord {
                policy: "other".into(),
                outcome: Err(Failure {
                    kind: FailureKind::Deadline,
                    message: "over 5 ms".into(),
                }),
                latency_us: 5000,
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
        let (mut log, torn) = DecisionLog::open(&path).expect("open");
        assert_eq!((torn, log.last_tick()), (None, None));
        log.append(&record(0)).expect("append");
        log.append(&record(1)).expect("append");
        drop(log);
        let (mut log, torn) = DecisionLog::open(&path).expect("reopen");
        assert_eq!((torn, log.last_tick()), (None, Some(1)));
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
        let (mut log, torn) = DecisionLog::open(&path).expect("reopen");
        assert!(torn.is_some());
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
}
