"""Authenticating a receipt email before it may grant anything: SES verdicts and the sender allowlist.

A receipt grants a paid Discord role (through `reconcile_membership_roles`),
so the intake accepts an email only when the receiving mail server (SES, in a
receipt rule) judged it authentic and it comes from the shop:

    SPF, DKIM and DMARC verdicts all PASS   (as SES's receipt gives them: receipt.spfVerdict.status, ...)
    exactly one From header, one mailbox   (two headers: DMARC may have judged the one not read)
    no parser defect                        (email.message defects: the parser guessed at the structure)
    the From address is on the allowlist    (DMARC PASS means the From domain is the authenticated one)

Anything else is quarantined by `retry_email_intake` with the reason: kept
(raw and verdicts), never parsed into a receipt, never retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email import message_from_string, policy
from email.message import Message
from typing import Any

from jobs.club.email_receipts import MAX_RAW_CHARS

PASS = "PASS"
MISSING = "MISSING"
CHECKS = ("spf", "dkim", "dmarc")
SES_FIELDS = {"spf": "spfVerdict", "dkim": "dkimVerdict", "dmarc": "dmarcVerdict"}
MAX_NAMED_DEFECTS = 5  # a quarantine reason names at most these many defect classes
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


def _defects(message: Message) -> list[str]:
    """The parser's defects (class names) of every part and of the From headers: any one makes the email suspect.

    A defect means the parser guessed (a header line without a colon ends the headers, a missing boundary
    swallows a part, a From header of two mailboxes reads as one): the receiving server's verdicts may be
    about another reading of the same bytes.
    """
    found = {type(d).__name__ for part in message.walk() for d in part.defects}
    for header in message.get_all("From") or ():
        found.update(type(d).__name__ for d in getattr(header, "defects", ()))
    return sorted(found)


def _sender(raw: str) -> tuple[str | None, str | None]:
    """(the one From address, None), or (None, why not): exactly one From header, one mailbox, no defect."""
    if not isinstance(raw, str) or len(raw) > MAX_RAW_CHARS:
        return None, "not a message of at most the receipt size"
    try:
        message = message_from_string(raw, policy=policy.default)
        headers = message.get_all("From") or []
        if len(headers) != 1:
            return None, "not exactly one From header"
        defects = _defects(message)
        if defects:
            return None, "malformed message: " + ", ".join(defects[:MAX_NAMED_DEFECTS])
        addresses: tuple[Any, ...] = getattr(headers[0], "addresses", ())
    except (ValueError, TypeError, IndexError, AttributeError, LookupError):
        return None, "malformed message: not parsable"
    if len(addresses) != 1 or not addresses[0].addr_spec:
        return None, "not exactly one From address"
    return addresses[0].addr_spec, None


def quarantine_reason(raw: str, verdicts: MailVerdicts, allowlist: SenderAllowlist) -> str | None:
    """Why this email may not become a receipt (never echoing the sender), or None when it is authentic.

    Authentic: SPF, DKIM and DMARC passed, the message has exactly one From header naming one mailbox, the
    parser found no defect in it, and that mailbox is on the allowlist. (With two From headers, `get` reads
    the first, and DMARC may have judged the other.)
    """
    failures = verdicts.failures()
    if failures:
        return "not authenticated: " + ", ".join(failures)
    sender, why = _sender(raw)
    if sender is None:
        return why
    if sender not in allowlist:
        return "sender not on the receipt allowlist"
    return None
