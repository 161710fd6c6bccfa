//! The pages mfsched serves and writes, in a real headless Chromium: the
//! daemon's live dashboard (ticks appear, the policy is switched through the
//! page with the token) and the HTML report of `mfsched ab`, both without a
//! console error. Skipped, with the reason printed, where no chromium is
//! installed, unless `MFSCHED_REQUIRE_CHROMIUM` is set (as `.ci/run` does).

use std::time::Duration;

use crate::common::{self, cdp::Browser, process::mfsched};

/// Generous: the browser and the daemon share a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(180);

#[test]
fn the_dashboard_charts_live_ticks_and_switches_the_policy_with_the_token() {
    let Some(chromium) = common::cdp::chromium_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // The simulated card; reads need the token too, so the page must send it.
    let config = dir.path().join("mfsched.toml");
    std::fs::write(
        &config,
        "scenario = \"paper-n3\"\nseed = 7\n\n[loop]\nperiod_ms = 200\ndeadline_ms = 150\n\n\
         [policy]\nactive = \"static-budget\"\nshadows = [\"hold\"]\n\n[sampler]\nkind = \"sim\"\n\n\
         [workload]\ntrace = \"periodic\"\n\n[log]\npath = \"decisions.log\"\n\n\
         [api]\nlisten = \"127.0.0.1:0\"\nauth_reads = true\n",
    )
    .expect("write the config");
    let (child, _daemon_err, addr) = common::process::start_daemon(&config);
    let _daemon = common::process::Killed(child);

    let mut browser = Browser::launch(&chromium, 1300, 1800);
    browser.open(&format!("http://{addr}/"));
    // Without the token the page loads but can read nothing.
    browser.wait_for(
        "document.getElementById('status').textContent.includes('needs the API token')",
        WAIT,
    );
    // Refused reads are all the page may have reported so far.
    browser.settle();
    for error in std::mem::take(&mut browser.errors) {
        assert!(
            error.contains("401") && error.contains("/v1/history"),
            "{error}"
        );
    }
    browser.eval("document.getElementById('token').focus()");
    browser.type_text(common::TOKEN);
    browser.eval("document.querySelector('#token-form button').click()");
    browser.wait_for(
        "Number(document.getElementById('tick-info').dataset.ticks) >= 20",
        WAIT,
    );
    let rows = browser.eval("document.querySelectorAll('#policies tbody tr').length");
    assert_eq!(rows, 2, "the active policy and its shadow");

    browser.wait_for(
        "[...document.getElementById('switch-policy').options].some(o => o.value === 'ga')",
        WAIT,
    );
    browser.eval(
        "document.getElementById('switch-policy').value = 'ga'; \
         document.getElementById('switch').click()",
    );
    browser.wait_for(
        "document.getElementById('switch-result').textContent.includes('now ga')",
        WAIT,
    );
    let (auth, bearer) = common::bearer();
    let (status, policies) =
        common::http_with(addr, "GET", "/v1/policies", None, &[(auth, &bearer)]);
    assert_eq!(status, 200, "{policies}");
    let policies: serde_json::Value = serde_json::from_str(&policies).expect("JSON");
    assert_eq!(policies["active"], "ga", "{policies}");
    // The switch shows as an event, and ga's ticks reach the charts.
    browser.wait_for(
        "document.getElementById('events').textContent.includes('static-budget → ga')",
        WAIT,
    );
    // ga's first answers (decisions or failures) are counted in its row.
    browser.wait_for(
        "(() => { const cells = document.querySelector('#policies tbody tr').cells; \
         return cells[1].textContent === 'ga' \
             && Number(cells[2].textContent) + Number(cells[5].textContent) > 0; })()",
        WAIT,
    );
    browser.screenshot(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png"));
    browser.settle();
    assert!(browser.errors.is_empty(), "{:#?}", browser.errors);
}

#[test]
fn the_html_report_renders_without_console_errors() {
    let Some(chromium) = common::cdp::chromium_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mfsched(&[
        "ab",
        "--a",
        "static-budget",
        "--b",
        "static-budget:k=500",
        "--scenarios",
        "steady",
        "--ticks",
        "2",
        "--out",
        dir.path().to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", common::process::stderr(&out));
    let report = dir.path().join("report.html");
    let mut browser = Browser::launch(&chromium, 1200, 1600);
    browser.open(&format!("file://{}", report.display()));
    let charts = browser.eval("document.querySelectorAll('svg').length");
    assert!(charts.as_u64().is_some_and(|n| n > 0), "{charts}");
    browser.screenshot(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("report.png"));
    browser.settle();
    assert!(browser.errors.is_empty(), "{:#?}", browser.errors);
}
