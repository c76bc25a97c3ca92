"""The account a token without an account claim sees (the claimless account), as the data records it: set with the
first data source, moved by `accounts rename`, never changed by a removal or a purge. Removed, its deletions stay
published to such tokens (their copies drop its units); purged (it holds nothing), they get 403 naming it
(server.access.tenancy.caller_account), never the next tenant's data. And what a removal or
a rename changes for tokens, as the command line says it."""
from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select, update

from plugins.orgunits.tables import data_source, orgunit_setting
from plugins.orgunits.views import CLAIMLESS, FIRST_ACCOUNT, RENAMED

_LIVE = data_source.c.removed_at.is_(None)


def recorded(conn: Connection) -> str | None:
    """The account recorded for tokens without an account claim (None: no data source was ever created)."""
    found = conn.execute(FIRST_ACCOUNT).scalar()
    return None if found is None else str(found)


def record_first(conn: Connection) -> None:
    """Record the oldest data source's account when none is recorded: the one a data source just created belongs to,
    when it is the first."""
    if recorded(conn) is not None:
        return
    first = conn.execute(select(data_source.c.account).order_by(data_source.c.id).limit(1)).scalar()
    if first is not None:
        conn.execute(insert(orgunit_setting).values(name=CLAIMLESS, value=first))


def move(conn: Connection, account: str, new_account: str) -> None:
    """`accounts rename`: the record follows its account (tokens without an account claim keep seeing the same
    data), and the old name is recorded as renamed (a token still claiming it gets 403 saying so: views.
    FORMER_ACCOUNTS), older names of it following it."""
    conn.execute(update(orgunit_setting).where(orgunit_setting.c.name == CLAIMLESS, orgunit_setting.c.value == account)
                 .values(value=new_account))
    conn.execute(update(orgunit_setting).where(orgunit_setting.c.name.startswith(RENAMED),
                                               orgunit_setting.c.value == account).values(value=new_account))
    reuse(conn, new_account)
    conn.execute(insert(orgunit_setting).values(name=RENAMED + account, value=new_account))


def renamed_to(conn: Connection, account: str) -> str | None:
    """The name now of the account once called `account` (None: it was never renamed away)."""
    found = conn.execute(select(orgunit_setting.c.value).where(orgunit_setting.c.name == RENAMED + account)).scalar()
    return None if found is None else str(found)


def reuse(conn: Connection, account: str) -> None:
    """A data source is created in `account` (a load, a rename into it): the name is an account again, no longer a
    former one."""
    conn.execute(delete(orgunit_setting).where(orgunit_setting.c.name == RENAMED + account))


def removal_notes(conn: Connection, account: str, default_account: str | None) -> list[str]:
    """Which tokens a removal (or purge) of some or all of `account`'s data sources changes, read after it in its
    transaction (a dry run's too). `default_account`: auth.default_account (it decides for tokens without the claim)."""
    left = list(conn.execute(select(data_source.c.name).where(data_source.c.account == account, _LIVE)
                             .order_by(data_source.c.name)).scalars())
    claimless = (default_account or recorded(conn)) == account
    if left:
        also = " and tokens without an account claim (they see this account)" if claimless else ""
        return [f"tokens with the account claim {account!r}{also} keep seeing its other data source"
                f"{'s' if len(left) != 1 else ''} ({', '.join(left)})"]
    kept = conn.execute(select(data_source.c.id).where(data_source.c.account == account).limit(1)).first()
    if kept is not None:  # removed, not purged: its deletions stay published to its tokens
        who = f"tokens with the account claim {account!r}" + \
            (" and tokens without an account claim (they see this account)" if claimless else "")
        return [f"{who} see its units as deleted (410, a DELETE in _history and $export?_since: their copies drop "
                "them), and nothing else" + ("; purged, tokens without an account claim get 403 naming it"
                                             if claimless and not default_account else "")]
    notes = [f"tokens with the account claim {account!r} see nothing: the account holds no data source"]
    if claimless and default_account:
        notes.append(f"tokens without an account claim see nothing either: auth.default_account names {account!r}")
    elif claimless:
        notes.append(f"tokens without an account claim get 403 naming account {account!r}, the account they see "
                     "(recorded when it was first loaded), never another account's data: give them another with "
                     "auth.default_account, or give their clients tokens with the account claim")
    return notes


def rename_note(conn: Connection, account: str, new_account: str, default_account: str | None) -> str:
    """What renaming `account` to `new_account` changes for tokens without an account claim, read before it."""
    if default_account == account:
        return (f"tokens without an account claim now see nothing: auth.default_account names {account!r}; set it to "
                f"{new_account!r} for them to keep seeing this data")
    if default_account == new_account:
        return f"tokens without an account claim now see this data: auth.default_account names {new_account!r}"
    if default_account:
        return f"tokens without an account claim are unchanged (auth.default_account names {default_account!r})"
    before = recorded(conn)
    if before == account:
        return (f"tokens without an account claim keep seeing this data: {new_account!r} is now the account recorded "
                "for them")
    if before == new_account:
        return (f"tokens without an account claim now see this data: {new_account!r} is the account recorded for "
                "them (its data sources were purged)")
    held = conn.execute(select(data_source.c.id).where(data_source.c.account == before, _LIVE).limit(1)).first()
    if held is None:
        return (f"tokens without an account claim are unchanged: refused (403), account {before!r}, the one recorded "
                "for them, holds no data source")
    return f"tokens without an account claim are unchanged (they see account {before!r})"
