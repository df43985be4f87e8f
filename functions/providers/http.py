"""The one JSON-over-HTTP call of the work providers' real adapters (stdlib only).

Errors carry the status code only: provider bodies may echo the input.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from providers.scripted import ProviderError, ProviderRejected, ProviderTimeout


def post_json(url: str, body: bytes, idempotency_key: str, timeout_s: float, what: str) -> dict[str, Any]:
    """POST `body` with an Idempotency-Key; the JSON answer, or a provider error."""
    req = urllib.request.Request(
        url, data=body, method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - URL from configuration
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # status only: bodies may echo the input
        if 400 <= exc.code < 500 and exc.code not in (408, 409, 429):
            raise ProviderRejected(f"{what}: refused ({exc.code})") from None
        raise ProviderError(f"{what}: failed ({exc.code})") from None
    except TimeoutError:
        raise ProviderTimeout(f"{what}: no answer within {timeout_s:g} s") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ProviderError(f"{what}: unreachable ({type(exc).__name__})") from None
