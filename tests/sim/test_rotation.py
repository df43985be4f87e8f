"""Rotating the event signing key while the embedded runtime runs: no event rejected, no delivery lost.

The club job `expire_photographer_requests` (its own warm process) signs one
`message_edit` per expired request; the Discord worker (its own warm process)
verifies it. Between two ticks the operator rotates the key with the real
command path (`ops.rotation.rotate_here`); the job keeps signing with
its cached old key until its process is replaced, then with the new one,
which makes the worker re-read the verify key. Last, an event signed with the
old private key reaches a worker whose current key is the new one, an hour
after the rotation: the verify secret's AWSPREVIOUS version is accepted only
for the grace window after a rotation (`jobs.club.signing.GRACE_MS`), so the
rotated-out key is refused (revoked) and the event is acknowledged, not retried.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.server

MINUTE = 60_000
CHANNEL = "120000000000000077"
MESSAGES = {"rot-a": "140000000000000771", "rot-b": "140000000000000772", "rot-c": "140000000000000773"}
GUILD, USER, ROLE = "110000000000000077", "150000000000000077", "130000000000000077"
JOB = "expire_photographer_requests"  # the job whose key is rotated (each job has its own pair)


class _Held:
    """A signing key source that keeps the key it was given (a warm job's cached key)."""

    signer = JOB

    def __init__(self, key):
        self.key = key

    def current(self):
        return self.key


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
    from jobfence.config import secret_env
    from jobs.club.events import Event, EventType, Signer, nonce_for
    from jobs.club.notifications import Publisher
    from providers.sqs import SqsNotificationQueue
    from jobs.club.catalog import signing_secret
    from jobs.club.signing import SigningKey
    from jobs.club.stores.photo_requests import PhotoRequestStore
    from jobs.club.signing import GRACE_MS
    from ops.rotation import rotate_here
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
    # AND the operator rotates the key (public half first, then private), while a job holds the old one
    variable = secret_env(signing_secret(JOB))
    signing_name = next(f.environment[variable] for f in runtime.topology.functions.values() if variable in f.environment)
    sm, sqs = runtime.session.client("secretsmanager"), runtime.session.client("sqs")
    old_key = SigningKey.from_secret(sm.get_secret_value(SecretId=signing_name)["SecretString"])
    rotation = rotate_here(target, JOB)
    rotated_at = runtime.clock.now_ms()
    # THEN the next tick's event, signed by the warm job with its cached old key, is delivered
    runtime.advance(minutes=30)
    assert discord.messages[CHANNEL][MESSAGES["rot-b"]] != "open"
    # WHEN the job's process is replaced (a cold start reads the new key)
    runtime.pool.kill(runtime.function_of_job(JOB))
    runtime.advance(minutes=30)
    # THEN its event, signed with the new key, makes the warm worker re-read the verify key and is delivered
    assert discord.messages[CHANNEL][MESSAGES["rot-c"]] != "open"
    # WHEN an event signed with the old key arrives after that, past the grace window
    assert runtime.clock.now_ms() - rotated_at >= GRACE_MS
    queue_url = sqs.get_queue_url(QueueName="jobfence-club_notifications")["QueueUrl"]
    late = Publisher(Signer(_Held(old_key), runtime.clock), SqsNotificationQueue(sqs, queue_url))
    late.publish(Event.build(EventType.ROLE_REMOVE, nonce_for("rotation-previous", 1), guild_id=GUILD, user_id=USER,
                             role_id=ROLE))
    runtime.advance(minutes=1)
    # THEN the worker, whose current key is the new one, refuses it: the rotated-out key verifies nothing
    assert old_key.kid != rotation.kid
    assert ("DELETE", f"/guilds/{GUILD}/members/{USER}/roles/{ROLE}") not in discord.requests
    assert rotation.kid and len(rotation.kid) == 16
    # AND that is the only rejection (every event of the rotation itself was delivered), and nothing is
    # dead-lettered (a forged event is acknowledged)
    (rejected,) = _rejections(runtime.log_dir)[before:]
    assert "forged" in json.dumps(rejected)
    dlq = sqs.get_queue_url(QueueName="jobfence-club_notifications-dlq")["QueueUrl"]
    depth = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert depth["ApproximateNumberOfMessages"] == "0"
