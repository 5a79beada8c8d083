"""Where alerts go: the run's log always, and a webhook (Slack-compatible JSON `{"text": …}`) when
`ALERT_WEBHOOK_URL` is set."""

import json
import logging
import urllib.error
import urllib.request

from dagster import ConfigurableResource
from pydantic import Field

from resources.secrets import resolved

log = logging.getLogger(__name__)


class AlertWebhookResource(ConfigurableResource):
    # Webhook URLs carry their own secret: the resource is configured from a `dagster.EnvVar`, so the UI shows the
    # variable's name, and the URL stays out of its repr.
    webhook_url: str | None = Field(default=None, repr=False, description="ALERT_WEBHOOK_URL: where alerts are posted")
    timeout_s: float = 5.0

    def send(self, text: str, tick_log: logging.Logger | None = None) -> bool:
        """Logs the alert (also in `tick_log`, a sensor tick's log that the UI shows) and posts it; a webhook
        that is down must not stop the sensor that alerts."""
        log.warning("ALERT %s", text)
        if tick_log is not None:
            tick_log.warning(f"ALERT {text}")
        url = resolved(self.webhook_url)
        if not url:
            return False
        request = urllib.request.Request(
            url, data=json.dumps({"text": text}).encode(), headers={"Content-Type": "application/json"}, method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return 200 <= response.status < 300
        except (urllib.error.URLError, OSError) as error:
            log.error("the alert webhook did not take the alert (%s): %s", type(error).__name__, text)
            if tick_log is not None:
                tick_log.error(f"the alert webhook did not take the alert ({type(error).__name__})")
            return False
