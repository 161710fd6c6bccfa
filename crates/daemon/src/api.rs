//! The HTTP control API (axum). Bound to 127.0.0.1 unless configured otherwise.
//!
//! `GET /healthz`, `GET /v1/state`, `GET /v1/decision`, `GET /v1/policies`,
//! `POST /v1/policies/active` (`{"policy": "name"}`), `GET /metrics`.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::daemon::Shared;
use mfsched_core::domain::KnobSetting;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/state", get(state))
        .route("/v1/decision", get(decision))
        .route("/v1/policies", get(policies))
        .route("/v1/policies/active", post(set_active))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

/// Healthy while ticks keep coming: the last one finished within three periods
/// (at least one second, so a slow first tick is not a failure).
async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let age = shared.since_last_tick();
    let limit = (shared.period * 3).max(Duration::from_secs(1));
    let ticks = shared.metrics.counts().ticks;
    let body = json!({ "ticks": ticks, "last_tick_age_ms": age.as_millis() as u64 });
    if age <= limit {
        (
            StatusCode::OK,
            Json(json!({ "status": "ok", "detail": body })),
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
struct Policies<'a> {
    active: String,
    shadows: &'a [String],
    available: Vec<String>,
}

async fn policies(State(shared): State<Arc<Shared>>) -> Response {
    Json(Policies {
        active: shared.active_policy(),
        shadows: shared.shadows(),
        available: shared.deciding.policies.policies(),
    })
    .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetActive {
    policy: String,
}

async fn set_active(State(shared): State<Arc<Shared>>, Json(body): Json<SetActive>) -> Response {
    match shared.set_active(&body.policy) {
        Ok(()) => Json(json!({ "active": body.policy })).into_response(),
        Err(error) => (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response(),
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        shared.metrics.render(shared.deciding.policies.reloads()),
    )
        .into_response()
}
