"""Authenticating a receipt email before it may grant anything: SES verdicts and the sender allowlist.

A receipt grants a paid Discord role (through `reconcile_membership_roles`),
so the intake accepts an email only when the receiving mail server (SES, in a
receipt rule) judged it authentic and it comes from the shop:

    SPF, DKIM and DMARC verdicts all PASS   (as SES's receipt gives them: receipt.spfVerdict.status, ...)
    the From address is on the allowlist    (DMARC PASS means the From domain is the authenticated one)

Anything else is quarantined by `retry_email_intake` with the reason: kept
(raw and verdicts), never parsed into a receipt, never retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email import message_from_string, policy
from typing import Any

from jobs.club.email_receipts import MAX_RAW_CHARS

PASS = "PASS"
MISSING = "MISSING"
CHECKS = ("spf", "dkim", "dmarc")
SES_FIELDS = {"spf": "spfVerdict", "dkim": "dkimVerdict", "dmarc": "dmarcVerdict"}
RECEIPT_SENDERS = "receipt_senders"  # the retry job's setting (CONFIG_RECEIPT_SENDERS): comma-separated addresses


@dataclass(frozen=True)
class MailVerdicts:
    """The receiving server's authentication verdicts of one email (PASS, FAIL, GRAY, PROCESSING_FAILED, ...)."""

    spf: str = MISSING
    dkim: str = MISSING
    dmarc: str = MISSING

    @classmethod
    def from_ses_receipt(cls, receipt: Mapping[str, Any]) -> MailVerdicts:
        """From the `receipt` object of an SES receipt-rule event (`Records[].ses.receipt`)."""

        def status(field: str) -> str:
            verdict = receipt.get(field) if isinstance(receipt, Mapping) else None
            value = verdict.get("status") if isinstance(verdict, Mapping) else None
            return str(value)[:32].upper() if isinstance(value, str) and value else MISSING

        return cls(**{check: status(field) for check, field in SES_FIELDS.items()})

    @classmethod
    def passed(cls) -> MailVerdicts:
        return cls(PASS, PASS, PASS)

    def failures(self) -> list[str]:
        """The checks that did not pass, as "SPF FAIL" and so on."""
        return [f"{check.upper()} {getattr(self, check)}" for check in CHECKS if getattr(self, check) != PASS]


class SenderAllowlist:
    """The From addresses receipts may come from (case-insensitive); empty means nothing is accepted."""

    def __init__(self, addresses: str | list[str]) -> None:
        items = addresses.split(",") if isinstance(addresses, str) else addresses
        self._addresses = frozenset(a.strip().lower() for a in items if a.strip())

    def __contains__(self, address: str) -> bool:
        return address.strip().lower() in self._addresses


def _from_address(raw: str) -> str | None:
    if not isinstance(raw, str) or len(raw) > MAX_RAW_CHARS:
        return None
    try:
        header = message_from_string(raw, policy=policy.default).get("From")
        addresses: tuple[Any, ...] = getattr(header, "addresses", ()) if header is not None else ()
    except (ValueError, TypeError, IndexError, AttributeError):
        return None
    if len(addresses) != 1 or not addresses[0].addr_spec:
        return None
    return addresses[0].addr_spec


def quarantine_reason(raw: str, verdicts: MailVerdicts, allowlist: SenderAllowlist) -> str | None:
    """Why this email may not become a receipt (never echoing the sender), or None when it is authentic."""
    failures = verdicts.failures()
    if failures:
        return "not authenticated: " + ", ".join(failures)
    sender = _from_address(raw)
    if sender is None:
        return "not exactly one From address"
    if sender not in allowlist:
        return "sender not on the receipt allowlist"
    return None
