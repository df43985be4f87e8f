"""Catalog entries of the club scheduler (seed 002): its tables, eight jobs and the notification queue.

The seven club jobs run every 30 minutes, each on its own rule and Lambda
(none waits for another). The email-intake retry has its own 5-minute rule.
Jobs that change Discord may send to the notification queue and read their
own event signing (private) key, never another job's nor the Discord token:
only the queue's worker (`handlers.discord.handler`) can read that secret or
call Discord, and it holds only the verify (public) keys, so it cannot sign.
`SIGNER_EVENTS` says which event types each job may ask for, and a role
change's guild must be one of the job's `discord_guilds` setting; the worker
refuses anything else, even when correctly signed (`jobs.club.signers`). The worker does not
send to its own queue (it only changes a received message's visibility,
which its event source grants).
"""

from typing import Any

from jobfence.indexes import EXPIRY_INDEX_SPEC, due_index_spec
from jobfence.registry import CatchUp, JobSpec, QueueSpec, TableSpec

SUBSYSTEM = "club"
EVERY_30_MINUTES = "cron(0/30 * * * ? *)"  # seed 002: */30 * * * *
EVERY_5_MINUTES = "rate(5 minutes)"
# Catch-up (docs/guarantees.md): the two jobs whose lateness a member feels catch up `once`, within
# two hours: expire_memberships (an ended membership keeps its access and roles until it runs) and
# send_equipment_reminders (a due reminder is about a loan's date). Seed 002's other jobs sweep state
# that the next tick, at most 30 minutes away, brings up to date (schedules, stats, roles, request
# expiry); the 5-minute email intake's next tick is 5 minutes away. Overlap stays `skip` everywhere
# (seed 002: if another request arrives while the lease is active, the job does not run again).
MEMBER_FACING_CATCH_UP: dict[str, Any] = dict(catch_up=CatchUp.ONCE, catch_up_window_s=2 * 3600)
# The only From addresses a receipt may come from (after SPF, DKIM and DMARC PASS): the shop's.
# A deployment that changes the shop's address changes this line (docs/security.md).
RECEIPT_SENDERS = "shop@photoclub.example"
NOTIFICATIONS_QUEUE = "club_notifications"
REJECTED_METRIC = "discord_rejected"  # what the Discord worker counts a rejected message with (alarmed)
# Logical secret names (the catalog is data: the modules that read them import these names from here).
DISCORD_TOKEN_SECRET = "discord_token"  # the bot token (only the Discord worker lists it)
SIGNING_KEY_PREFIX = "club_signing_key_"  # + job: that job's Ed25519 private key (only that job reads it)
VERIFY_KEY_PREFIX = "club_verify_key_"  # + job: its current and previous public keys (the Discord worker)
# The Discord guild(s) the club's role changes may touch (a deployment changes this line, docs/security.md).
CLUB_GUILDS = "100000000000000001"
GUILDS_SETTING = "discord_guilds"  # comma-separated guild ids of a job that changes roles
# Which event types each job that publishes may ask for (the worker's table, `jobs.club.signers`).
SIGNER_EVENTS: dict[str, tuple[str, ...]] = {
    "expire_memberships": ("role_remove",),
    "reconcile_membership_roles": ("role_add", "role_remove"),
    "sweep_darkroom_schedule": ("message_edit",),
    "sweep_studio_schedule": ("message_post",),
    "sync_darkroom_stats": ("message_edit",),
    "send_equipment_reminders": ("direct_notification",),
    "expire_photographer_requests": ("message_edit",),
}


def signing_secret(job: str) -> str:
    """The logical name of `job`'s signing (private) key secret."""
    return SIGNING_KEY_PREFIX + job


def verify_secret(job: str) -> str:
    """The logical name of `job`'s verify (public) key secret."""
    return VERIFY_KEY_PREFIX + job


def signing_pairs() -> tuple[tuple[str, str], ...]:
    """(signing, verify) of every job that publishes: the pairs the stack rotates."""
    return tuple((signing_secret(job), verify_secret(job)) for job in SIGNER_EVENTS)


# The sparse due indexes of the club tables (jobs.club.stores.due reads them).
ACTIVE_INDEX_SPEC = due_index_spec("active_by_end", "active_shard", "ends_at")
DUE_INDEX_SPEC = due_index_spec("due_reminders", "due_shard", "due_at")
RETRY_INDEX_SPEC = due_index_spec("retry_due", "retry_shard", "next_attempt_at")

TABLES = (
    TableSpec(
        name="club_memberships",
        subsystem=SUBSYSTEM,
        partition_key=("member_id", "S"),
        indexes=(ACTIVE_INDEX_SPEC,),
        description="memberships: status, access, end time and the Discord roles applied",
    ),
    TableSpec(
        name="club_receipts",
        subsystem=SUBSYSTEM,
        partition_key=("member_id", "S"),
        sort_key=("receipt_id", "S"),
        description="receipts that grant membership roles, recorded from the email intake",
    ),
    TableSpec(
        name="club_schedule",
        subsystem=SUBSYSTEM,
        partition_key=("space", "S"),
        sort_key=("entry_key", "S"),
        description="darkroom timed changes and studio slots, sorted by start time",
    ),
    TableSpec(
        name="club_boards",
        subsystem=SUBSYSTEM,
        partition_key=("board_id", "S"),
        description="Discord messages the jobs keep current (schedule, stats) and the darkroom totals",
    ),
    TableSpec(
        name="club_equipment_loans",
        subsystem=SUBSYSTEM,
        partition_key=("loan_id", "S"),
        description="equipment on loan to members",
    ),
    TableSpec(
        name="club_equipment_reminders",
        subsystem=SUBSYSTEM,
        partition_key=("reminder_id", "S"),
        indexes=(DUE_INDEX_SPEC,),
        description="loan reminders with their due time, recipient and send claim",
    ),
    TableSpec(
        name="club_photo_requests",
        subsystem=SUBSYSTEM,
        partition_key=("request_id", "S"),
        indexes=(EXPIRY_INDEX_SPEC,),
        description="photographer requests: open or expired, public and Discord status",
    ),
    TableSpec(
        name="club_email_intake",
        subsystem=SUBSYSTEM,
        partition_key=("intake_id", "S"),
        indexes=(RETRY_INDEX_SPEC,),
        description="receipt emails waiting for delivery: attempts, next attempt, reason when dead",
    ),
    TableSpec(
        name="club_outbox",
        subsystem=SUBSYSTEM,
        partition_key=("job", "S"),
        sort_key=("nonce", "S"),
        ttl_attribute="ttl",
        description="Discord events saved with their record change, until sent to the notification queue",
    ),
    TableSpec(
        name="club_event_nonces",
        subsystem=SUBSYSTEM,
        partition_key=("nonce", "S"),
        ttl_attribute="ttl",
        description="nonces claimed by the Discord worker (replay guard)",
    ),
)

_OUTBOX = {"club_outbox": "query+put+delete"}  # a put in each commit; the flush pages and deletes
# The put is fenced (in the record change's transaction); the drain's delete of a sent event is not: a late
# delete by a taken-over term forgets an event that was already sent (a re-send would be dropped as a replay).
_OUTBOX_UNFENCED = {
    "club_outbox": "the drain deletes an event only after sending it; its nonce makes a re-send a replay"
}


def _club_job(name: str, entry: str, tables: dict, description: str, notifies: bool = True, **policies) -> JobSpec:
    # A job that publishes sends to the queue and reads its own signing key (never another job's).
    notifying: dict[str, Any] = dict(queues=(NOTIFICATIONS_QUEUE,), secrets=(signing_secret(name),)) if notifies else {}
    return JobSpec(
        name=name,
        subsystem=SUBSYSTEM,
        entry=f"jobs.club.{entry}",
        schedule=EVERY_30_MINUTES,
        interval_s=1800,
        timeout_s=120,
        tables={**tables, **(_OUTBOX if notifies else {})},
        unfenced=_OUTBOX_UNFENCED if notifies else {},
        description=description,
        **notifying,
        **policies,
    )


SCHEDULER_JOBS = (
    _club_job(
        "expire_memberships",
        "memberships_jobs:build_expire_memberships",
        {"club_memberships": "get+query+update"},
        "expire memberships that have ended, revoke access and remove their roles",
        config={GUILDS_SETTING: CLUB_GUILDS},
        **MEMBER_FACING_CATCH_UP,
    ),
    _club_job(
        "reconcile_membership_roles",
        "memberships_jobs:build_reconcile_membership_roles",
        {"club_memberships": "scan+update", "club_receipts": "query"},  # pages through every membership
        "add and remove Discord roles where receipt data and applied roles differ",
        config={GUILDS_SETTING: CLUB_GUILDS},
    ),
    _club_job(
        "sweep_darkroom_schedule",
        "schedule_jobs:build_sweep_darkroom_schedule",
        {"club_schedule": "query+update", "club_boards": "get+update"},
        "apply due darkroom changes once and update the schedule message",
    ),
    _club_job(
        "sweep_studio_schedule",
        "schedule_jobs:build_sweep_studio_schedule",
        {"club_schedule": "query+update", "club_boards": "get"},
        "move studio slots forward and post the changes",
    ),
    _club_job(
        "sync_darkroom_stats",
        "schedule_jobs:build_sync_darkroom_stats",
        {"club_schedule": "query", "club_boards": "get+update"},
        "recalculate the darkroom totals and update the stats message",
    ),
    _club_job(
        "send_equipment_reminders",
        "equipment_jobs:build_send_equipment_reminders",
        {"club_equipment_reminders": "get+query+update", "club_equipment_loans": "get+check"},
        "claim each due reminder and notify the member or staff member",
        **MEMBER_FACING_CATCH_UP,
    ),
    _club_job(
        "expire_photographer_requests",
        "photo_request_jobs:build_expire_photographer_requests",
        {"club_photo_requests": "get+query+update"},
        "expire open requests past their expiry and update their public and Discord status",
    ),
)

EMAIL_INTAKE_JOB = JobSpec(
    name="retry_email_intake",
    subsystem=SUBSYSTEM,
    entry="jobs.club.email_jobs:build_retry_email_intake",
    schedule=EVERY_5_MINUTES,
    interval_s=300,
    timeout_s=120,
    tables={"club_email_intake": "get+query+update", "club_receipts": "put"},
    config={"receipt_senders": RECEIPT_SENDERS},
    description=(
        "authenticate and parse due intake emails into receipts; quarantine the unauthentic, back off on failure"
    ),
)

JOBS = (*SCHEDULER_JOBS, EMAIL_INTAKE_JOB)

QUEUES = (
    QueueSpec(
        name=NOTIFICATIONS_QUEUE,
        subsystem=SUBSYSTEM,
        handler="handlers.discord.handler",
        worker_timeout_s=30,
        visibility_timeout_s=180,
        max_receive_count=10,  # room for a few 429 back-offs before the DLQ
        batch_size=10,
        max_concurrency=2,
        tables={"club_event_nonces": "get+put+update+delete"},  # claim, release, done, a re-read
        secrets=(DISCORD_TOKEN_SECRET, *(verify_secret(job) for job in SIGNER_EVENTS)),
        providers=("discord",),
        description="signed Discord events; the only consumer that holds the Discord token",
    ),
)
