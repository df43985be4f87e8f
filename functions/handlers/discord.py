"""The Discord worker: the notification queue's consumer and the only function holding the bot token.

Collaborators are built once at cold start, the nonce store's DynamoDB client too (the function's one,
`jobfence.binding.dynamodb_client`: pynamodb would make a session and a client of its own on the first tick);
secrets are not: the verify keys (one secret per publishing job)
and the bot token are read on use through one long-lived `SecretsManagerValues`
(Powertools, cached `max_age_s`), so a rotation reaches a warm worker. Each SQS record is verified,
nonce-claimed and applied by `DiscordDelivery` under the Powertools batch
processor, which reports failed records (rejected, rate-limited, Discord
errors) as batch item failures so only they come back. `build(environ, clock)`
composes it; `handler` is that with this process's environment and the wall clock.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch import EventType as BatchEventType

from jobfence.binding import bound_to, dynamodb_client
from jobfence.clock import Clock, SystemClock
from jobfence.config import Settings, metrics_namespace
from jobfence.sqs_batch import split_records
from jobfence.tracing import handler_tracer, traced
from jobs.club.catalog import DISCORD_TOKEN_SECRET, NOTIFICATIONS_QUEUE, SUBSYSTEM, verify_secret
from jobs.club.delivery import DiscordDelivery
from jobs.club.events import Verifier
from jobs.club.signers import SignerKeyrings, grants_from_catalog
from jobs.club.stores.nonces import NonceStore
from providers.discord import DiscordRest
from providers.secrets import SecretsManagerValues
from providers.sqs import SqsVisibility


def build(environ: Mapping[str, str], clock: Clock) -> Callable[[Any, Any], Mapping[str, Any]]:
    """The worker's handler with its collaborators built once (the cold start)."""
    settings = Settings.from_environ(environ)
    session = boto3.Session()
    logger = Logger(service=SUBSYSTEM)
    tracer = handler_tracer(SUBSYSTEM, http=True)  # Discord's REST API
    logger.append_keys(worker="discord", stage=NOTIFICATIONS_QUEUE)
    metrics = Metrics(namespace=metrics_namespace(environ), service=SUBSYSTEM)
    metrics.set_default_dimensions(job=NOTIFICATIONS_QUEUE)
    secrets = SecretsManagerValues(session.client("secretsmanager"))
    token_name = settings.secret(DISCORD_TOKEN_SECRET)
    # One keyring per publishing job (its verify secret), and the table of what each job may ask for.
    grants = grants_from_catalog()
    keyrings = SignerKeyrings.of(secrets, {job: settings.secret(verify_secret(job)) for job in grants}, clock)
    with bound_to(session, dynamodb_client(session)):  # its region, the function's one DynamoDB client
        nonces = NonceStore(settings.table("club_event_nonces"), clock)
    delivery = DiscordDelivery(
        Verifier(keyrings, clock, grants),
        nonces,
        DiscordRest(settings.provider_url("discord"), lambda fresh: secrets.get(token_name, fresh=fresh)),
        SqsVisibility(session.client("sqs"), settings.queue(NOTIFICATIONS_QUEUE)),
        logger,
        metrics,
    )
    processor = BatchProcessor(event_type=BatchEventType.SQS, raise_on_entire_batch_failure=False)

    @metrics.log_metrics
    @logger.inject_lambda_context(log_event=False)
    @traced(tracer)
    def handler(event: Any, context: Any) -> Mapping[str, Any]:
        batch = split_records(event)  # a non-SQS event is an InvalidEvent; a record without id or body is dropped
        if batch.malformed:
            delivery.dropped(batch.malformed)
        if not batch.records:
            return {"batchItemFailures": []}  # Powertools refuses an empty batch; there is nothing to report
        return process_partial_response(
            event=batch.event(), record_handler=delivery.deliver, processor=processor, context=context
        )

    return handler


handler = build(os.environ, SystemClock())
