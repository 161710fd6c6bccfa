//! ARCHITECTURE.md is the map of the code: its layout names every source file
//! (`.rs` and `.wgsl` under `src/`) of every crate in `crates/`, so a new file
//! cannot land unmapped.
//!
//! The layout is the first code block after `## Layout`. A crate's section is its
//! `  <crate>/` line under `crates/` and the lines indented deeper below it; an
//! entry of the section starts at a line indented four spaces and runs over the
//! lines indented deeper. A file is named by its path relative to `src/` in its
//! crate's section (`profile/csv.rs`, `sampler/host.rs`) outside the entries of
//! directories, or, inside the entry of one of its directories (`actuator/ …`), by
//! its path relative to that directory (`file.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The lines of the layout block of ARCHITECTURE.md.
fn layout(architecture: &str) -> Vec<&str> {
    let after = architecture
        .split_once("\n## Layout\n")
        .expect("ARCHITECTURE.md has a `## Layout` section")
        .1;
    let block = after
        .split_once("\n```\n")
        .expect("the layout section has a code block")
        .1;
    block
        .split_once("\n```")
        .expect("the layout's code block is closed")
        .0
        .lines()
        .collect()
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Each crate's section of the layout: crate directory name → its lines.
fn sections<'a>(layout: &[&'a str]) -> BTreeMap<String, Vec<&'a str>> {
    let start = layout
        .iter()
        .position(|l| l.starts_with("crates/"))
        .expect("the layout has a `crates/` line");
    let mut sections: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in &layout[start + 1..] {
        match indent(line) {
            0 => break,
            2 => {
                let name = line.split_whitespace().next().unwrap_or_default();
                current = name.strip_suffix('/').map(str::to_owned);
                if let Some(name) = &current {
                    sections.entry(name.clone()).or_default().push(line);
                }
            }
            _ => {
                if let Some(name) = &current {
                    sections.entry(name.clone()).or_default().push(line);
                }
            }
        }
    }
    sections
}

/// The entries of a section: runs of lines starting at a four-space indent.
fn entries(section: &[&str]) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    for line in section.iter().skip(1) {
        if indent(line) == 4 || entries.is_empty() {
            entries.push(String::new());
        }
        let entry = entries.last_mut().expect("pushed above");
        entry.push_str(line);
        entry.push('\n');
    }
    entries
}

/// Whether `text` names `path` as a whole word: not inside a longer path or name
/// (`field.rs` is not named by `meanfield.rs`, nor `host.rs` by `sampler/host.rs`).
fn names(text: &str, path: &str) -> bool {
    let part_of_a_path = |c: char| c.is_alphanumeric() || "_-./".contains(c);
    text.match_indices(path).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + path.len()..].chars().next();
        !before.is_some_and(part_of_a_path)
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Every `.rs` and `.wgsl` file under `dir`, as paths relative to it with `/`.
fn source_files(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let mut children: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    children.sort();
    for child in children {
        let name = child
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 file name");
        if child.is_dir() {
            source_files(&child, &format!("{prefix}{name}/"), out);
        } else if name.ends_with(".rs") || name.ends_with(".wgsl") {
            out.push(format!("{prefix}{name}"));
        }
    }
}

/// Whether the section names `file` (relative to `src/`), by the rule above.
fn section_names(section: &[&str], file: &str) -> bool {
    let (in_directories, elsewhere): (Vec<String>, Vec<String>) = entries(section)
        .into_iter()
        .partition(|entry| head(entry).ends_with('/'));
    names(section[0], file)
        || elsewhere.iter().any(|entry| names(entry, file))
        || in_directories.iter().any(|entry| {
            file.strip_prefix(head(entry))
                .is_some_and(|rest| names(entry, rest))
        })
}

/// An entry's first word: the file or directory it is about.
fn head(entry: &str) -> &str {
    entry.split_whitespace().next().unwrap_or_default()
}

#[test]
fn architecture_names_every_source_file() {
    let root = crate::common::workspace_root();
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md reads");
    let layout = layout(&architecture);
    let sections = sections(&layout);
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/ reads")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    assert!(crates.len() >= 7, "found the crates: {crates:?}");

    let mut missing = Vec::new();
    for krate in &crates {
        let name = krate
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 crate directory");
        let Some(section) = sections.get(name) else {
            missing.push(format!("crates/{name}/ (no section)"));
            continue;
        };
        let mut files = Vec::new();
        source_files(&krate.join("src"), "", &mut files);
        for file in files {
            if !section_names(section, &file) {
                missing.push(format!("crates/{name}/src/{file}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's layout does not name:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_naming_rule_reads_paths_as_whole_words() {
    let section = [
        "  daemon/             mfsched-daemon",
        "    meanfield.rs      the predictor; sampler/host.rs: a CPU host",
        "    actuator/         the façade (mod.rs): file.rs, v2.rs",
        "                      webhook.rs",
        "    api.rs            the API",
    ];
    for named in [
        "meanfield.rs",
        "sampler/host.rs",
        "actuator/mod.rs",
        "actuator/file.rs",
        "actuator/webhook.rs",
        "api.rs",
    ] {
        assert!(section_names(&section, named), "{named}");
    }
    for unnamed in ["field.rs", "host.rs", "mod.rs", "file.rs", "api/mod.rs"] {
        assert!(!section_names(&section, unnamed), "{unnamed}");
    }
}
