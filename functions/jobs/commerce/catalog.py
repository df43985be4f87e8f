"""Catalog entries of the commerce API (seeds 000 and 001): its tables and jobs."""

from typing import Any

from jobfence.indexes import EXPIRY_INDEX_SPEC
from jobfence.registry import CatchUp, IndexSpec, JobSpec, TableSpec

SUBSYSTEM = "commerce"
HOURLY = "cron(0 * * * ? *)"  # seed 000: 0 * * * *
EVERY_5_MINUTES = "rate(5 minutes)"  # seed 001: the safety net, behind its interval gate
API_LEASE_TTL_S = 30 * 60  # seed 000: "The lease lasts 30 minutes." (the API's hourly jobs keep it)
PAYPAL = "paypal"
PAYPAL_SECRET = "paypal_credentials"
# Catch-up (docs/guarantees.md): only the two recovery jobs catch up `once`. A customer's pending
# cancellation or payment operation waits for them (seed 000: they resume nothing else), so an
# hour lost to an outage or an incident's disabled rule is an hour more of a customer's money in
# limbo; one coalesced run as soon as the rule is back saves up to that hour. Six hours covers an
# incident's disabled period; past that the next tick (within the hour) is as good. The retention
# jobs keep `none`: every reader applies live expiry while deletion catches up (seed 000), so a
# missed hour costs storage, not correctness. The 5-minute safety net keeps `none`: its next tick
# is never more than 5 minutes away. Overlap stays `skip` everywhere (seed 000: an unexpired lease
# prevents another invocation; nothing there asks for a tick to wait).
RECOVERY_CATCH_UP: dict[str, Any] = dict(catch_up=CatchUp.ONCE, catch_up_window_s=6 * 3600)

# The tables' indexes (the catalog is data: each store builds its pynamodb index from these names).
ORDERS_BY_STATUS = IndexSpec(name="by_status", partition_key=("status", "S"), sort_key=("updated_at", "N"))
ORDERS_BY_ACCOUNT = IndexSpec(name="by_account", partition_key=("account_id", "S"), sort_key=("created_at", "N"))
ACCOUNTS_BY_RECOVERY = IndexSpec(
    name="by_recovery", partition_key=("recovery_due", "S"), sort_key=("deleted_at", "N"), projection="KEYS_ONLY"
)
OPERATIONS_BY_DUE = IndexSpec(name="by_due", partition_key=("status", "S"), sort_key=("due_at", "N"))
OPERATIONS_BY_ACCOUNT = IndexSpec(name="by_account", partition_key=("account_id", "S"), sort_key=("created_at", "N"))
DEFERRED_BY_STATUS_UPDATED = IndexSpec(
    name="by_status_updated", partition_key=("status", "S"), sort_key=("updated_at", "N")
)

TABLES = (
    TableSpec(
        name="dpop_proofs",
        subsystem=SUBSYSTEM,
        partition_key=("jti", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="shared DPoP replay record, one row per proof id",
    ),
    TableSpec(
        name="conversations",
        subsystem=SUBSYSTEM,
        partition_key=("conversation_id", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="customer conversations with an expiry",
    ),
    TableSpec(
        name="orders",
        subsystem=SUBSYSTEM,
        partition_key=("order_id", "S"),
        indexes=(ORDERS_BY_STATUS, ORDERS_BY_ACCOUNT),
        description="orders: status machine (cancellation_pending ...), personal fields that redaction removes",
    ),
    TableSpec(
        name="accounts",
        subsystem=SUBSYSTEM,
        partition_key=("account_id", "S"),
        indexes=(ACCOUNTS_BY_RECOVERY,),
        description="customer accounts, their one pending account operation, deleted-account recovery flag",
    ),
    TableSpec(
        name="account_intents",
        subsystem=SUBSYSTEM,
        partition_key=("intent_id", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="unconfirmed account intents with an expiry",
    ),
    TableSpec(
        name="financial_operations",
        subsystem=SUBSYSTEM,
        partition_key=("operation_id", "S"),
        indexes=(OPERATIONS_BY_DUE, OPERATIONS_BY_ACCOUNT),
        description="charges and returns with retry state and a stable idempotency key",
    ),
    TableSpec(
        name="agent_invitations",
        subsystem=SUBSYSTEM,
        partition_key=("invitation_id", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="agent invitations with an expiry",
    ),
    TableSpec(
        name="customer_activity",
        subsystem=SUBSYSTEM,
        partition_key=("account_id", "S"),
        sort_key=("activity_id", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="customer activity, expiring 30 days after it happened",
    ),
    TableSpec(
        name="diagnostic_captures",
        subsystem=SUBSYSTEM,
        partition_key=("capture_id", "S"),
        sort_key=("part", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="diagnostic parents (expiry, retained charge), their refs/header/token children, usage rows",
    ),
    TableSpec(
        name="payment_intents",
        subsystem=SUBSYSTEM,
        partition_key=("intent_id", "S"),
        indexes=(DEFERRED_BY_STATUS_UPDATED,),
        description="deferred PayPal payment intents (approved, uncaptured); updated_at = buyer activity",
    ),
)

JOBS = (
    JobSpec(
        name="clean_conversations",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.retention:build_clean_conversations",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=120,
        lease_ttl_s=API_LEASE_TTL_S,
        tables={"conversations": "query+delete"},  # the expiry index, then conditional deletes
        unfenced={"conversations": "each delete is conditioned on expires_at <= now: any term deletes the same"},
        description="one bounded deletion of at most 100 expired conversations",
    ),
    JobSpec(
        name="clean_dpop_proofs",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.retention:build_clean_dpop_proofs",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=600,
        lease_ttl_s=API_LEASE_TTL_S,
        tables={"dpop_proofs": "query+batch_write"},  # the expiry index, then batched deletes
        unfenced={"dpop_proofs": "deletes expired proofs by random jti; a row back is a replay the API refuses anyway"},
        description="delete expired DPoP proofs, 1,000 a batch, at most 100 batches",
    ),
    JobSpec(
        name="recover_pending_cancellations",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.cancellations:build_recover_pending_cancellations",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=300,
        lease_ttl_s=API_LEASE_TTL_S,
        tables={"orders": "query+update", "financial_operations": "put"},  # one transaction per order
        description="finish cancellations left pending: 100 orders a batch, at most 20 batches; no provider call",
        **RECOVERY_CATCH_UP,
    ),
    JobSpec(
        name="recover_financial_operations",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.financial_recovery:build_recover_financial_operations",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=600,
        lease_ttl_s=API_LEASE_TTL_S,
        tables={
            "account_intents": "query+update",
            "accounts": "batch_get+query+update",
            "financial_operations": "query+update",
            "orders": "query+update",
            "diagnostic_captures": "batch_get+query+update+delete+batch_write",
            "customer_activity": "query+batch_write",
        },
        # Retention and index upkeep, each write conditioned on a state no later write leaves (or on time):
        # a taken-over term's late write does what any term would. The money moves are fenced transactions.
        unfenced={
            "account_intents": "expire_due: conditioned on still unconfirmed and expires_at <= now",
            "accounts": "clear_recovery: leaves the recovery index, conditioned on the terminal status deleted",
            "orders": "redact: conditioned on a terminal status and not yet redacted",
            "diagnostic_captures": "delete_capture: the parts of an expired capture, then its parent conditioned "
            "on still expired and no unreleased charge",
            "customer_activity": "delete_expired: append-only rows older than 30 days, never extended",
        },
        secrets=(PAYPAL_SECRET,),
        providers=(PAYPAL,),
        description="financial recovery (intents, deleted accounts, returns, card retries) alongside retention",
        **RECOVERY_CATCH_UP,
    ),
    JobSpec(
        name="expire_agent_invitations",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.invitations:build_expire_agent_invitations",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=120,
        lease_ttl_s=API_LEASE_TTL_S,
        tables={"agent_invitations": "query+delete"},
        unfenced={"agent_invitations": "each delete is conditioned on the invitation still pending and expired"},
        description="only removes expired invitations: 500 a batch, at most 20 batches",
    ),
    JobSpec(
        name="capture_abandoned_deferred",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.safety_net:build_capture_abandoned_deferred",
        schedule=EVERY_5_MINUTES,
        interval_s=300,
        timeout_s=240,
        tables={"payment_intents": "get+query+update"},
        secrets=(PAYPAL_SECRET,),
        providers=(PAYPAL,),
        description="seed 001 safety net: capture deferred intents untouched for 20 minutes, 50 a batch",
    ),
)
