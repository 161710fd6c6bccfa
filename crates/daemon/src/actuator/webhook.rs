//! The webhook actuator: per model, the new configuration POSTed as JSON over
//! plain HTTP, with a timeout and retries. Each model has its own sender task
//! fed through a `watch` channel, so a slow server never delays a tick and only
//! the newest configuration is sent when several changes queue up.

use http_body_util::Full;
use hyper::body::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use super::{BodyClient, ModelUpdate};
use crate::config::WebhookConfig;
use crate::metrics::Metrics;

pub(super) async fn sender(
    client: BodyClient,
    uri: hyper::Uri,
    config: WebhookConfig,
    mut rx: watch::Receiver<Option<ModelUpdate>>,
    metrics: Arc<Metrics>,
) {
    // `changed` fails once the daemon drops the sender: that is the stop signal.
    while rx.changed().await.is_ok() {
        let Some(update) = rx.borrow_and_update().clone() else {
            continue;
        };
        let body = match serde_json::to_vec(&update) {
            Ok(b) => Bytes::from(b),
            Err(_) => {
                metrics.actuator_result("webhook", false);
                continue;
            }
        };
        let mut delivered = false;
        for attempt in 0..=config.retries {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
            if post(&client, &uri, body.clone(), config.timeout_ms).await {
                delivered = true;
                break;
            }
        }
        metrics.actuator_result("webhook", delivered);
    }
}

async fn post(client: &BodyClient, uri: &hyper::Uri, body: Bytes, timeout_ms: u64) -> bool {
    let Ok(request) = hyper::Request::post(uri.clone())
        .header("content-type", "application/json")
        .body(Full::new(body))
    else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(timeout_ms), client.request(request)).await,
        Ok(Ok(response)) if response.status().is_success()
    )
}
