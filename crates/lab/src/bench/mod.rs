//! Benchmarks, measured side by side in one process.

pub(crate) mod forecast;
pub(crate) mod peer;
pub(crate) mod policies;
pub(crate) mod surrogate;

/// The machine's load average over 1, 5 and 15 minutes (`/proc/loadavg`;
/// `None` where there is none): printed beside timings, since a busy machine
/// slows every contender of a side-by-side run.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    parse_load_average(&text)
}

fn parse_load_average(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(str::parse::<f64>);
    let mut next = || fields.next()?.ok();
    Some([next()?, next()?, next()?])
}

/// `1.79 1.82 1.66`, or `unknown`.
pub fn format_load_average(load: Option<[f64; 3]>) -> String {
    load.map_or_else(
        || "unknown".to_string(),
        |[a, b, c]| format!("{a:.2} {b:.2} {c:.2}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_average_reads_the_first_three_fields() {
        assert_eq!(
            parse_load_average("1.79 1.82 1.66 3/412 5278\n"),
            Some([1.79, 1.82, 1.66])
        );
        assert_eq!(parse_load_average("1.0 x"), None);
        assert_eq!(
            format_load_average(Some([1.0, 0.5, 0.25])),
            "1.00 0.50 0.25"
        );
        assert_eq!(format_load_average(None), "unknown");
    }
}
