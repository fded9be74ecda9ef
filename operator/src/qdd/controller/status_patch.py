"""Writing a status: the merge patch from the stored one, and the comparison that skips a write. Pure."""

from __future__ import annotations

from typing import Any


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch (RFC 7386) that turns the stored status ``old`` into ``new``, or None
    when they differ in nothing but transition times. A merge patch keeps every key it does not
    mention, so the keys ``new`` no longer has are sent as null (e.g. ``kvTransfer.bulkGbps`` of
    an earlier preflight): otherwise they would stay, and the re-read status would never equal the
    computed one."""
    if without_times(old) == without_times(new):
        return None
    return _nulls_for_removed(old, new)


def _nulls_for_removed(old: Any, new: Any) -> Any:
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    out: dict[str, Any] = {k: None for k in old if k not in new}
    out.update({k: _nulls_for_removed(old.get(k), v) for k, v in new.items()})
    return out


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    """For change detection: the status minus transition times."""
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []]
    return out


def drop_none(value: Any) -> Any:
    """The API server drops null fields; so do we, so that a re-read status compares equal."""
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_none(v) for v in value]
    return value
