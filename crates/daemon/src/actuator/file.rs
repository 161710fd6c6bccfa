//! The file actuator: one JSON document with every model's configuration,
//! rewritten atomically (temp file + rename) whenever a model changes.

use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mfsched_core::{KnobSetting, Problem};

/// What the file actuator writes.
#[derive(Debug, Serialize)]
struct FileDocument<'a> {
    tick: u64,
    models: BTreeMap<&'a str, KnobSetting>,
}

/// Writes every model's configuration of `joint` to `path`.
pub(super) fn write(path: &Path, problem: &Problem, tick: u64, joint: &[u32]) -> Result<()> {
    let doc = FileDocument {
        tick,
        models: problem
            .models
            .iter()
            .zip(joint)
            .map(|(m, &c)| (m.name.as_str(), m.knobs(c as usize)))
            .collect(),
    };
    write_json_atomically(path, &doc)
}

/// Writes JSON to a temp file beside `path`, then renames it over `path`.
fn write_json_atomically(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_vec_pretty(value).context("encoding JSON")?;
    write_atomically(path, &text)
}

/// Writes `bytes` to a temp file beside `path`, then renames it over `path`,
/// so a reader sees the old file or the new one, never a part.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}
