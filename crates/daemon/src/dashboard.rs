//! The live dashboard at `/`: one HTML page, its script and its style sheet,
//! kept as files beside this one and embedded in the binary (no CDN, works
//! offline). The page polls `GET /v1/history` and `GET /v1/policies` and
//! switches the active policy through `POST /v1/policies/active` with the API
//! token the user types in (kept in the tab's sessionStorage, sent as
//! `Authorization: Bearer`, never in a URL).
//!
//! The files carry no data, so they are served without the token even with
//! `api.auth_reads` (a browser cannot send a bearer header when it navigates);
//! everything they read still passes the token check.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

/// No inline script or style, nothing from another origin, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The paths the dashboard's files are served at; the last one answers a
/// browser's own request for an icon, with nothing.
pub const PATHS: [&str; 4] = ["/", "/dashboard.js", "/dashboard.css", "/favicon.ico"];

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// The dashboard's routes, for the API's router.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            PATHS[0],
            get(|| file("text/html; charset=utf-8", INDEX_HTML)),
        )
        .route(
            PATHS[1],
            get(|| file("text/javascript; charset=utf-8", SCRIPT)),
        )
        .route(PATHS[2], get(|| file("text/css; charset=utf-8", STYLE)))
        .route(PATHS[3], get(|| async { StatusCode::NO_CONTENT }))
}

async fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
