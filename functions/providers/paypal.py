"""The real PayPal adapter of the payment port (Orders v2 capture, Payments v2 refund).

- OAuth2 client credentials (`POST /v1/oauth2/token`, HTTP Basic): the bearer
  token is cached until shortly before its `expires_in`, on the injected clock;
  a 401 on a money call drops the cached token and fetches a new one once.
- `POST /v2/checkout/orders/{id}/capture` and `POST /v2/payments/captures/{id}/refund`
  carry `PayPal-Request-Id` = our idempotency key, so PayPal answers a repeated
  key with the first result.
- Retries happen only where the outcome is unknown: a network error or a 5xx,
  with the *same* request id (so a retry after a lost answer cannot capture
  twice). A 4xx is an answer, never retried: its `details[0].issue` becomes a
  typed error (`ORDER_ALREADY_CAPTURED` -> `AlreadyCaptured`, `INSTRUMENT_DECLINED`
  -> `InstrumentDeclined`, ...), any other status the one mapping of
  `providers.http.status_error`. After the last attempt the error is
  `ProviderAmbiguous`: the caller retries later with the same key.
- HTTP goes through the providers' one client (`providers.http.HttpClient`).
- Nothing is logged here; error messages carry status, issue and PayPal's
  debug id only, never a request or response body, never a credential.

Credentials come from a callable (Secrets Manager through Powertools parameters
at the composition root), so only functions that call PayPal can read them.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from jobfence.clock import Clock
from jobfence.config import Settings
from providers.errors import (
    ProviderAmbiguous,
    ProviderAuthFailed,
    ProviderError,
    ProviderRejected,
    ProviderUnavailable,
)
from providers.http import HttpAnswer, HttpClient, status_error
from providers.payments import (
    AlreadyCaptured,
    CaptureResult,
    CaptureStatus,
    InstrumentDeclined,
    OrderNotCapturable,
    RefundResult,
)
from providers.secrets import SecretsManagerValues

PROVIDER = "paypal"
TOKEN_PATH = "/v1/oauth2/token"
TOKEN_MARGIN_MS = 60_000  # refresh a minute early: a token must not expire in flight
DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF_S = 0.2
_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")

_TERMINAL_ISSUES: dict[str, type[ProviderRejected]] = {
    "ORDER_ALREADY_CAPTURED": AlreadyCaptured,
    "INSTRUMENT_DECLINED": InstrumentDeclined,
    "PAYER_ACTION_REQUIRED": InstrumentDeclined,
    "TRANSACTION_REFUSED": InstrumentDeclined,
    "ORDER_NOT_APPROVED": OrderNotCapturable,
    "ORDER_EXPIRED": OrderNotCapturable,
    "CAPTURE_FULLY_REFUNDED": OrderNotCapturable,
    "REFUND_AMOUNT_EXCEEDED": OrderNotCapturable,
    "INVALID_RESOURCE_ID": OrderNotCapturable,
}


class PayPalPayments:
    """`PaymentPort` over PayPal's REST API."""

    def __init__(
        self,
        http: HttpClient,
        credentials: Callable[[], Mapping[str, str]],
        clock: Clock,
        sleep: Callable[[float], None],
        attempts: int = DEFAULT_ATTEMPTS,
        backoff_s: float = DEFAULT_BACKOFF_S,
    ) -> None:
        self._credentials = credentials
        self._clock = clock
        self._http = http
        self._sleep = sleep
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._token: str | None = None
        self._token_expires_at = 0
        self.token_fetches = 0

    # -- the port ---------------------------------------------------------------------------

    def capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        """Capture an approved order with `PayPal-Request-Id: idempotency_key`."""
        _check_id("order id", order_id)
        body = self._money_call(f"/v2/checkout/orders/{order_id}/capture", {}, idempotency_key)
        try:
            capture = body["purchase_units"][0]["payments"]["captures"][0]
            result = CaptureResult(
                order_id=str(body.get("id", order_id)),
                capture_id=str(capture["id"]),
                status=_status(capture.get("status"), order_id),
                amount_cents=_cents(capture["amount"]["value"]),
                currency=str(capture["amount"]["currency_code"]),
            )
        except (KeyError, IndexError, TypeError) as exc:
            raise _unexpected(f"capture of {order_id}: unexpected response shape") from exc
        return result

    def refund(self, capture_id: str, amount_cents: int, currency: str, idempotency_key: str) -> RefundResult:
        """Refund `amount_cents` of a capture with `PayPal-Request-Id: idempotency_key`."""
        _check_id("capture id", capture_id)
        payload = {"amount": {"value": f"{Decimal(amount_cents) / 100:.2f}", "currency_code": currency}}
        body = self._money_call(f"/v2/payments/captures/{capture_id}/refund", payload, idempotency_key)
        try:
            return RefundResult(
                capture_id=capture_id,
                refund_id=str(body["id"]),
                status=_status(body.get("status"), capture_id),
                amount_cents=_cents(body["amount"]["value"]),
                currency=str(body["amount"]["currency_code"]),
            )
        except (KeyError, TypeError) as exc:
            raise _unexpected(f"refund of {capture_id}: unexpected response shape") from exc

    # -- HTTP -------------------------------------------------------------------------------

    def _money_call(self, path: str, payload: Mapping[str, Any], request_id: str) -> dict[str, Any]:
        """POST with retries on network errors and 5xx only, always with the same request id."""
        data = json.dumps(payload).encode()
        refreshed = False
        attempt = 0
        last = "no attempt"
        while attempt < self._attempts:
            headers = {
                "Authorization": f"Bearer {self._bearer()}",
                "Content-Type": "application/json",
                "PayPal-Request-Id": request_id,
                "Prefer": "return=representation",
            }
            try:
                answer = self._http.send("POST", path, body=data, headers=headers)
            except ProviderUnavailable as exc:  # not sent, or sent and unanswered: the same id says which
                attempt, last = attempt + 1, str(exc)
                self._pause(attempt)
                continue
            if answer.status == 401 and not refreshed:
                # an expired or revoked token: fetch a new one once, not counted as an attempt
                refreshed = True
                self._token = None
                continue
            if answer.status >= 500:
                attempt, last = attempt + 1, f"HTTP {answer.status}{_debug_id(answer)}"
                self._pause(attempt)
                continue
            if answer.status >= 400:
                raise _typed_error(path, answer)
            return answer.json(PROVIDER)
        raise ProviderAmbiguous(
            f"{PROVIDER} {path}: outcome unknown after {self._attempts} attempts ({last})", provider=PROVIDER
        )

    def _pause(self, attempt: int) -> None:
        if attempt < self._attempts:
            self._sleep(self._backoff_s * 2 ** (attempt - 1))

    def _bearer(self) -> str:
        """The cached token, or a new one when it is missing or about to expire."""
        now = self._clock.now_ms()
        if self._token and now < self._token_expires_at - TOKEN_MARGIN_MS:
            return self._token
        creds = self._credentials()
        basic = base64.b64encode(f"{creds['client_id']}:{creds['client_secret']}".encode()).decode()
        answer = self._http.send(
            "POST",
            TOKEN_PATH,
            body=b"grant_type=client_credentials",
            headers={"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
        )
        if answer.status in (400, 401, 403):
            raise ProviderAuthFailed(
                f"{PROVIDER} token: client credentials refused (HTTP {answer.status})",
                provider=PROVIDER,
                status=answer.status,
            )
        if answer.status != 200:
            raise status_error(PROVIDER, answer, detail="token")
        body = answer.json(PROVIDER)
        try:
            self._token = str(body["access_token"])
            self._token_expires_at = now + int(body["expires_in"]) * 1000
        except (KeyError, TypeError, ValueError) as exc:
            raise _unexpected("token: unexpected response shape") from exc
        self.token_fetches += 1
        return self._token


def _check_id(what: str, value: str) -> None:
    # ids go into the URL path: refuse anything that could change the path
    if not isinstance(value, str) or not _ID.match(value):
        raise OrderNotCapturable(f"invalid {PROVIDER} {what}", provider=PROVIDER)


def _unexpected(what: str) -> ProviderError:
    return ProviderError(f"{PROVIDER} {what}", provider=PROVIDER)


def _debug_id(answer: HttpAnswer) -> str:
    debug = answer.json_or_empty().get("debug_id")
    return f" debug_id={str(debug)[:40]}" if debug else ""


def _typed_error(path: str, answer: HttpAnswer) -> ProviderError:
    """PayPal's refusal: a payment refinement by its `details[0].issue`, else the one status mapping."""
    body = answer.json_or_empty()
    issue = ""
    try:
        details = body.get("details") or []
        issue = str(details[0].get("issue", "")) if details else str(body.get("name", ""))
    except (AttributeError, IndexError, TypeError):
        pass
    kind = _TERMINAL_ISSUES.get(issue)
    if kind is None and answer.status == 404:
        kind = OrderNotCapturable
    message = f"{PROVIDER} {path}: HTTP {answer.status} {issue or 'error'}{_debug_id(answer)}"[:300]
    if kind is not None:
        return kind(message, provider=PROVIDER, status=answer.status, code=issue or None)
    return status_error(PROVIDER, answer, code=issue or None, detail=_debug_id(answer).strip())


def _status(value: Any, target: str) -> CaptureStatus:
    if value in ("DECLINED", "FAILED"):
        raise InstrumentDeclined(f"{PROVIDER} {target}: capture {value}", provider=PROVIDER)
    try:
        return CaptureStatus(value)
    except ValueError:
        raise _unexpected(f"{target}: unexpected status {str(value)[:20]}") from None


def _cents(value: Any) -> int:
    try:
        return int((Decimal(str(value)) * 100).to_integral_value())
    except InvalidOperation as exc:
        raise _unexpected("amount is not a decimal") from exc


def build_paypal(base_url: str, secret_name: str, session: Any, clock: Clock) -> PayPalPayments:
    """The composition root's adapter: credentials read on use through the Secrets port (cached `max_age_s`)."""
    secrets = SecretsManagerValues(session.client("secretsmanager"))
    return PayPalPayments(
        HttpClient(PROVIDER, base_url, timeout_s=10.0),
        lambda: json.loads(secrets.get(secret_name)),
        clock,
        time.sleep,  # back-off between retries only; never reads time
    )


def paypal_from_settings(
    settings: Settings, session: Any, clock: Clock, *, provider: str, secret: str
) -> PayPalPayments:
    """The adapter of a function that calls PayPal, under the names its catalog entry declares: base URL of
    the provider `provider` (PROVIDER_<PROVIDER>_URL), credentials from the secret `secret` (SECRET_<SECRET>).

    The names are the app's (its catalog declares them once and passes them here): the adapter knows no app.
    """
    return build_paypal(settings.provider_url(provider), settings.secret(secret), session, clock)
