//! Helpers shared by the end-to-end tests.

pub mod cdp;
pub mod process;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The API token the end-to-end tests configure.
pub const TOKEN: &str = "test-token-3f9c";

/// The workspace's root directory (the product crate sits two levels below).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/mfsched sits two levels below the workspace root")
        .to_path_buf()
}

/// A test component built by `crates/test-programs` (hostile policies, test
/// utilities).
pub fn test_plugin(name: &str) -> PathBuf {
    Path::new(mfsched_test_programs::TEST_PLUGINS_DIR).join(format!("{name}.wasm"))
}

/// `dir/plugins`, created, holding each `(test component, file stem)` as
/// `STEM.wasm`: a daemon's `plugin_dir = "plugins"`.
pub fn plugin_dir(dir: &Path, components: &[(&str, &str)]) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins).expect("plugin dir");
    for (component, stem) in components {
        std::fs::copy(test_plugin(component), plugins.join(format!("{stem}.wasm")))
            .expect("copy a test component");
    }
    plugins
}

/// A minimal blocking HTTP/1.1 exchange: returns (status code, body).
pub fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    http_with(addr, method, path, body, &[])
}

/// [`http`] with extra headers (`Authorization`, another `Host`, …); a `Host`
/// given here replaces the default one.
pub fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String) {
    try_http(addr, method, path, body, headers).expect("an HTTP exchange with the server")
}

/// [`http_with`] that says why instead of panicking (for servers a test kills).
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let body = body.unwrap_or("");
    let mut extra = String::new();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        extra.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        extra.push_str(&format!("{k}: {v}\r\n"));
    }
    let request = format!(
        "{method} {path} HTTP/1.1\r\n{extra}Connection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    // Bodies may be chunked; the tests only look for substrings in them.
    Ok((status, body))
}

/// `Authorization: Bearer` [`TOKEN`].
pub fn bearer() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TOKEN}"))
}

/// Writes `dir/mfsched.toml` for a bounded daemon run on `scenario`: ticks
/// every `period_ms` (deadline three quarters of it), footprint sampler, the
/// log in `dir`, the API on any free loopback port. `policy` is the body of
/// the `[policy]` table; `extra` is appended (e.g. a `[workload]` table).
pub fn daemon_config(
    dir: &Path,
    scenario: &str,
    period_ms: u64,
    policy: &str,
    extra: &str,
) -> PathBuf {
    let path = dir.join("mfsched.toml");
    let deadline_ms = period_ms * 3 / 4;
    std::fs::write(
        &path,
        format!(
            "scenario = \"{scenario}\"\nseed = 7\n\n[loop]\nperiod_ms = {period_ms}\n\
             deadline_ms = {deadline_ms}\n\n[policy]\n{policy}\n\n[sampler]\n\
             kind = \"footprint\"\n\n[log]\npath = \"decisions.log\"\n\n[api]\n\
             listen = \"127.0.0.1:0\"\n\n{extra}\n"
        ),
    )
    .expect("write the daemon config");
    path
}

/// Polls `check` every 100 ms until it gives a value; panics after `limit`
/// with `what` and the tails of `logs` (the processes' stderr).
pub fn wait_for<T>(
    limit: Duration,
    what: &str,
    logs: &[&Path],
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if start.elapsed() > limit {
            let tails: Vec<String> = logs
                .iter()
                .map(|p| {
                    let text = std::fs::read_to_string(p).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(20).collect();
                    format!(
                        "--- {}:\n{}",
                        p.display(),
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                })
                .collect();
            panic!("{what}: not within {limit:?}\n{}", tails.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `n` in unsigned LEB128 (how Wasm encodes sizes and counts), appended to `out`.
pub fn leb128(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A custom section (id 0): its name and bytes, sizes in unsigned LEB128.
pub fn custom_section(name: &str, data: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    leb128(name.len() as u64, &mut payload);
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(data);
    let mut section = vec![0];
    leb128(payload.len() as u64, &mut section);
    section.extend(payload);
    section
}

/// Whether a GPU adapter is there; without one the test skips, unless
/// `MFSCHED_REQUIRE_GPU_ADAPTER=1` (CI) makes that a failure.
pub fn gpu_adapter(test: &str) -> bool {
    gpu_adapter_with(test, mfsched_surrogate::AdapterFeatures::empty())
}

/// [`gpu_adapter`] for a test that also needs some of the adapter's optional
/// features.
pub fn gpu_adapter_with(test: &str, features: mfsched_surrogate::AdapterFeatures) -> bool {
    match mfsched_surrogate::adapter_gate_with(test, features).expect("a GPU adapter is required") {
        Ok(_) => true,
        Err(why) => {
            eprintln!("skipping {test}: {why}");
            false
        }
    }
}

/// A page standing in for servers' metrics (not a server): on its n-th
/// connection it answers `page(n)` as `text/plain`, whatever was asked.
pub fn metrics_page(page: impl Fn(usize) -> String + Send + 'static) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = page(n);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// A counter or gauge's value on a `/metrics` page (the first sample of that line).
pub fn metric(page: &str, line_start: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Pids of live processes whose command line (arguments joined by spaces)
/// satisfies `wanted`; zombies have none.
pub fn pids_where(wanted: impl Fn(&str) -> bool) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        wanted(&String::from_utf8_lossy(&cmd).replace('\0', " ")).then_some(pid)
    })
    .collect()
}
