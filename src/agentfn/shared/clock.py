"""The UTC day that daily allowances (tokens, pages, runs) count in, and when the next one starts."""

from __future__ import annotations

import datetime as dt
import math


def next_midnight(now: dt.datetime | None = None) -> dt.datetime:
    """The next midnight UTC: when a spent daily allowance comes back."""
    now = now or dt.datetime.now(dt.UTC)
    return dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)


def seconds_until(moment: dt.datetime, now: dt.datetime | None = None) -> int:
    """Whole seconds to wait for `moment`, at least 1: a `Retry-After` that never says "now" too early."""
    now = now or dt.datetime.now(dt.UTC)
    return max(1, math.ceil((moment - now).total_seconds()))


def timestamp(moment: dt.datetime) -> str:
    """RFC 3339 in UTC with a `Z`, as the doors write times."""
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
