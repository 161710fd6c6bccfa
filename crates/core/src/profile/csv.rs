//! The profile CSV, format version 2 (specified in `docs/profile-format.md`);
//! version 1 files (the same columns for the bundled knobs) are still read.
//!
//! One header line, then one line per (joint configuration, workload) sample:
//!
//! ```text
//! format_version,scenario,workload,vram_used_mib,utilization,<model>.variant,<model>.<knob>…,<model>.throughput,…
//! ```
//!
//! An optional `contention` column after `utilization` holds the contention
//! reading where the sampler gives one ([`GpuState::contention`]; an empty cell
//! where it did not). Knob columns are named by the scenario's knobs; columns starting with `x-`
//! (provenance, pair ids) are ignored. Nothing in it is specific to the
//! simulator: real measurements use the same file.
//! Reading validates every cell against the scenario and reports the first problem
//! as one error naming the file, line and column.

use super::{Profile, ProfileRow, SoloRow};
use crate::domain::{
    GpuState, Knob, KnobSetting, KnobType, KnobValue, Model, Problem, WorkloadLevel,
};
use crate::fsutil::write_atomically;
use anyhow::{Context, Result};
use std::fmt;
use std::path::{Path, PathBuf};

/// The version this build writes.
pub const FORMAT_VERSION: u32 = 2;

/// The versions this build reads.
pub const READ_VERSIONS: [u32; 2] = [1, 2];

/// Columns whose name starts with this are the user's own (provenance, pair
/// ids, notes): read past, never interpreted.
pub const IGNORED_PREFIX: &str = "x-";
/// The most columns a profile may have (`x-` ones included).
pub const MAX_COLUMNS: usize = 1 << 16;
/// The most bytes one record (a header or a row, quoted newlines included)
/// may take: the reader holds a whole record before it can judge it.
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

pub const COL_FORMAT: &str = "format_version";
pub const COL_SCENARIO: &str = "scenario";
pub const COL_WORKLOAD: &str = "workload";
pub const COL_VRAM: &str = "vram_used_mib";
pub const COL_UTILIZATION: &str = "utilization";
/// Optional: written only where some row has a contention reading.
pub const COL_CONTENTION: &str = "contention";
/// How far above the card's memory a measured mean may read: the simulator's
/// sampler (like any noisy reading) lands a fraction of a percent over a full
/// card (0.24 % at most in the shipped profiles). A peak in another unit or a
/// sum over devices is far beyond it.
pub const VRAM_NOISE_ALLOWANCE: f64 = 0.01;

/// The regime of every row of a file without a `workload` column (one regime measured).
pub const SINGLE_REGIME: WorkloadLevel = WorkloadLevel::Medium;
/// The columns every profile has, before the per-model ones.
pub const FIXED_COLUMNS: [&str; 5] = [
    COL_FORMAT,
    COL_SCENARIO,
    COL_WORKLOAD,
    COL_VRAM,
    COL_UTILIZATION,
];

/// A problem with a profile file, located as precisely as it can be.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct FormatError {
    pub path: PathBuf,
    /// 1-based line in the file (the header is line 1).
    pub line: Option<u64>,
    pub column: Option<String>,
    pub message: String,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line whatever the file holds: a column name or a quoted cell
        // with a newline or an escape cannot forge a second line.
        use crate::text::printable;
        write!(f, "{}", crate::text::path(&self.path))?;
        if let Some(line) = self.line {
            write!(f, " line {line}")?;
        }
        if let Some(column) = &self.column {
            write!(f, ", column {}", printable(column, 256))?;
        }
        write!(f, ": {}", printable(&self.message, 2048))
    }
}

/// The column names of a problem's profile, in file order, with the optional
/// contention column or without it.
pub fn columns(problem: &Problem, contention: bool) -> Vec<String> {
    let mut cols: Vec<String> = FIXED_COLUMNS.iter().map(|c| c.to_string()).collect();
    if contention {
        cols.push(COL_CONTENTION.to_string());
    }
    for m in &problem.models {
        cols.extend(model_columns(m));
    }
    cols
}

/// `<model>.<knob>` for each knob the model has, then `<model>.throughput`.
fn model_columns(model: &Model) -> Vec<String> {
    model
        .knob_names()
        .into_iter()
        .chain(["throughput"])
        .map(|field| format!("{}.{field}", model.name))
        .collect()
}

/// Writes a profile atomically: a temporary file beside `path`, renamed over it.
pub fn write_csv(profile: &Profile, problem: &Problem, path: &Path) -> Result<()> {
    let names: Vec<&str> = problem.models.iter().map(|m| m.name.as_str()).collect();
    anyhow::ensure!(
        profile.models == names,
        "profile models ({}) do not match the scenario's ({})",
        profile.models.join(", "),
        names.join(", ")
    );
    let contention = profile
        .rows
        .iter()
        .map(|r| &r.state)
        .chain(profile.solo.iter().map(|r| &r.state))
        .any(|s| s.contention.is_some());
    let state_cells = |state: &GpuState, workload: WorkloadLevel| {
        let mut cells = vec![
            FORMAT_VERSION.to_string(),
            profile.scenario.clone(),
            workload.to_string(),
            state.vram_used_mib.to_string(),
            state.utilization.to_string(),
        ];
        if contention {
            cells.push(state.contention.map(|c| c.to_string()).unwrap_or_default());
        }
        cells
    };
    let mut text = Vec::new();
    {
        let mut w = ::csv::Writer::from_writer(&mut text);
        w.write_record(columns(problem, contention))?;
        for (k, row) in profile.rows.iter().enumerate() {
            check_row(row, problem).with_context(|| format!("profile row {k}"))?;
            let mut record = state_cells(&row.state, row.workload);
            for (i, m) in problem.models.iter().enumerate() {
                push_model_cells(&mut record, m, Some((row.joint[i], row.throughput[i])));
            }
            w.write_record(&record)?;
        }
        for (k, row) in profile.solo.iter().enumerate() {
            anyhow::ensure!(
                problem
                    .models
                    .get(row.model)
                    .is_some_and(|m| (row.config as usize) < m.grid_size()),
                "solo row {k}: model {} configuration {} is off the scenario",
                row.model,
                row.config
            );
            check_state(&row.state, problem)
                .and_then(|()| check_model_throughput(&problem.models[row.model], row.throughput))
                .with_context(|| format!("solo row {k}"))?;
            let mut record = state_cells(&row.state, row.state.workload);
            for (i, other) in problem.models.iter().enumerate() {
                let running = (i == row.model).then_some((row.config, row.throughput));
                push_model_cells(&mut record, other, running);
            }
            w.write_record(&record)?;
        }
        w.flush()?;
    }
    write_atomically(path, &text)
}

/// A model's cells: variant, knobs, throughput; all empty when it does not run.
fn push_model_cells(record: &mut Vec<String>, m: &Model, running: Option<(u32, f64)>) {
    match running {
        Some((config, throughput)) => {
            let config = config as usize;
            record.push(m.variants[m.configs[config].variant].name.clone());
            record.extend((0..m.knobs.len()).map(|k| m.value(config, k).to_string()));
            record.push(throughput.to_string());
        }
        None => record.extend(std::iter::repeat_n(String::new(), m.knobs.len() + 2)),
    }
}

/// A row's values as the reader checks each cell: what [`write_csv`] writes
/// and `profile --live` keeps must read back. The error names the column.
pub fn check_row(row: &ProfileRow, problem: &Problem) -> Result<()> {
    check_row_shape(row, problem)?;
    check_state(&row.state, problem)?;
    for (m, &tp) in problem.models.iter().zip(&row.throughput) {
        check_model_throughput(m, tp)?;
    }
    Ok(())
}

/// A row's measured state, as the reader checks its cells.
fn check_state(state: &GpuState, problem: &Problem) -> Result<()> {
    finite(state.vram_used_mib)
        .and_then(|()| check_vram(state.vram_used_mib, problem))
        .map_err(|m| anyhow::anyhow!("{COL_VRAM}: {m}"))?;
    finite(state.utilization)
        .and_then(|()| check_fraction(state.utilization, "utilisation"))
        .map_err(|m| anyhow::anyhow!("{COL_UTILIZATION}: {m}"))?;
    match state.contention {
        Some(c) => finite(c)
            .and_then(|()| check_fraction(c, "contention"))
            .map_err(|m| anyhow::anyhow!("{COL_CONTENTION}: {m}")),
        None => Ok(()),
    }
}

fn check_model_throughput(m: &Model, tp: f64) -> Result<()> {
    finite(tp)
        .and_then(|()| check_throughput(tp))
        .map_err(|e| anyhow::anyhow!("{}.throughput: {e}", m.name))
}

fn finite(v: f64) -> Result<(), String> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(format!("'{v}' is not a number"))
    }
}

/// The mean device memory over a window: not negative, and not above the card
/// by more than sampling noise (a value that is is a peak, a sum over devices
/// or another unit).
fn check_vram(vram_used_mib: f64, problem: &Problem) -> Result<(), String> {
    if vram_used_mib < 0.0 {
        return Err(format!("{vram_used_mib} is negative"));
    }
    let card = f64::from(problem.card.vram_mib);
    if vram_used_mib > card * (1.0 + VRAM_NOISE_ALLOWANCE) {
        return Err(format!(
            "{vram_used_mib} MiB is more than the card's {card} MiB \
             (the column is the mean device memory in use over the measuring window, in MiB)"
        ));
    }
    Ok(())
}

/// A state column that is a mean share over the measuring window.
fn check_fraction(value: f64, what: &str) -> Result<(), String> {
    if !(0.0..=1.0).contains(&value) {
        return Err(format!(
            "{value} is outside [0, 1] (the column is the mean {what} over the \
             measuring window, as a fraction)"
        ));
    }
    Ok(())
}

fn check_throughput(tp: f64) -> Result<(), String> {
    if tp < 0.0 {
        return Err(format!("throughput {tp} is negative"));
    }
    Ok(())
}

/// A row must have one in-range configuration and one throughput per model.
fn check_row_shape(row: &ProfileRow, problem: &Problem) -> Result<()> {
    let n = problem.models.len();
    anyhow::ensure!(
        row.joint.len() == n && row.throughput.len() == n,
        "expected {n} configurations and throughputs, got {} and {}",
        row.joint.len(),
        row.throughput.len()
    );
    for (&c, m) in row.joint.iter().zip(&problem.models) {
        anyhow::ensure!(
            (c as usize) < m.grid_size(),
            "configuration {c} is off {}'s grid of {}",
            m.name,
            m.grid_size()
        );
    }
    Ok(())
}

/// The header and the scenario a file names, read without a scenario to check against.
#[derive(Debug, Clone, PartialEq)]
pub struct Peek {
    pub columns: Vec<String>,
    /// The first data row's `scenario` cell, if there is one.
    pub scenario: Option<String>,
    /// The first data row's `format_version`, if it is a number.
    pub version: Option<u32>,
    /// Model names in header order (the prefixes of `<model>.<field>` columns).
    pub models: Vec<String>,
}

/// Reads the header and first row only.
pub fn peek(path: &Path) -> Result<Peek> {
    let err = |line, message: String| FormatError {
        path: path.to_path_buf(),
        line,
        column: None,
        message,
    };
    let mut reader = open(path)?;
    let columns: Vec<String> = reader
        .headers()
        .map_err(|e| err(Some(1), format!("unreadable header: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    if columns.iter().all(String::is_empty) {
        return Err(err(
            None,
            "the file is empty: expected a profile CSV header".into(),
        )
        .into());
    }
    let mut models: Vec<String> = Vec::new();
    for c in columns.iter().filter(|c| !c.starts_with(IGNORED_PREFIX)) {
        if let Some((model, _)) = c.rsplit_once('.')
            && !models.iter().any(|m| m == model)
        {
            models.push(model.to_string());
        }
    }
    let first = reader.records().next().and_then(|r| r.ok());
    let cell = |name: &str| {
        let col = columns.iter().position(|c| c == name)?;
        first.as_ref()?.get(col).filter(|s| !s.is_empty())
    };
    Ok(Peek {
        scenario: cell(COL_SCENARIO).map(str::to_string),
        version: cell(COL_FORMAT).and_then(|v| v.parse().ok()),
        columns,
        models,
    })
}

/// Streamed, so not capped in size; but a FIFO or a device is refused
/// without blocking, as every outside file is (`fsutil::open_regular`).
fn open(path: &Path) -> Result<::csv::Reader<RecordCapped<std::fs::File>>> {
    let file = crate::fsutil::open_regular(path, "profile")?;
    Ok(reader_builder().from_reader(RecordCapped::new(file)))
}

/// Passes a CSV through, failing once one record grows past
/// [`MAX_RECORD_BYTES`]: a line with no end, or a quoted cell of a billion
/// short lines, is refused after 16 MiB instead of held whole. Records end at
/// a newline outside quotes (`"` quotes, `""` escapes one: the parity of the
/// quotes since the record began says which).
struct RecordCapped<R> {
    inner: R,
    /// Bytes of the record being read, and its number (1: the header).
    record_bytes: u64,
    record: u64,
    in_quotes: bool,
}

impl<R> RecordCapped<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            record_bytes: 0,
            record: 1,
            in_quotes: false,
        }
    }
}

impl<R: std::io::Read> std::io::Read for RecordCapped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            match b {
                b'"' => self.in_quotes = !self.in_quotes,
                b'\n' if !self.in_quotes => {
                    self.record += 1;
                    self.record_bytes = 0;
                    continue;
                }
                _ => {}
            }
            self.record_bytes += 1;
            if self.record_bytes > MAX_RECORD_BYTES {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "record {} (counting the header as 1) is longer than {MAX_RECORD_BYTES} bytes",
                        self.record
                    ),
                ));
            }
        }
        Ok(n)
    }
}

fn reader_builder() -> ::csv::ReaderBuilder {
    let mut builder = ::csv::ReaderBuilder::new();
    builder.has_headers(true).trim(::csv::Trim::All);
    builder
}

/// The values of the named columns (any column of the header, `x-` ones
/// included) on each co-location row, in file order: the rows of
/// [`Profile::rows`] (read it with [`read_csv`] first; this reads cells only).
pub fn read_columns(path: &Path, problem: &Problem, names: &[String]) -> Result<Vec<Vec<String>>> {
    let mut reader = open(path)?;
    let header: Vec<String> = reader.headers()?.iter().map(str::to_string).collect();
    let wanted = names
        .iter()
        .map(|n| {
            header.iter().position(|h| h == n).ok_or_else(|| {
                FormatError {
                    path: path.to_path_buf(),
                    line: Some(1),
                    column: Some(n.clone()),
                    message: format!("no such column (the file has: {})", header.join(", ")),
                }
                .into()
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    let variants: Vec<usize> = problem
        .models
        .iter()
        .filter_map(|m| {
            let name = format!("{}.variant", m.name);
            header.iter().position(|h| *h == name)
        })
        .collect();
    let mut out = Vec::new();
    for record in reader.records() {
        let record = record.with_context(|| format!("reading {}", path.display()))?;
        if variants
            .iter()
            .all(|&c| !record.get(c).unwrap_or("").is_empty())
        {
            out.push(
                wanted
                    .iter()
                    .map(|&c| record.get(c).unwrap_or("").to_string())
                    .collect(),
            );
        }
    }
    Ok(out)
}

/// Where each expected column sits in the file.
struct Layout {
    format: usize,
    scenario: usize,
    /// Absent: the file measured one regime, read as [`SINGLE_REGIME`].
    workload: Option<usize>,
    vram: usize,
    utilization: usize,
    /// Absent: no row has a contention reading.
    contention: Option<usize>,
    /// Per model: variant, then its knobs in `knob_names` order, then throughput.
    models: Vec<Vec<usize>>,
}

/// One data row of a profile file, as the reader hands it on.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Every model running.
    CoLocation(ProfileRow),
    /// One model running alone.
    Solo(SoloRow),
}

/// Reads and validates a profile against `problem`'s models.
pub fn read_csv(path: &Path, problem: &Problem) -> Result<Profile> {
    let reader = open_located(path)?;
    Ok(collect(path, reader, problem)?)
}

/// [`read_csv`] of a file already in memory (an embedded profile); `path` names it in errors.
pub fn read_csv_bytes(bytes: &[u8], path: &Path, problem: &Problem) -> Result<Profile> {
    let reader = reader_builder().from_reader(RecordCapped::new(bytes));
    Ok(collect(path, reader, problem)?)
}

/// Reads and validates a profile as [`read_csv`] does, handing each row to
/// `each` as soon as it is checked and holding none: memory stays bounded
/// whatever the file's length (`data check` of ten million rows). Returns the
/// scenario the file names.
pub fn stream_csv(path: &Path, problem: &Problem, each: impl FnMut(Record)) -> Result<String> {
    let reader = open_located(path)?;
    Ok(stream(path, reader, problem, each)?)
}

fn open_located(path: &Path) -> Result<::csv::Reader<RecordCapped<std::fs::File>>, FormatError> {
    open(path).map_err(|e| FormatError {
        path: path.to_path_buf(),
        line: None,
        column: None,
        message: format!("{e:#}"),
    })
}

/// Every row of the file, kept.
fn collect<R: std::io::Read>(
    path: &Path,
    reader: ::csv::Reader<R>,
    problem: &Problem,
) -> Result<Profile, FormatError> {
    let (mut rows, mut solo) = (Vec::new(), Vec::new());
    let scenario = stream(path, reader, problem, |record| match record {
        Record::CoLocation(row) => rows.push(row),
        Record::Solo(row) => solo.push(row),
    })?;
    Ok(Profile {
        scenario,
        models: problem.models.iter().map(|m| m.name.clone()).collect(),
        rows,
        solo,
    })
}

/// Checks every row and hands it to `each`; the scenario the file names.
fn stream<R: std::io::Read>(
    path: &Path,
    mut reader: ::csv::Reader<R>,
    problem: &Problem,
    mut each: impl FnMut(Record),
) -> Result<String, FormatError> {
    let at = |line: Option<u64>, column: Option<&str>, message: String| FormatError {
        path: path.to_path_buf(),
        line,
        column: column.map(str::to_string),
        message,
    };
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| at(Some(1), None, format!("unreadable header: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    if header.iter().all(String::is_empty) {
        return Err(at(
            None,
            None,
            "the file is empty: expected a profile CSV header".into(),
        ));
    }
    let mut records = reader.records().peekable();
    let layout = match layout(&header, problem) {
        Ok(layout) => layout,
        Err((col, message)) => {
            // Another format version has other columns: say that, not what differs.
            if let (Some(c), Some(Ok(first))) =
                (header.iter().position(|h| h == COL_FORMAT), records.peek())
            {
                let line = first.position().map(|p| p.line());
                check_version(first.get(c).unwrap_or(""))
                    .map_err(|m| at(line, Some(COL_FORMAT), m))?;
            }
            return Err(at(Some(1), col.as_deref(), message));
        }
    };

    let mut scenario: Option<String> = None;
    for record in records {
        let record = record.map_err(|e| {
            let line = e.position().map(|p| p.line());
            let message = match e.kind() {
                ::csv::ErrorKind::UnequalLengths {
                    len, expected_len, ..
                } => format!("has {len} fields but the header has {expected_len}"),
                _ => e.to_string(),
            };
            at(line, None, message)
        })?;
        let line = record.position().map(|p| p.line());
        let cell = |col: usize| -> Result<&str, FormatError> {
            let value = record.get(col).unwrap_or("");
            if value.is_empty() {
                Err(at(line, Some(&header[col]), "empty value".into()))
            } else {
                Ok(value)
            }
        };
        let number = |col: usize| -> Result<f64, FormatError> {
            let text = cell(col)?;
            text.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| {
                    at(
                        line,
                        Some(&header[col]),
                        format!("'{text}' is not a number"),
                    )
                })
        };
        let bad = |col: usize, message: String| at(line, Some(&header[col]), message);

        check_version(cell(layout.format)?).map_err(|m| bad(layout.format, m))?;
        let name = cell(layout.scenario)?;
        match &scenario {
            None => scenario = Some(name.to_string()),
            Some(first) if first != name => {
                return Err(bad(
                    layout.scenario,
                    format!(
                        "scenario '{name}' differs from '{first}' on the first row: one file holds one scenario"
                    ),
                ));
            }
            Some(_) => {}
        }
        let workload = match layout.workload {
            None => SINGLE_REGIME,
            Some(col) => {
                let text = cell(col)?;
                WorkloadLevel::parse(text).ok_or_else(|| {
                    bad(
                        col,
                        format!("'{text}' is not a workload level (low, medium, high, burst)"),
                    )
                })?
            }
        };
        let vram_used_mib = number(layout.vram)?;
        check_vram(vram_used_mib, problem).map_err(|m| bad(layout.vram, m))?;
        let utilization = number(layout.utilization)?;
        check_fraction(utilization, "utilisation").map_err(|m| bad(layout.utilization, m))?;
        let contention = match layout.contention {
            Some(col) if !record.get(col).unwrap_or("").is_empty() => {
                let c = number(col)?;
                check_fraction(c, "contention").map_err(|m| bad(col, m))?;
                Some(c)
            }
            _ => None,
        };

        let mut joint = Vec::with_capacity(problem.models.len());
        let mut throughput = Vec::with_capacity(problem.models.len());
        let mut absent = Vec::new();
        for (i, (m, cols)) in problem.models.iter().zip(&layout.models).enumerate() {
            if record.get(cols[0]).unwrap_or("").is_empty() {
                // The model does not run in this row: every cell of it is empty.
                if let Some(&col) = cols[1..]
                    .iter()
                    .find(|&&c| !record.get(c).unwrap_or("").is_empty())
                {
                    return Err(bad(
                        col,
                        format!(
                            "{}.variant is empty (the model does not run in this row), so this cell must be empty too",
                            m.name
                        ),
                    ));
                }
                absent.push(i);
                joint.push(0);
                throughput.push(0.0);
                continue;
            }
            let (config, tp) = read_model(m, cols, &cell, &number, &bad)?;
            joint.push(config);
            throughput.push(tp);
        }
        let state = GpuState {
            workload,
            vram_used_mib,
            utilization,
            contention,
        };
        let n = problem.models.len();
        match n - absent.len() {
            running if running == n => each(Record::CoLocation(ProfileRow {
                joint,
                workload,
                state,
                throughput,
            })),
            1 => {
                let model = (0..n).find(|i| !absent.contains(i)).expect("one runs");
                each(Record::Solo(SoloRow {
                    model,
                    config: joint[model],
                    state,
                    throughput: throughput[model],
                }));
            }
            running => {
                return Err(at(
                    line,
                    Some(&header[layout.models[absent[0]][0]]),
                    format!(
                        "{running} of the {n} models run in this row: a row runs every model \
                         (a co-location row) or exactly one (a solo row); the others' variant cells are empty"
                    ),
                ));
            }
        }
    }
    scenario.ok_or_else(|| at(None, None, "no data rows after the header".into()))
}

/// One running model's cells: its configuration on the grid and its throughput.
fn read_model<'r>(
    m: &Model,
    cols: &[usize],
    cell: &dyn Fn(usize) -> Result<&'r str, FormatError>,
    number: &dyn Fn(usize) -> Result<f64, FormatError>,
    bad: &dyn Fn(usize, String) -> FormatError,
) -> Result<(u32, f64), FormatError> {
    let variant = cell(cols[0])?;
    if !m.variants.iter().any(|v| v.name == variant) {
        return Err(bad(
            cols[0],
            format!(
                "'{variant}' is not a variant of {} (it has: {})",
                m.name,
                m.variants
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let mut knobs = KnobSetting {
        variant: variant.to_string(),
        knobs: Default::default(),
    };
    for (k, knob) in m.knobs.iter().enumerate() {
        let col = cols[1 + k];
        let text = cell(col)?;
        let value = parse_value(knob, text).ok_or_else(|| {
            bad(
                col,
                format!("'{text}' is not {} value", knob.kind.with_article()),
            )
        })?;
        if knob.level_of(&value).is_none() {
            return Err(bad(
                col,
                format!(
                    "{value} is not a value of {}.{} (it has: {})",
                    m.name,
                    knob.name,
                    knob.values_text()
                ),
            ));
        }
        knobs.knobs.insert(knob.name.clone(), value);
    }
    let next = 1 + m.knobs.len();
    let config = m.find_config(&knobs).ok_or_else(|| {
        bad(
            cols[0],
            format!("{knobs} is not on {}'s configuration grid", m.name),
        )
    })?;
    let tp = number(cols[next])?;
    check_throughput(tp).map_err(|m| bad(cols[next], m))?;
    Ok((config as u32, tp))
}

fn check_version(text: &str) -> Result<(), String> {
    match text.parse::<u32>() {
        Ok(v) if READ_VERSIONS.contains(&v) => Ok(()),
        _ => Err(format!(
            "format version '{text}' is not supported (this mfsched reads versions {})",
            READ_VERSIONS.map(|v| v.to_string()).join(" and ")
        )),
    }
}

/// A cell as a value of `knob`'s type; `None` when it is not one.
fn parse_value(knob: &Knob, text: &str) -> Option<KnobValue> {
    match knob.kind {
        KnobType::Integer => text.parse::<i64>().ok().map(KnobValue::Integer),
        KnobType::Real => text
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .map(KnobValue::Real),
        KnobType::Category => Some(KnobValue::Category(text.to_string())),
    }
}

/// Matches the header to the columns `problem` expects.
fn layout(header: &[String], problem: &Problem) -> Result<Layout, (Option<String>, String)> {
    let expected = columns(problem, true);
    if header.len() > MAX_COLUMNS {
        return Err((
            None,
            format!(
                "{} columns, over the {MAX_COLUMNS} a profile may have",
                header.len()
            ),
        ));
    }
    // A set, so a header of many columns is checked in linear time.
    let mut seen = std::collections::HashSet::with_capacity(header.len());
    for col in header {
        if !seen.insert(col.as_str()) {
            return Err((Some(col.clone()), "the column appears twice".into()));
        }
        if expected.contains(col) || col.starts_with(IGNORED_PREFIX) {
            continue;
        }
        let message = match col.rsplit_once('.') {
            Some((model, field)) => match problem.models.iter().find(|m| m.name == model) {
                None => format!(
                    "model '{model}' is not in the scenario (its models: {})",
                    problem
                        .models
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(m) => format!(
                    "{} has no column '{field}' (its columns: {})",
                    m.name,
                    model_columns(m).join(", ")
                ),
            },
            None if col.is_empty() => "a column has no name".to_string(),
            None => format!(
                "unknown column (expected: {}, an optional {COL_CONTENTION}, the models' columns, or a name starting with '{IGNORED_PREFIX}' for your own)",
                FIXED_COLUMNS.join(", ")
            ),
        };
        return Err((Some(col.clone()), message));
    }
    let find = |name: &str| {
        header.iter().position(|c| c == name).ok_or_else(|| {
            (
                Some(name.to_string()),
                "missing column: a profile for this scenario needs it".to_string(),
            )
        })
    };
    let models = problem
        .models
        .iter()
        .map(|m| model_columns(m).iter().map(|c| find(c)).collect())
        .collect::<Result<_, _>>()?;
    Ok(Layout {
        format: find(COL_FORMAT)?,
        scenario: find(COL_SCENARIO)?,
        workload: header.iter().position(|c| c == COL_WORKLOAD),
        vram: find(COL_VRAM)?,
        utilization: find(COL_UTILIZATION)?,
        contention: header.iter().position(|c| c == COL_CONTENTION),
        models,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/profiles")
            .join(name)
    }

    fn paper_n2() -> Problem {
        scenario::load("paper-n2").expect("bundled").problem
    }

    #[test]
    fn the_header_names_every_knob_per_model() {
        let cols = columns(&paper_n2(), false);
        assert_eq!(
            cols,
            [
                "format_version",
                "scenario",
                "workload",
                "vram_used_mib",
                "utilization",
                "llama3b.variant",
                "llama3b.concurrency",
                "llama3b.skip_rate",
                "llama3b.throughput",
                "yolo-a.variant",
                "yolo-a.image_size",
                "yolo-a.throughput",
            ]
        );
    }

    #[test]
    fn a_good_fixture_reads() {
        let profile = read_csv(&fixture("good.csv"), &paper_n2()).expect("good fixture");
        assert_eq!(profile.rows.len(), 4);
        assert_eq!(profile.scenario, "paper-n2");
    }

    /// Every bad-input class: the error names the line and column and says what is wrong.
    #[test]
    fn each_bad_input_class_is_one_located_error() {
        let problem = paper_n2();
        let cases = [
            (
                "unknown-column.csv",
                "line 1, column llama3b.batch",
                "llama3b has no column 'batch'",
            ),
            (
                "missing-column.csv",
                "line 1, column yolo-a.throughput",
                "missing column",
            ),
            (
                "empty-value.csv",
                "line 3, column llama3b.throughput",
                "empty value",
            ),
            (
                "non-numeric.csv",
                "line 2, column utilization",
                "'high' is not a number",
            ),
            (
                "negative-throughput.csv",
                "line 4, column yolo-a.throughput",
                "throughput -12.5 is negative",
            ),
            (
                "unknown-model.csv",
                "line 1, column qwen9.throughput",
                "model 'qwen9' is not in the scenario",
            ),
            (
                "unknown-variant.csv",
                "line 3, column llama3b.variant",
                "'int8' is not a variant of llama3b",
            ),
            (
                "wrong-version.csv",
                "line 2, column format_version",
                "format version '3' is not supported",
            ),
            (
                "off-grid.csv",
                "line 2, column llama3b.concurrency",
                "is not a value of llama3b.concurrency (it has: 1, 2, 4)",
            ),
            (
                "bad-workload.csv",
                "line 2, column workload",
                "'peak' is not a workload level",
            ),
            (
                "ragged.csv",
                "line 3",
                "has 11 fields but the header has 12",
            ),
            (
                "over-the-card.csv",
                "line 3, column vram_used_mib",
                "31000 MiB is more than the card's 24576 MiB (the column is the mean",
            ),
            (
                "solo-with-leftover.csv",
                "line 2, column yolo-a.image_size",
                "yolo-a.variant is empty (the model does not run in this row)",
            ),
            (
                "nothing-runs.csv",
                "line 2, column llama3b.variant",
                "0 of the 2 models run in this row",
            ),
            ("empty.csv", "empty.csv", "the file is empty"),
            ("header-only.csv", "header-only.csv", "no data rows"),
        ];
        for (file, location, what) in cases {
            let err = read_csv(&fixture(file), &problem).expect_err(file);
            let text = format!("{err:#}");
            assert!(text.contains(location), "{file}: {text}");
            assert!(text.contains(what), "{file}: {text}");
            assert_eq!(text.lines().count(), 1, "{file}: {text}");
        }
    }

    /// A file without a workload column measured one regime; rows with one
    /// model running are its solo rows, kept apart from the co-location rows.
    #[test]
    fn solo_rows_and_a_single_regime_read_and_write_back() {
        let problem = paper_n2();
        let profile = read_csv(&fixture("solo-rows.csv"), &problem).expect("solo fixture");
        assert_eq!(profile.rows.len(), 1);
        assert_eq!(profile.rows[0].workload, SINGLE_REGIME);
        assert_eq!(profile.solo.len(), 3);
        assert_eq!(
            (profile.solo[2].model, profile.solo[2].throughput),
            (1, 301.5)
        );
        let table = profile.solo_table(&problem);
        let llama = profile.rows[0].joint[0] as usize;
        assert_eq!(
            table[0][llama],
            Some(250.0),
            "the mean of its two solo rows"
        );
        assert_eq!(table[0].iter().flatten().count(), 1);
        assert_eq!(table[1].iter().flatten().count(), 1);

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("back.csv");
        write_csv(&profile, &problem, &path).expect("writes");
        assert_eq!(read_csv(&path, &problem).expect("reads back"), profile);
        assert!(
            !std::fs::read_to_string(&path)
                .expect("reads")
                .contains(COL_CONTENTION)
        );

        // A contention reading on some rows: the column is written, a row
        // without one has an empty cell, and both read back.
        let mut measured = profile.clone();
        measured.rows[0].state.contention = Some(0.375);
        write_csv(&measured, &problem, &path).expect("writes");
        let text = std::fs::read_to_string(&path).expect("reads");
        assert!(
            text.lines()
                .next()
                .expect("header")
                .contains(",contention,")
        );
        assert_eq!(read_csv(&path, &problem).expect("reads back"), measured);
        let bad = text.replacen(",0.375,", ",1.5,", 1);
        let err = read_csv_bytes(bad.as_bytes(), &path, &problem).expect_err("over 1");
        assert!(
            format!("{err:#}").contains("line 2, column contention"),
            "{err:#}"
        );
    }

    #[test]
    fn peek_reads_the_named_scenario_and_models() {
        let p = peek(&fixture("good.csv")).expect("peek");
        assert_eq!(p.scenario.as_deref(), Some("paper-n2"));
        assert_eq!(p.models, ["llama3b", "yolo-a"]);
    }

    /// A header of 60,000 `x-` columns is checked in linear time (a set, not
    /// a scan per column) and a duplicate far apart is found; past the limit
    /// the file is refused before any row is read.
    #[test]
    fn many_columns_are_checked_in_linear_time_and_bounded() {
        let problem = paper_n2();
        let mut header = columns(&problem, false);
        header.extend((0..60_000).map(|i| format!("x-{i}")));
        assert!(layout(&header, &problem).is_ok());
        header.push("x-7".into());
        let (col, message) = layout(&header, &problem).err().expect("twice");
        assert_eq!(
            (col.as_deref(), message.as_str()),
            (Some("x-7"), "the column appears twice")
        );
        // Past the cap, with every name distinct: refused for the count.
        header.pop();
        header.extend((60_000..MAX_COLUMNS).map(|i| format!("x-{i}")));
        assert!(header.len() > MAX_COLUMNS);
        let (_, message) = layout(&header, &problem).err().expect("too many");
        assert!(message.contains("over the 65536"), "{message}");
    }

    /// One record is held whole before it is judged, so it is capped: an
    /// endless line, or a quoted cell of many short lines, is refused once
    /// past the cap, naming the record; records at the cap's scale pass.
    #[test]
    fn a_record_past_the_cap_is_refused_naming_it() {
        use std::io::Read;
        let long_line = vec![b'a'; MAX_RECORD_BYTES as usize + 1];
        let mut quoted = b"h\n\"".to_vec();
        quoted.extend(b"a\n".repeat(MAX_RECORD_BYTES as usize / 2 + 1));
        for (what, input, record) in [("one line", long_line, 1), ("a quoted cell", quoted, 2)] {
            let err = RecordCapped::new(input.as_slice())
                .read_to_end(&mut Vec::new())
                .expect_err(what);
            assert!(
                err.to_string().starts_with(&format!("record {record} ")),
                "{what}: {err}"
            );
        }
        // Quotes escaped by doubling keep the parity: the newline after the
        // cell ends the record, and many records of any total size pass.
        let mut fine = b"h,\"a \"\"b\"\" c\"\n".to_vec();
        fine.extend(b"1,2\n".repeat(MAX_RECORD_BYTES as usize / 2));
        let mut out = Vec::new();
        RecordCapped::new(fine.as_slice())
            .read_to_end(&mut out)
            .expect("records under the cap");
        assert_eq!(out, fine);
    }

    /// A quoted cell holding a newline and an escape stays on one error line.
    #[test]
    fn an_error_about_a_hostile_cell_is_one_printable_line() {
        let problem = paper_n2();
        let good = std::fs::read_to_string(fixture("good.csv")).expect("fixture");
        let mut lines: Vec<String> = good.lines().map(str::to_owned).collect();
        lines[1] = lines[1].replacen(",low,", ",\"x\nerror: forged\u{1b}[31m\",", 1);
        let text = lines.join("\n");
        let err = read_csv_bytes(text.as_bytes(), Path::new("p.csv"), &problem)
            .expect_err("not a level")
            .to_string();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains('\u{1b}'), "{err}");
    }
}
