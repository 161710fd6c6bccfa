//! The HTTP control API (axum routes on the daemon's own accept loop). Bound to
//! 127.0.0.1 unless configured otherwise.
//!
//! `GET /healthz`, `GET /v1/state`, `GET /v1/decision`, `GET /v1/policies`
//! (each policy's component hash and declared metadata),
//! `POST /v1/policies/active` (`{"policy": "name"}`), `POST` and `DELETE
//! /v1/policies/shadows` (`{"policy": "name"}`: a shadow added or removed at
//! run time), `GET /metrics`,
//! `GET /v1/history?since=TICK&events_since=SEQ` (the newest ticks and events
//! the dashboard charts, from bounded rings: [`crate::history`]), and the
//! dashboard itself: `GET /`, `/dashboard.js`, `/dashboard.css`
//! ([`crate::dashboard`]).
//!
//! Every request passes the [`Guard`]: its `Host` must be a loopback name, the
//! listen address or an allowed host (a page that rebinds its own DNS name to
//! 127.0.0.1 sends its own); changes need the bearer token (reads too with
//! `api.auth_reads`, all but the dashboard's own files, which hold no data);
//! bodies are capped and requests time out. The accept loop ([`serve`]) caps
//! open connections (at the cap, a connection still waiting for its request's
//! headers gives way to a new one) and the time a client has to send its
//! headers. It runs on a runtime of its own, so no client load reaches the
//! tick loop's threads.

use anyhow::{Result, bail};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::config::{ApiConfig, TOKEN_ENV};
use super::daemon::Shared;
use super::dashboard;
use super::metrics::Metrics;
use mfsched_core::KnobSetting;

/// Who may call the API and how much a request may take.
#[derive(Clone)]
pub struct Guard {
    token: Option<Arc<str>>,
    auth_reads: bool,
    /// Lower-case host names (no port) a `Host` header may carry.
    hosts: Arc<Vec<String>>,
    request_timeout: Duration,
    max_body_bytes: usize,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("auth_reads", &self.auth_reads)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// The guard of an API config. A `listen` address off loopback without a
    /// token, or `auth_reads` without one, is refused: nothing would guard it.
    pub fn from_config(api: &ApiConfig) -> Result<Self> {
        let token = api.token()?;
        if token.is_none() && !api.listen.ip().is_loopback() {
            bail!(
                "api.listen {} is not a loopback address and the API has no token: set api.token_file or {TOKEN_ENV}",
                api.listen
            );
        }
        if token.is_none() && api.auth_reads {
            bail!("api.auth_reads needs a token: set api.token_file or {TOKEN_ENV}");
        }
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        hosts.push(api.listen.ip().to_string());
        hosts.extend(api.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
        Ok(Self {
            token: token.map(Arc::from),
            auth_reads: api.auth_reads,
            hosts: Arc::new(hosts),
            request_timeout: Duration::from_millis(api.request_timeout_ms),
            max_body_bytes: api.max_body_bytes,
        })
    }

    /// A guard for tests and embedding: loopback hosts, this token (if any).
    pub fn loopback(token: Option<&str>) -> Self {
        let api = ApiConfig::default();
        Self {
            token: token.map(Arc::from),
            auth_reads: false,
            hosts: Arc::new(vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]),
            request_timeout: Duration::from_millis(api.request_timeout_ms),
            max_body_bytes: api.max_body_bytes,
        }
    }

    /// Whether the API has a token (mutating endpoints are refused without one).
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        // `[::1]:9464`, `127.0.0.1:9464`, `localhost`: the name without the port.
        let name = match host.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(""),
            None => host.split(':').next().unwrap_or(""),
        };
        self.hosts.iter().any(|h| h == name)
    }

    fn authorised(&self, req: &Request) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        constant_time_eq(given.as_bytes(), token.as_bytes())
    }
}

/// Compares without an early exit, so the time taken says nothing of the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn refuse(status: StatusCode, error: &str) -> Response {
    (status, Json(json!({ "error": error }))).into_response()
}

/// The guard in front of every route: Host, token, request time.
async fn guard(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !guard.host_allowed(host) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this Host is not allowed (see api.allowed_hosts)",
        );
    }
    let reading = matches!(*req.method(), Method::GET | Method::HEAD);
    // The dashboard's own files hold no data; what they fetch is guarded.
    let page_file = reading && dashboard::PATHS.contains(&req.uri().path());
    if !reading && !guard.has_token() {
        return refuse(
            StatusCode::FORBIDDEN,
            "changes need the API token, and none is configured: set api.token_file or MFSCHED_API_TOKEN",
        );
    }
    if (!reading || (guard.auth_reads && !page_file)) && !guard.authorised(&req) {
        let mut response = refuse(
            StatusCode::UNAUTHORIZED,
            "a valid `Authorization: Bearer <token>` header is required",
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return response;
    }
    match tokio::time::timeout(guard.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => refuse(StatusCode::REQUEST_TIMEOUT, "the request took too long"),
    }
}

pub fn router(shared: Arc<Shared>, guard_config: Guard) -> Router {
    let body_limit = guard_config.max_body_bytes;
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/state", get(state))
        .route("/v1/decision", get(decision))
        .route("/v1/policies", get(policies))
        .route("/v1/policies/active", post(set_active))
        .route(
            "/v1/policies/shadows",
            post(add_shadow).delete(remove_shadow),
        )
        .route("/metrics", get(metrics))
        .route("/v1/history", get(history))
        .merge(dashboard::routes())
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(guard_config, guard))
        .layer(middleware::from_fn(nosniff))
        .with_state(shared)
}

/// On every answer, refusals included: a browser must take the declared
/// type, never guess (JSON that carries plugin-chosen text is not HTML).
async fn nosniff(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// Limits of the accept loop.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    /// The longest a connection stays open, whatever it does.
    pub connection_lifetime: Duration,
}

impl ServeLimits {
    pub fn from_config(api: &ApiConfig) -> Self {
        let header_timeout = Duration::from_millis(api.header_timeout_ms);
        Self {
            max_connections: api.max_connections,
            header_timeout,
            connection_lifetime: header_timeout + Duration::from_millis(api.request_timeout_ms),
        }
    }
}

/// An open connection, as the accept loop tracks it.
struct Open {
    /// Its request's headers have arrived (the service was called).
    headers_read: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

/// How long a connection that arrives at the cap has to show a whole request
/// head before it is refused.
const TRIAGE: Duration = Duration::from_secs(1);

/// Bytes of a request head a connection at the cap may show: a liveness probe
/// or a scrape sends a few hundred.
const TRIAGE_BYTES: usize = 8 << 10;

/// Connections held aside at once, per slot: each costs a descriptor and a
/// timer, not a slot, so a flood of half-sent ones fills these, not the API.
const TRIAGE_PER_SLOT: usize = 4;

/// Serves `app` on `listener` until `shutdown` resolves: one request per
/// connection (no keep-alive), headers within `header_timeout`, every
/// connection closed after `connection_lifetime`, at most `max_connections`
/// open.
///
/// At the cap, a new connection whose whole request head has arrived (at
/// once, or while it is held aside for up to [`TRIAGE`], not in a slot) takes
/// the place of
/// the oldest open connection still waiting for its headers (evicted,
/// counted), so clients holding half-sent requests open, however fast they
/// reconnect, cannot keep out one that sends its request at once (a liveness
/// probe, a scraper); a half-sent newcomer evicts nobody. It is refused
/// (closed, counted) when its head does not arrive in time, when
/// [`TRIAGE_PER_SLOT`] per slot are already held aside, or when every open
/// connection is in the middle of a request.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ServeLimits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    // In accept order: the first waiting for its headers is the oldest.
    let mut open: Vec<Open> = Vec::with_capacity(limits.max_connections);
    let triage_cap = limits.max_connections * TRIAGE_PER_SLOT;
    let (triaged_tx, mut triaged) = tokio::sync::mpsc::channel(triage_cap.max(1));
    let mut in_triage = 0usize;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: back off, keep serving.
                    tracing::warn!("api: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(ready) = triaged.recv() => {
                in_triage -= 1;
                match ready {
                    Some(stream) => admit(&mut open, stream, &app, limits, &metrics),
                    None => metrics.api_connection_refused(),
                }
                continue;
            }
            () = &mut shutdown => break,
        };
        open.retain(|c| !c.task.is_finished());
        if open.len() < limits.max_connections || head(&stream).await == Head::Whole {
            admit(&mut open, stream, &app, limits, &metrics);
        } else if in_triage < triage_cap {
            in_triage += 1;
            let triaged_tx = triaged_tx.clone();
            tokio::spawn(async move {
                let ready = whole_head_within(stream, TRIAGE).await;
                // The loop may have stopped: the stream is dropped, closed.
                let _ = triaged_tx.send(ready).await;
            });
        } else {
            metrics.api_connection_refused();
        }
    }
}

/// Serves `stream` in a free slot, else in the place of the oldest connection
/// still waiting for its headers; refused when every open one is mid-request.
fn admit(
    open: &mut Vec<Open>,
    stream: tokio::net::TcpStream,
    app: &Router,
    limits: ServeLimits,
    metrics: &Metrics,
) {
    open.retain(|c| !c.task.is_finished());
    if open.len() < limits.max_connections || evict_oldest_waiting(open, metrics) {
        open.push(start_connection(stream, app, limits));
    } else {
        metrics.api_connection_refused();
    }
}

/// Closes the oldest open connection whose request's headers have not
/// arrived; `false` when every one is in the middle of a request.
fn evict_oldest_waiting(open: &mut Vec<Open>, metrics: &Metrics) -> bool {
    let Some(oldest) = open
        .iter()
        .position(|c| !c.headers_read.load(Ordering::Acquire))
    else {
        return false;
    };
    // Aborting drops the connection's future: its socket closes.
    open.remove(oldest).task.abort();
    metrics.api_connection_evicted();
    true
}

/// How much of a request head a connection's receive buffer holds now.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// Up to the blank line, within [`TRIAGE_BYTES`].
    Whole,
    /// Not yet (possibly nothing).
    Partial,
    /// Closed, failed, or [`TRIAGE_BYTES`] without an end: it never will be.
    Never,
}

/// Peeks, without waiting (the connection reads the request afresh).
async fn head(stream: &tokio::net::TcpStream) -> Head {
    let mut buf = [0u8; TRIAGE_BYTES];
    // A zero timeout still polls the peek once: data already buffered counts.
    match tokio::time::timeout(Duration::ZERO, stream.peek(&mut buf)).await {
        Err(_) => Head::Partial,
        Ok(Err(_) | Ok(0)) => Head::Never,
        Ok(Ok(n)) if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") => Head::Whole,
        Ok(Ok(n)) if n == buf.len() => Head::Never,
        Ok(Ok(_)) => Head::Partial,
    }
}

/// The stream back once its whole request head is buffered, within `wait`;
/// `None` otherwise.
async fn whole_head_within(
    stream: tokio::net::TcpStream,
    wait: Duration,
) -> Option<tokio::net::TcpStream> {
    let until = tokio::time::Instant::now() + wait;
    loop {
        match head(&stream).await {
            Head::Whole => return Some(stream),
            Head::Never => return None,
            // Peeking again at once would find the same bytes.
            Head::Partial if tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Head::Partial => return None,
        }
    }
}

/// Serves one connection on a task of its own, its head flagged when read.
fn start_connection(stream: tokio::net::TcpStream, app: &Router, limits: ServeLimits) -> Open {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let headers_read = Arc::new(AtomicBool::new(false));
    let service = {
        let inner = TowerToHyperService::new(app.clone());
        let flag = Arc::clone(&headers_read);
        hyper::service::service_fn(move |req| {
            flag.store(true, Ordering::Release);
            hyper::service::Service::call(&inner, req)
        })
    };
    let task = tokio::spawn(async move {
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(false)
            .serve_connection(TokioIo::new(stream), service);
        // A connection past its lifetime is dropped, closing the socket.
        let _ = tokio::time::timeout(limits.connection_lifetime, connection).await;
    });
    Open {
        headers_read,
        task: task.abort_handle(),
    }
}

/// Healthy while ticks keep coming: the last one finished within three periods
/// (at least one second, so a slow first tick is not a failure); before the
/// first, `starting` while it may still be waiting for the servers it brings
/// up and the load's first readings (`Daemon::start_up`).
async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let age = shared.since_last_tick();
    let ticks = shared.metrics.counts().ticks;
    let starting = ticks == 0;
    let limit = (shared.period * 3).max(Duration::from_secs(1))
        + if starting {
            shared.first_tick_wait
        } else {
            Duration::ZERO
        };
    let body = json!({ "ticks": ticks, "last_tick_age_ms": age.as_millis() as u64 });
    if age <= limit {
        let status = if starting { "starting" } else { "ok" };
        (
            StatusCode::OK,
            Json(json!({ "status": status, "detail": body })),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "stalled", "detail": body })),
        )
            .into_response()
    }
}

fn no_tick_yet() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "error": "no tick has run yet" })),
    )
        .into_response()
}

async fn state(State(shared): State<Arc<Shared>>) -> Response {
    match shared.last_record() {
        Some(r) => {
            Json(json!({ "tick": r.tick, "sample": r.sample, "state": r.state })).into_response()
        }
        None => no_tick_yet(),
    }
}

async fn decision(State(shared): State<Arc<Shared>>) -> Response {
    let Some(r) = shared.last_record() else {
        return no_tick_yet();
    };
    let knobs: BTreeMap<&str, KnobSetting> = shared
        .problem
        .models
        .iter()
        .zip(&r.applied)
        .map(|(m, &c)| (m.name.as_str(), m.knobs(c as usize)))
        .collect();
    Json(json!({ "applied_knobs": knobs, "record": &*r })).into_response()
}

#[derive(Debug, Serialize)]
struct Policies {
    active: String,
    shadows: Vec<String>,
    available: Vec<String>,
    /// SHA-256 of the component behind each available policy (not `hold`).
    components: BTreeMap<String, String>,
    /// What each component declares about itself (name, version, authors),
    /// where it declares anything.
    metadata: BTreeMap<String, mfsched_plugin_host::ComponentMetadata>,
}

async fn policies(State(shared): State<Arc<Shared>>) -> Response {
    let available = shared.deciding.policies.policies();
    Json(Policies {
        active: shared.active_policy(),
        shadows: shared.shadows(),
        components: available
            .iter()
            .filter_map(|p| Some((p.clone(), shared.deciding.identity(p)?.sha256)))
            .collect(),
        metadata: available
            .iter()
            .filter_map(|p| Some((p.clone(), shared.deciding.identity(p)?.metadata)))
            .filter(|(_, m)| *m != Default::default())
            .collect(),
        available,
    })
    .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetActive {
    policy: String,
}

/// A JSON request body; one that is not the JSON asked for is refused as
/// every other refusal is (`{"error": …}`), saying what to send instead.
struct ApiJson<T>(T);

impl<S, T> axum::extract::FromRequest<S> for ApiJson<T>
where
    Json<T>: axum::extract::FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(body)) => Ok(Self(body)),
            Err(rejection) => {
                let hint = match &rejection {
                    JsonRejection::MissingJsonContentType(_) => {
                        ": send the header Content-Type: application/json"
                    }
                    _ => ": the body is {\"policy\": \"NAME\"}",
                };
                Err(refuse(
                    rejection.status(),
                    &format!("{}{hint}", rejection.body_text()),
                ))
            }
        }
    }
}

async fn set_active(
    State(shared): State<Arc<Shared>>,
    ApiJson(body): ApiJson<SetActive>,
) -> Response {
    if let Err(error) = shared.loaded(&body.policy) {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response();
    }
    // A policy that cannot decide at all (exact with a utility that is not
    // additive) is refused here as a start-up with it is, not left failing.
    let trial = {
        let (shared, policy) = (Arc::clone(&shared), body.policy.clone());
        tokio::task::spawn_blocking(move || {
            shared.deciding.trial(
                &policy,
                &shared.problem,
                shared.floors.out_of_reach,
                shared.deadline,
            )
        })
        .await
    };
    match trial {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => {
            let error = format!(
                "policy '{}' cannot decide: {}; the active policy stays",
                body.policy,
                mfsched_core::printable(&failure.of_the_policy(), 300)
            );
            return (StatusCode::CONFLICT, Json(json!({ "error": error }))).into_response();
        }
        Err(e) => {
            let error = format!("the trial decision did not finish: {e}");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({ "error": error })),
            )
                .into_response();
        }
    }
    match shared.set_active(&body.policy) {
        Ok(()) => Json(json!({ "active": body.policy })).into_response(),
        Err(error) => (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShadowChange {
    policy: String,
}

/// `POST /v1/policies/shadows` (`{"policy": "name"}`): decided beside the
/// active policy from the next tick on; answers the shadows now.
async fn add_shadow(
    State(shared): State<Arc<Shared>>,
    ApiJson(body): ApiJson<ShadowChange>,
) -> Response {
    match shared.add_shadow(&body.policy) {
        Ok(shadows) => Json(json!({ "shadows": shadows })).into_response(),
        Err(error) => refuse(StatusCode::BAD_REQUEST, &error),
    }
}

/// `DELETE /v1/policies/shadows` (`{"policy": "name"}`): no longer asked
/// from the next tick on; answers the shadows now.
async fn remove_shadow(
    State(shared): State<Arc<Shared>>,
    ApiJson(body): ApiJson<ShadowChange>,
) -> Response {
    match shared.remove_shadow(&body.policy) {
        Ok(shadows) => Json(json!({ "shadows": shadows })).into_response(),
        Err(error) => refuse(StatusCode::NOT_FOUND, &error),
    }
}

/// The dashboard's data: the ticks after `since` and the events after
/// `events_since` (everything kept when absent), bounded by the rings, with
/// what does not change (models, floors, the VRAM cap) beside them.
async fn history(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let mut since = None;
    let mut events_since = 0;
    for (key, value) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        match (&*key, value.parse::<u64>()) {
            ("since", Ok(n)) => since = Some(n),
            ("events_since", Ok(n)) => events_since = n,
            _ => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "the query takes since and events_since: a tick and an event number",
                );
            }
        }
    }
    let snapshot = shared.history.since(since, events_since);
    let models: Vec<_> = shared
        .problem
        .models
        .iter()
        .zip(shared.floors.declared.iter().zip(&shared.problem.sla_floors))
        .map(|(m, (floor, enforced))| {
            json!({ "name": m.name, "unit": m.unit, "floor": floor, "enforced_floor": enforced })
        })
        .collect();
    Json(json!({
        "run_started_ms": shared.history.run_started_ms,
        "period_ms": shared.period.as_millis() as u64,
        "ticks_kept": super::history::TICKS_KEPT,
        "vram_cap_mib": shared.problem.card.vram_mib,
        "models": models,
        "active": shared.active_policy(),
        "shadows": shared.shadows(),
        "ticks": snapshot.ticks.iter().map(|t| &**t).collect::<Vec<_>>(),
        "dropped_ticks": snapshot.dropped_ticks,
        "events": snapshot.events.iter().map(|e| &**e).collect::<Vec<_>>(),
        "totals": snapshot.totals,
    }))
    .into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        shared.metrics.render(shared.deciding.reloads()),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unguarded_api_off_loopback_is_refused() {
        let api = ApiConfig {
            listen: "0.0.0.0:9464".parse().expect("address"),
            ..ApiConfig::default()
        };
        let err = Guard::from_config(&api).expect_err("no token off loopback");
        assert!(err.to_string().contains("not a loopback address"), "{err}");
        let reads = ApiConfig {
            auth_reads: true,
            ..ApiConfig::default()
        };
        assert!(
            Guard::from_config(&reads).is_err(),
            "auth_reads needs a token"
        );
        assert!(Guard::from_config(&ApiConfig::default()).is_ok());
    }

    #[test]
    fn hosts_are_matched_without_their_port() {
        let guard = Guard::loopback(None);
        for ok in ["127.0.0.1:9464", "localhost", "LOCALHOST:1", "[::1]:9464"] {
            assert!(guard.host_allowed(ok), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:9464",
            "127.0.0.1.evil",
            "",
        ] {
            assert!(!guard.host_allowed(bad), "{bad}");
        }
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"abc", b"ab"));
    }
}
