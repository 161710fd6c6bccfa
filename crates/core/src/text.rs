//! Outside text shown to people: every string that came from outside (a
//! plugin, a file name, a file's contents) is printed or served through
//! [`printable`], so control characters (newlines, ANSI escapes) are escaped
//! and its length is bounded: it can neither forge a line nor flood a terminal.

use std::path::Path;

/// The most of a path shown in a message.
pub const PATH_BYTES: usize = 512;

/// `text` as one printable line of at most about `max` bytes: control
/// characters (newlines and ANSI escapes included) are escaped, and a longer
/// text is cut on a character boundary with the number of bytes left out.
pub fn printable(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 16);
    let mut used = 0;
    for (at, c) in text.char_indices() {
        if used >= max {
            out.push_str(&format!("… ({} more bytes)", text.len() - at));
            return out;
        }
        if c.is_control() {
            let escaped: String = c.escape_default().collect();
            used += escaped.len();
            out.push_str(&escaped);
        } else {
            used += c.len_utf8();
            out.push(c);
        }
    }
    out
}

/// A path as one printable line of at most [`PATH_BYTES`].
pub fn path(p: &Path) -> String {
    printable(&p.to_string_lossy(), PATH_BYTES)
}

/// The most of a TOML parser's message shown.
const TOML_MESSAGE_BYTES: usize = 1024;

/// A TOML error of `text` as one line: the line it is on and the parser's
/// message (which names the key). The parser's own rendering quotes the
/// offending line whole, which for a hostile file (a 200,000-deep nesting, a
/// 1 MiB value on one line) is most of the file.
pub fn toml_error(e: &toml::de::Error, text: &str) -> String {
    let message = printable(e.message().trim(), TOML_MESSAGE_BYTES);
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}

/// An error and its causes on one line, `outer: cause: root` (as anyhow's
/// `{:#}` shows them), for a typed error that ends up as a recorded message.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_reads_outer_to_root() {
        let root = anyhow::anyhow!("device lost").context("joint call");
        let boxed: Box<dyn std::error::Error + Send + Sync> = root.into();
        let e = crate::PredictError::backend(boxed);
        assert_eq!(error_chain(&e), "inference failed: joint call: device lost");
    }

    #[test]
    fn a_path_with_escapes_is_shown_escaped() {
        let p = Path::new("/plugins/<img src=x onerror=alert(5)>\u{1b}[31m.wasm");
        let shown = path(p);
        assert!(!shown.contains('\u{1b}'), "{shown}");
        assert!(shown.contains("\\u{1b}[31m"), "{shown}");
    }

    #[test]
    fn a_toml_error_is_one_bounded_line_whatever_the_file() {
        let deep = format!("x = {}{}", "[".repeat(200_000), "]".repeat(200_000));
        let e = toml::from_str::<toml::Table>(&deep).expect_err("too deep");
        let line = toml_error(&e, &deep);
        assert!(line.starts_with("line 1: "), "{line}");
        assert!(
            !line.contains('\n') && line.len() < 2 * TOML_MESSAGE_BYTES,
            "{line}"
        );
        let text = "a = 1\nb = [1,\n";
        let e = toml::from_str::<toml::Table>(text).expect_err("unclosed");
        assert!(
            toml_error(&e, text).starts_with("line 2: "),
            "{}",
            toml_error(&e, text)
        );
    }
}
