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
use crate::streak::Streaks;

pub(super) async fn sender(
    client: BodyClient,
    uri: hyper::Uri,
    config: WebhookConfig,
    mut rx: watch::Receiver<Option<ModelUpdate>>,
    metrics: Arc<Metrics>,
) {
    // This URL's run of failed deliveries (one line per edge).
    let mut failures = Streaks::default();
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
        let mut failure = None;
        for attempt in 0..=config.retries {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
            match post(&client, &uri, body.clone(), config.timeout_ms).await {
                Ok(()) => {
                    failure = None;
                    break;
                }
                Err(why) => failure = Some(why),
            }
        }
        metrics.actuator_result("webhook", failure.is_none());
        let failure = failure.map(|why| {
            format!(
                "POST {uri}: {why} ({} attempt(s))",
                u64::from(config.retries) + 1
            )
        });
        super::failure_edge(
            &mut failures,
            &format!("actuator.webhook.urls.{}", update.model),
            failure.as_deref(),
        );
    }
}

/// One POST within `timeout_ms`; why it failed otherwise.
async fn post(
    client: &BodyClient,
    uri: &hyper::Uri,
    body: Bytes,
    timeout_ms: u64,
) -> Result<(), String> {
    let request = hyper::Request::post(uri.clone())
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_millis(timeout_ms), client.request(request)).await {
        Ok(Ok(response)) if response.status().is_success() => Ok(()),
        Ok(Ok(response)) => Err(format!("answered {}", response.status())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {timeout_ms} ms")),
    }
}
