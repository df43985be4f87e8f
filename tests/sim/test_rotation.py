"""Rotating the event signing key while the embedded runtime runs: no event rejected, no delivery lost.

The club job `expire_photographer_requests` (its own warm process) signs one
`message_edit` per expired request; the Discord worker (its own warm process)
verifies it. Between two ticks the operator rotates the key with the real
command path (`ops.rotation.rotate_signing_key`); the job keeps signing with
its cached old key until its process is replaced, then with the new one.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.server

MINUTE = 60_000
CHANNEL = "120000000000000077"
MESSAGES = {"rot-a": "140000000000000771", "rot-b": "140000000000000772", "rot-c": "140000000000000773"}


def _rejections(log_dir) -> list[dict]:
    lines = []
    for path in sorted(log_dir.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '"rejected"' in line:
                try:
                    lines.append(json.loads(line[line.index("{"):]))
                except ValueError:
                    lines.append({"raw": line[:200]})
    return lines


def test_a_rotation_during_a_run_rejects_no_event_and_loses_no_delivery(runtime, target):
    from jobs.club.stores.photo_requests import PhotoRequestStore
    from ops.rotation import rotate_signing_key
    from ops.seeds import stub_of, tables_of

    discord = stub_of(runtime, "discord")
    assert discord is not None
    before = len(_rejections(runtime.log_dir))
    now = runtime.clock.now_ms()
    # (the `target` fixture points this process's boto3 and pynamodb at the emulator)
    requests = PhotoRequestStore(tables_of(runtime)["club_photo_requests"], runtime.clock)
    # GIVEN three requests expiring in three successive 30-minute ticks, each with its Discord message
    for i, (request_id, message_id) in enumerate(MESSAGES.items()):
        discord.add_message(CHANNEL, "open", message_id=message_id)
        requests.put(request_id, f"rotation {request_id}", now + (10 + 30 * i) * MINUTE, CHANNEL, message_id)
    # WHEN the first tick runs: the job and the worker are warm with the first key
    runtime.advance(minutes=31)
    assert discord.messages[CHANNEL][MESSAGES["rot-a"]] != "open"
    # AND the operator rotates the key (public half first, then private)
    rotation = rotate_signing_key(target)
    # THEN the next tick's event, signed by the warm job with its cached old key, is delivered
    runtime.advance(minutes=30)
    assert discord.messages[CHANNEL][MESSAGES["rot-b"]] != "open"
    # WHEN the job's process is replaced (a cold start reads the new key)
    runtime.pool.kill(runtime.function_of_job("expire_photographer_requests"))
    runtime.advance(minutes=30)
    # THEN its event, signed with the new key, makes the warm worker re-read the verify key and is delivered
    assert discord.messages[CHANNEL][MESSAGES["rot-c"]] != "open"
    assert rotation.kid and len(rotation.kid) == 16
    # AND nothing was rejected and nothing is dead-lettered
    assert _rejections(runtime.log_dir)[before:] == []
    sqs = runtime.session.client("sqs")
    dlq = sqs.get_queue_url(QueueName="jobfence-club_notifications-dlq")["QueueUrl"]
    depth = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert depth["ApproximateNumberOfMessages"] == "0"
