//! Benchmarks, measured side by side in one process.

pub mod policies;
pub mod surrogate;

/// The machine's load average over 1, 5 and 15 minutes ("1.83 1.79 1.66"),
/// printed beside every benchmark figure; `None` where /proc is absent.
pub fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let fields: Vec<&str> = text.split_whitespace().take(3).collect();
    (fields.len() == 3).then(|| fields.join(" "))
}
