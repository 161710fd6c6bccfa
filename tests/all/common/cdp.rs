//! Headless Chromium driven over the DevTools protocol, as much as the browser
//! tests need: open a page, evaluate script in it, type, take a screenshot,
//! and collect what it reports as errors. The protocol's WebSocket is spoken
//! here (text frames, masked as a client must; no extensions), which is less
//! than a CDP crate and its async runtime would bring in.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::process::Killed;
use std::time::{Duration, Instant};

/// Set in CI: a missing browser fails the browser tests instead of skipping them.
const REQUIRE: &str = "MFSCHED_REQUIRE_CHROMIUM";

/// The browser binary on PATH (Debian's package `chromium`), or `None` with
/// the reason printed: the caller skips.
pub fn chromium_binary() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).find_map(|dir| {
            ["chromium", "chromium-browser", "google-chrome"]
                .iter()
                .map(|name| dir.join(name))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var_os(REQUIRE).is_none(),
            "{REQUIRE} is set but no chromium is on PATH"
        );
        eprintln!("skipped: no chromium on PATH (Debian's package `chromium`)");
    }
    found
}

/// A headless browser with one page open; killed (and waited for) when dropped.
pub struct Browser {
    _process: Killed,
    _profile: tempfile::TempDir,
    page: WebSocket,
    next_id: u64,
    /// Console errors, uncaught exceptions and error log entries (CSP
    /// violations, failed loads), in the order the page reported them.
    pub errors: Vec<String>,
}

impl Browser {
    /// Starts `binary` headless with a fresh profile and a `width`×`height`
    /// window, and attaches to its page.
    pub fn launch(binary: &Path, width: u32, height: u32) -> Self {
        let profile = tempfile::tempdir().expect("a browser profile dir");
        let mut process = Killed(
            Command::new(binary)
                .args([
                    "--headless",
                    // The tests run as root in CI, where the sandbox cannot start.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-extensions",
                    "--disable-background-networking",
                    "--remote-debugging-port=0",
                    "--remote-debugging-address=127.0.0.1",
                    &format!("--window-size={width},{height}"),
                ])
                .arg(format!("--user-data-dir={}", profile.path().display()))
                .arg("about:blank")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start chromium"),
        );
        let stderr = process.0.stderr.take().expect("piped");
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        // Reads stderr to its end, so the browser never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut port_tx = Some(port_tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("DevTools listening on ws://").nth(1)
                    && let Some(tx) = port_tx.take()
                {
                    let _ = tx.send(rest.split(['/', ':']).nth(1).map(str::to_owned));
                }
            }
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(60))
            .ok()
            .flatten()
            .expect("chromium says where DevTools listen");
        let mut browser = Self {
            page: WebSocket::connect(&page_target(&port)),
            _process: process,
            _profile: profile,
            next_id: 0,
            errors: Vec::new(),
        };
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            browser.call(domain, json!({}));
        }
        browser
    }

    /// Sends one command and waits for its answer, noting events meanwhile.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.page
            .send(&json!({ "id": id, "method": method, "params": params }).to_string());
        loop {
            let message: Value =
                serde_json::from_str(&self.page.receive()).expect("a DevTools message is JSON");
            if message["id"].as_u64() == Some(id) {
                assert!(
                    message.get("error").is_none(),
                    "{method} failed: {}",
                    message["error"]
                );
                return message["result"].clone();
            }
            self.note(&message);
        }
    }

    fn note(&mut self, event: &Value) {
        let params = &event["params"];
        let error = match event["method"].as_str() {
            Some("Runtime.consoleAPICalled")
                if matches!(params["type"].as_str(), Some("error" | "assert")) =>
            {
                Some(format!("console.{}: {}", params["type"], params["args"]))
            }
            Some("Runtime.exceptionThrown") => Some(format!(
                "uncaught: {}",
                params["exceptionDetails"]["exception"]["description"]
                    .as_str()
                    .unwrap_or_else(|| params["exceptionDetails"]["text"].as_str().unwrap_or("?"))
            )),
            Some("Log.entryAdded") if params["entry"]["level"] == "error" => Some(format!(
                "{}: {} ({})",
                params["entry"]["source"], params["entry"]["text"], params["entry"]["url"]
            )),
            _ => None,
        };
        self.errors.extend(error);
    }

    /// Opens `url` and waits until the document has loaded.
    pub fn open(&mut self, url: &str) {
        let result = self.call("Page.navigate", json!({ "url": url }));
        assert!(
            result.get("errorText").is_none(),
            "opening {url}: {}",
            result["errorText"]
        );
        self.wait_for(
            "document.readyState === 'complete'",
            Duration::from_secs(60),
        );
    }

    /// The value of `expression` in the page (a promise is awaited).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression} threw: {}",
            result["exceptionDetails"]
        );
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` until it is truthy (JavaScript's sense), and
    /// returns that value; panics after `timeout` (generous: the machine may
    /// be busy, this is no latency test).
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) -> Value {
        let started = Instant::now();
        loop {
            let value = self.eval(&format!(
                "(() => {{ const v = ({expression}); return v ? v : null; }})()"
            ));
            if !value.is_null() {
                return value;
            }
            assert!(
                started.elapsed() < timeout,
                "waited {timeout:?} for {expression}; the page reported {:?}",
                self.errors
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Types `text` into whatever has the focus, as a keyboard would.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// Saves a PNG of the page's viewport.
    pub fn screenshot(&mut self, path: &Path) {
        use base64::Engine;
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        std::fs::write(path, png).expect("write the screenshot");
    }

    /// Reads the events that arrived since the last command, so errors the
    /// page reported while the test waited are in [`Self::errors`].
    pub fn settle(&mut self) {
        self.call("Runtime.evaluate", json!({ "expression": "0" }));
    }
}

/// The WebSocket URL of the browser's page target (`GET /json/list`).
fn page_target(port: &str) -> String {
    let started = Instant::now();
    loop {
        let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).expect("DevTools port");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a read timeout");
        write!(
            stream,
            "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        )
        .expect("ask for the targets");
        // DevTools keeps the connection open: read the head, then Content-Length bytes.
        let head = read_head(&mut stream);
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .expect("a Content-Length");
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).expect("the target list");
        let body = String::from_utf8_lossy(&body);
        let targets: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if let Some(url) = targets
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
        {
            return url.to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "chromium opened no page: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An HTTP response's status line and headers, read up to the blank line.
fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("an HTTP answer");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A client WebSocket carrying text messages.
struct WebSocket {
    stream: TcpStream,
}

impl WebSocket {
    fn connect(url: &str) -> Self {
        let rest = url.strip_prefix("ws://").expect("a ws:// URL");
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut stream = TcpStream::connect(authority).expect("connect to DevTools");
        // No answer in this long means the browser hung: fail, don't wait forever.
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .expect("a read timeout");
        // The key need not be secret (it only proves the server speaks WebSocket).
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: bWZzY2hlZC10ZXN0LWtleQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        )
        .expect("the WebSocket handshake");
        let head = read_head(&mut stream);
        assert!(
            head.starts_with("HTTP/1.1 101"),
            "DevTools refused the WebSocket: {head}"
        );
        Self { stream }
    }

    fn send(&mut self, text: &str) {
        self.frame(0x1, text.as_bytes());
    }

    /// One frame, FIN set, masked (RFC 6455 requires it of a client; any key does).
    fn frame(&mut self, opcode: u8, payload: &[u8]) {
        let mask = [0x6d, 0x66, 0x73, 0x63];
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= usize::from(u16::MAX) => {
                frame.push(0x80 | 126);
                frame.extend((n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend((n as u64).to_be_bytes());
            }
        }
        frame.extend(mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).expect("send to DevTools");
    }

    /// The next text message (fragments joined; pings answered).
    fn receive(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.stream
                .read_exact(&mut head)
                .expect("a frame from DevTools");
            let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
            let len = match head[1] & 0x7f {
                126 => {
                    let mut n = [0u8; 2];
                    self.stream.read_exact(&mut n).expect("a frame length");
                    u64::from(u16::from_be_bytes(n))
                }
                127 => {
                    let mut n = [0u8; 8];
                    self.stream.read_exact(&mut n).expect("a frame length");
                    u64::from_be_bytes(n)
                }
                n => u64::from(n),
            };
            let mut payload = vec![0u8; usize::try_from(len).expect("a frame that fits")];
            self.stream
                .read_exact(&mut payload)
                .expect("a frame's payload");
            match opcode {
                0x0..=0x2 => message.extend(payload),
                0x8 => panic!("DevTools closed the connection"),
                0x9 => self.frame(0xA, &payload),
                _ => {}
            }
            if fin && opcode <= 0x2 {
                return String::from_utf8(message).expect("a text message");
            }
        }
    }
}
