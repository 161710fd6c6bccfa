//! Everything a plugin prints or returns as text reaches people only through
//! here: its stdout and stderr are captured per call under a byte cap (the
//! excess counted and dropped, never failing the guest's write), and every
//! string is made printable (control characters escaped, so a name or a refusal
//! cannot forge lines) and cut to a length before it is shown or logged.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// What one stream of one call kept, and how much it dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    pub bytes: Vec<u8>,
    pub dropped: u64,
}

#[derive(Debug)]
struct Buffer {
    captured: Captured,
    cap: usize,
}

/// A guest output stream that keeps at most `cap` bytes and drops the rest.
/// Writes always succeed, so a chatty plugin is bounded, not broken.
#[derive(Debug, Clone)]
pub struct CappedPipe {
    buffer: Arc<Mutex<Buffer>>,
}

/// The largest write a guest is permitted at once; it may always write again.
const PERMIT: usize = 64 << 10;

impl CappedPipe {
    pub fn new(cap: usize) -> Self {
        Self {
            buffer: Arc::new(Mutex::new(Buffer {
                captured: Captured::default(),
                cap,
            })),
        }
    }

    /// What was kept and dropped so far; the pipe is left empty.
    pub fn take(&self) -> Captured {
        std::mem::take(&mut self.lock().captured)
    }

    /// What was written so far, left in the pipe, as one line: the non-empty
    /// lines joined by " | ", of which the last `max` bytes or so are kept
    /// (the end of a long trace says most).
    pub fn tail(&self, max: usize) -> String {
        let b = self.lock();
        let text = String::from_utf8_lossy(&b.captured.bytes);
        let joined = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(" | ");
        match joined
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| joined.len() - i <= max)
        {
            Some(0) | None => joined,
            Some(at) => format!("…{}", &joined[at..]),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buffer> {
        // Only whole appends happen under the lock: a poisoned one is still sound.
        self.buffer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn append(&self, bytes: &[u8]) {
        let mut b = self.lock();
        let room = b.cap.saturating_sub(b.captured.bytes.len());
        let kept = bytes.len().min(room);
        b.captured.bytes.extend_from_slice(&bytes[..kept]);
        b.captured.dropped += (bytes.len() - kept) as u64;
    }
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    /// Always ready: the pipe never blocks a writer.
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// A call's stdout and stderr, each capped.
#[derive(Debug, Clone)]
pub struct OutputCapture {
    pub stdout: CappedPipe,
    pub stderr: CappedPipe,
}

/// What a call printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginOutput {
    pub stdout: Captured,
    pub stderr: Captured,
}

impl OutputCapture {
    /// Both streams, `cap` bytes each.
    pub fn new(cap: usize) -> Self {
        Self {
            stdout: CappedPipe::new(cap),
            stderr: CappedPipe::new(cap),
        }
    }

    pub fn take(&self) -> PluginOutput {
        PluginOutput {
            stdout: self.stdout.take(),
            stderr: self.stderr.take(),
        }
    }
}

impl PluginOutput {
    pub fn is_empty(&self) -> bool {
        self.stdout.bytes.is_empty()
            && self.stderr.bytes.is_empty()
            && self.stdout.dropped == 0
            && self.stderr.dropped == 0
    }

    /// Logs every captured line, tagged with the plugin and the tick, and what
    /// was dropped (at `warn`).
    pub fn log(&self, plugin: &str, tick: u64) {
        for (stream, captured) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let text = String::from_utf8_lossy(&captured.bytes);
            let mut lines = text.lines();
            for line in lines.by_ref().take(LINES_PER_CALL) {
                tracing::info!(
                    target: "mfsched::plugin",
                    plugin = %printable(plugin, NAME_BYTES),
                    tick,
                    stream,
                    "{}",
                    printable(line, LINE_BYTES)
                );
            }
            let unlogged = lines.count();
            if unlogged > 0 {
                tracing::warn!(
                    target: "mfsched::plugin",
                    plugin = %printable(plugin, NAME_BYTES),
                    tick,
                    stream,
                    "{unlogged} more line(s) over the per-call cap were not logged"
                );
            }
            if captured.dropped > 0 {
                tracing::warn!(
                    target: "mfsched::plugin",
                    plugin = %printable(plugin, NAME_BYTES),
                    tick,
                    stream,
                    "{} byte(s) of output over the per-call cap were dropped",
                    captured.dropped
                );
            }
        }
    }
}

/// The most of a name shown anywhere.
pub const NAME_BYTES: usize = 200;
/// The most lines of one stream of one call logged.
pub const LINES_PER_CALL: usize = 100;
/// The most of one line of plugin output logged.
pub const LINE_BYTES: usize = 1000;
/// The most of a refusal or other message from a plugin kept anywhere (logs,
/// reports, the decision log).
pub const MESSAGE_BYTES: usize = 4096;

/// The one printable-and-cut helper (in core, so every crate shows outside
/// text the same way).
pub use mfsched_core::printable;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_keeps_its_cap_and_counts_the_rest() {
        let mut pipe = CappedPipe::new(8);
        for _ in 0..3 {
            pipe.write(Bytes::from_static(b"hello"))
                .expect("never fails");
        }
        assert_eq!(pipe.check_write().expect("always"), PERMIT);
        let captured = pipe.take();
        assert_eq!(captured.bytes, b"hellohel");
        assert_eq!(captured.dropped, 7);
        assert_eq!(pipe.take(), Captured::default(), "taking empties it");
        pipe.write(Bytes::from_static(b"a\n\nb\n c\n\n"))
            .expect("never fails");
        assert_eq!(pipe.tail(100), "a | b |  c");
        assert_eq!(pipe.tail(6), "…b |  c");
    }

    #[test]
    fn printable_escapes_control_characters_and_cuts() {
        assert_eq!(printable("ok", 10), "ok");
        assert_eq!(
            printable("x\nok passed \u{1b}[32m", 100),
            "x\\nok passed \\u{1b}[32m"
        );
        let long = "é".repeat(100);
        let cut = printable(&long, 10);
        assert!(cut.starts_with("ééééé…"), "{cut}");
        assert!(cut.ends_with("(190 more bytes)"), "{cut}");
    }
}
