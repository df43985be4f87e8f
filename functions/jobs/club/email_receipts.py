"""Parsing a receipt email (RFC 5322, through Python's `email` package) into a `Receipt`.

The shop sends one text/plain (or multipart with a text/plain part) email per
purchase; its body carries one `Field: value` line per receipt field:

    Receipt-Id: R-1001
    Member-Id: m-1
    Role-Id: 1100000000000000001
    Valid-From: 2026-01-01T00:00:00Z
    Valid-Until: 2027-01-01T00:00:00Z

Anything else is a `ReceiptRejected` whose message says what is wrong (never the content).
"""

from __future__ import annotations

import re
from datetime import datetime
from email import message_from_string, policy

from jobfence.errors import InvalidEvent
from jobs.club.stores.receipts import Receipt

REQUIRED_HEADERS = ("From", "Date", "Message-ID", "Subject")
FIELDS = ("Receipt-Id", "Member-Id", "Role-Id", "Valid-From", "Valid-Until")
IDENTIFIER = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
SNOWFLAKE = re.compile(r"^[0-9]{1,20}$")
FIELD_LINE = re.compile(r"^([A-Za-z-]+):\s*(.*?)\s*$")
MAX_RAW_CHARS = 256 * 1024


class ReceiptRejected(InvalidEvent):
    """The email is not a valid receipt; the message says why."""


def _instant(name: str, value: str) -> int:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ReceiptRejected(f"{name} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise ReceiptRejected(f"{name} has no time zone")
    return int(parsed.timestamp() * 1000)


def parse_receipt(raw: str) -> Receipt:
    """The receipt in `raw`, or `ReceiptRejected` naming the first problem found."""
    if not isinstance(raw, str) or not raw.strip():
        raise ReceiptRejected("the message is empty")
    if len(raw) > MAX_RAW_CHARS:
        raise ReceiptRejected(f"the message is larger than {MAX_RAW_CHARS} characters")
    message = message_from_string(raw, policy=policy.default)
    missing = [h for h in REQUIRED_HEADERS if message.get(h) is None]
    if missing:
        raise ReceiptRejected(f"missing header(s): {', '.join(missing)}")
    if message.defects:
        raise ReceiptRejected(f"malformed message: {', '.join(sorted({type(d).__name__ for d in message.defects}))}")
    try:
        if message["Date"].datetime is None:
            raise ValueError
    except (ValueError, TypeError, AttributeError):
        raise ReceiptRejected("the Date header is not an RFC 5322 date") from None
    body = message.get_body(preferencelist=("plain",))
    if body is None:
        raise ReceiptRejected("no text/plain part")
    try:
        text = body.get_content()
    except (LookupError, ValueError) as exc:
        raise ReceiptRejected(f"the text part cannot be decoded: {type(exc).__name__}") from None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        match = FIELD_LINE.match(line.strip())
        if match and match.group(1).title() in FIELDS:
            fields.setdefault(match.group(1).title(), match.group(2))
    missing = [f for f in FIELDS if not fields.get(f)]
    if missing:
        raise ReceiptRejected(f"missing receipt field(s): {', '.join(missing)}")
    for name in ("Receipt-Id", "Member-Id"):
        if not IDENTIFIER.match(fields[name]):
            raise ReceiptRejected(f"{name} is not an identifier (1-64 of A-Z a-z 0-9 . _ -)")
    if not SNOWFLAKE.match(fields["Role-Id"]):
        raise ReceiptRejected("Role-Id is not a Discord id")
    valid_from = _instant("Valid-From", fields["Valid-From"])
    valid_until = _instant("Valid-Until", fields["Valid-Until"])
    if valid_until <= valid_from:
        raise ReceiptRejected("Valid-Until is not after Valid-From")
    return Receipt(fields["Receipt-Id"], fields["Member-Id"], fields["Role-Id"], valid_from, valid_until)
