"""Parsing receipt emails (RFC 5322 through the `email` package)."""

from __future__ import annotations

import pytest

from jobs.club.email_receipts import ReceiptRejected, parse_receipt

GOOD = """\
From: Club Shop <shop@photoclub.example>
To: intake@photoclub.example
Subject: Your receipt R-1001
Date: Thu, 01 Jan 2026 10:00:00 +0000
Message-ID: <r-1001@photoclub.example>
MIME-Version: 1.0
Content-Type: text/plain; charset="utf-8"

Thanks for renewing!

Receipt-Id: R-1001
Member-Id: m-2
Role-Id: 110000000000000001
Valid-From: 2026-01-01T00:00:00Z
Valid-Until: 2027-01-01T00:00:00Z
"""

MULTIPART = """\
From: shop@photoclub.example
Subject: Receipt
Date: Thu, 01 Jan 2026 10:00:00 +0000
Message-ID: <mp@photoclub.example>
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="b1"

--b1
Content-Type: text/html

<p>Receipt</p>
--b1
Content-Type: text/plain
Content-Transfer-Encoding: quoted-printable

Receipt-Id: R-2=
002
Member-Id: m-3
Role-Id: 110000000000000002
Valid-From: 2026-01-01T00:00:00+01:00
Valid-Until: 2026-02-01T00:00:00+01:00
--b1--
"""


def test_a_plain_receipt_email_parses():
    receipt = parse_receipt(GOOD)
    assert (receipt.receipt_id, receipt.member_id, receipt.role_id) == ("R-1001", "m-2", "110000000000000001")
    assert receipt.valid_from == 1_767_225_600_000 and receipt.valid_until == 1_798_761_600_000


def test_the_plain_part_of_a_multipart_email_is_used_and_decoded():
    receipt = parse_receipt(MULTIPART)
    assert receipt.receipt_id == "R-2002" and receipt.valid_from == 1_767_222_000_000


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("just some text, not an email", "missing header"),
        (GOOD.replace("Message-ID: <r-1001@photoclub.example>\n", ""), "Message-ID"),
        (GOOD.replace("Thu, 01 Jan 2026 10:00:00 +0000", "yesterday-ish"), "Date"),
        (GOOD.replace("Role-Id: 110000000000000001", "Role-Id: admin"), "Role-Id"),
        (GOOD.replace("Member-Id: m-2\n", ""), "Member-Id"),
        (GOOD.replace("2027-01-01T00:00:00Z", "2025-01-01T00:00:00Z"), "not after"),
        (GOOD.replace("Valid-From: 2026-01-01T00:00:00Z", "Valid-From: 2026-01-01T00:00:00"), "time zone"),
        (GOOD.replace('text/plain; charset="utf-8"', "text/html"), "text/plain"),
    ],
)
def test_malformed_receipts_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(ReceiptRejected, match=reason):
        parse_receipt(raw)
