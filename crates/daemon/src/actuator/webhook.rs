//! The webhook actuator: per model, the new configuration POSTed as JSON over
//! plain HTTP, with a timeout and retries. Each model has its own sender task
//! fed through a `watch` channel, so a slow server never delays a tick and only
//! the newest configuration is sent when several changes queue up. The outcome
//! of each delivery goes back through another, for a caller that must not go on
//! before the server took the configuration (`profile --live`).

use http_body_util::Full;
use hyper::body::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use super::{BodyClient, ModelUpdate};
use crate::config::WebhookConfig;
use crate::metrics::Metrics;
use crate::streak::Streaks;

/// The wait before retry k is k times this.
const BACK_OFF_STEP_MS: u64 = 100;

/// The outcome of a model's latest delivery.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Delivery {
    /// The tick whose configuration it carried.
    pub tick: u64,
    /// Why it failed, every attempt included; `None` when it was delivered.
    pub failure: Option<String>,
}

/// The longest one delivery can take: every attempt's timeout and the back-off
/// between attempts.
pub(super) fn longest_delivery(config: &WebhookConfig) -> Duration {
    let retries = u64::from(config.retries);
    // The step times 1 + … + retries.
    let back_off = (retries.saturating_mul(retries + 1) / 2).saturating_mul(BACK_OFF_STEP_MS);
    Duration::from_millis(
        (retries + 1)
            .saturating_mul(config.timeout_ms)
            .saturating_add(back_off),
    )
}

pub(super) async fn sender(
    client: BodyClient,
    uri: hyper::Uri,
    config: WebhookConfig,
    mut rx: watch::Receiver<Option<ModelUpdate>>,
    delivered: watch::Sender<Option<Delivery>>,
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
            Err(e) => {
                metrics.actuator_result("webhook", false);
                delivered.send_replace(Some(Delivery {
                    tick: update.tick,
                    failure: Some(format!("cannot encode the update: {e}")),
                }));
                continue;
            }
        };
        let mut failure = None;
        for attempt in 0..=config.retries {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(BACK_OFF_STEP_MS * u64::from(attempt)))
                    .await;
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
        // Nobody may be waiting: the outcome is kept for the next one who does.
        delivered.send_replace(Some(Delivery {
            tick: update.tick,
            failure,
        }));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(timeout_ms: u64, retries: u32) -> WebhookConfig {
        WebhookConfig {
            urls: Default::default(),
            timeout_ms,
            retries,
        }
    }

    #[test]
    fn the_longest_delivery_is_every_attempt_and_the_back_off_between() {
        // Three attempts of 2 s, 100 ms and 200 ms between them.
        assert_eq!(
            longest_delivery(&config(2000, 2)),
            Duration::from_millis(6300)
        );
        assert_eq!(
            longest_delivery(&config(300, 0)),
            Duration::from_millis(300)
        );
        // Whatever a config says, the bound is a number, never an overflow.
        assert_eq!(
            longest_delivery(&config(u64::MAX, u32::MAX)),
            Duration::from_millis(u64::MAX)
        );
    }
}
