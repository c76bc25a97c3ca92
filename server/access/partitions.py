"""A caller's partitions of one provider (the data sources and versions of its account): the rows and kept versions
it sees of them, served or gone (deletions only, and what the history of a withdrawn resource tells)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, exists, false, or_

from server.declare.provider import ResourceProvider, Versioning
from server.search.seen import by_deletion, seen_versions


def in_partitions(column: ColumnElement[Any] | None, partitions: frozenset[Any] | None) -> list[ColumnElement[bool]]:
    if partitions is None or column is None:
        return []
    if not partitions:
        return [false()]
    # constants in the SQL, not parameters: PostgreSQL's generic plan of a prepared statement would not know
    # how many rows they select (it then sorted whole partitions for a page)
    return [column.in_(bindparam(None, sorted(partitions, key=str), unique=True, expanding=True,
                                 literal_execute=True))]


@dataclass(frozen=True)
class Partitions:
    """A caller's partitions of one provider: `served` (None: every one, no condition) and `gone`, those of its
    account that are not served, where only deletions are shown."""

    served: frozenset[Any] | None
    gone: frozenset[Any] = frozenset()

    def rows(self, provider: ResourceProvider, column: ColumnElement[Any] | None) -> list[ColumnElement[bool]]:
        """The condition on the provider's rows: in a served partition, or deleted in a gone one."""
        served = in_partitions(column, self.served)
        if not served or not self.gone:
            return served
        return [by_deletion(provider, served[0], or_(served[0], *in_partitions(column, self.gone)))]

    def versions(self, versioning: Versioning, column: ColumnElement[Any] | None) -> list[ColumnElement[bool]]:
        """The same on kept versions (`column`: their partition, a column of the history table): in a served
        partition; in a gone one, a deletion, or a version followed by a served one or by a deletion (a unit loaded
        again under a newer source version, or withdrawn when its source version stopped being served: its versions
        of before were read then, and its history tells how it ended). A version in a partition never served and
        never deleted is not shown."""
        served = in_partitions(column, self.served)
        if not served or not self.gone or column is None:
            return served
        later = versioning.history.alias("later")  # type: ignore[attr-defined]
        later_deleted = later.c[versioning.history_deleted.key]
        # moved on: a later version is served, or a later deletion is shown (the client that read this version
        # while its partition was served is then told it went; its vread stays answerable)
        moved_on = exists().where(later.c[versioning.history_id.key] == versioning.history_id,
                                  later.c[versioning.history_version.key] > versioning.history_version,
                                  or_(and_(*in_partitions(later.c[column.key], self.served)),
                                      and_(*seen_versions(later_deleted, and_(*in_partitions(later.c[column.key],
                                                                                             self.gone)),
                                                          deleted=True))))
        gone = and_(*in_partitions(column, self.gone))
        return [or_(served[0], and_(*seen_versions(versioning.history_deleted, gone, deleted=True)),
                    and_(gone, moved_on))]


EVERY_PARTITION = Partitions(None)
