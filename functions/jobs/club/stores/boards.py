"""Store of the Discord boards (`club_boards`): messages the jobs keep up to date.

    board_id (key) | channel_id | message_id | content_hash | version | totals (JSON) | updated_at

A board is one Discord message (the darkroom schedule, the darkroom stats) or a
channel the jobs post into (the studio schedule). `content_hash` is the hash of
what was last published: a job publishes only when the rendered content
differs, with a condition on the version it read (+1 on every publish), so two
runs never publish the same change twice, and the version makes each publish's
event nonce unique even when the content returns to an earlier text. The darkroom stats board also keeps
the totals themselves.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.dynamo import get_row, put_row
from jobfence.transaction import Write, update_write

DARKROOM_SCHEDULE = "darkroom_schedule"
DARKROOM_STATS = "darkroom_stats"
STUDIO_SCHEDULE = "studio_schedule"


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()[:32]


class _Board(Model):
    class Meta:
        table_name = "unbound"

    board_id = UnicodeAttribute(hash_key=True)
    channel_id = UnicodeAttribute()
    message_id = UnicodeAttribute(null=True)
    content_hash = UnicodeAttribute(null=True)
    totals = UnicodeAttribute(null=True)
    version = NumberAttribute(default=0)
    updated_at = NumberAttribute(null=True)


@dataclass(frozen=True)
class Board:
    """One board as read, built by the store from its row."""

    board_id: str
    channel_id: str
    message_id: str | None  # None: registered without a message yet (nothing to edit)
    content_hash: str | None  # of what was last published
    version: int  # every publish is conditioned on the version read
    totals: Mapping[str, float] = field(default_factory=dict)  # the darkroom stats' (empty for the others)


class BoardStore(ModelStore):
    """Read boards and build their conditional publish updates."""

    _model_class = _Board

    def put(self, board_id: str, channel_id: str, message_id: str | None = None) -> None:
        """Register a board (seed data, operators)."""
        put_row(
            self._model(board_id, channel_id=channel_id, message_id=message_id, version=0),
            None,
            f"registering board {board_id}",
        )

    def get(self, board_id: str) -> Board | None:
        row = get_row(self._model, board_id, what="reading a row of boards")
        if row is None:
            return None
        totals = json.loads(row.totals) if row.totals else {}
        return Board(row.board_id, row.channel_id, row.message_id, row.content_hash, int(row.version or 0), totals)

    def publish_op(self, row: Board, content: str, totals: Mapping[str, float] | None = None) -> Write:
        """Record `content` as published (version + 1), only over the version that was read."""
        m = self._model
        actions = [
            m.content_hash.set(content_hash(content)),
            m.version.set(row.version + 1),
            m.updated_at.set(self._clock.now_ms()),
        ]
        if totals is not None:
            actions.append(m.totals.set(json.dumps(dict(totals), sort_keys=True)))
        condition = m.board_id.exists() & (m.version == row.version)
        return update_write(m(row.board_id), actions, condition)
