"""The canary's decisions, pure: when a check is due, what an answer means against the baseline,
the state the conditions are computed from, and the events of its transitions.

``record`` is ``status.canary`` as stored (camelCase keys, qdd.api.status.CanaryStatus); every
function returns a new one and never mutates its input.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any

from ..api import conditions as C
from ..api.conditions import Reason
from ..hashing import content_hash
from .client import Answer

TEXT_LIMIT = 256
"""Characters of an answer kept in the status and in messages (max_tokens ≤ 256 tokens can be
kilobytes; a status must stay small)."""
RETRY_SECONDS = 30
"""A failed check is repeated after min(periodSeconds, this): Degraded should clear soon after the
engines are right again, without hammering a broken router."""
PASSED, MISMATCH, FAILED = "Passed", "Mismatch", "Failed"


@dataclass(frozen=True)
class CanaryState:
    """What the CanaryPassed, Degraded and Ready conditions read. ``passed`` None: not known yet
    (pending); ``record``: the ``status.canary`` to write (None: none)."""

    passed: bool | None
    reason: str
    message: str
    record: dict[str, Any] | None = None


def _short(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "…"


def answer_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def request_hash(body: dict[str, Any]) -> str:
    return content_hash(body, 16)


def _parse_time(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def same_baseline(record: dict[str, Any] | None, generation: str, req_hash: str) -> bool:
    """The record belongs to this generation and this request (else a new baseline is taken)."""
    return record is not None and record.get("generation") == generation and record.get("requestHash") == req_hash


def due(record: dict[str, Any] | None, generation: str, req_hash: str, now: dt.datetime, period_s: int,
        was_pending: bool = False) -> bool:
    """A check is due: no record for this generation and request, the last check came while the
    deployment was not serving (``was_pending``), or periodSeconds (a failed one: min(period, 30))
    passed since the last check."""
    if record is None or not same_baseline(record, generation, req_hash) or was_pending:
        return True
    last = _parse_time(record.get("lastCheckTime"))
    if last is None:
        return True
    wait = period_s if record.get("lastResult") == PASSED else min(period_s, RETRY_SECONDS)
    return (now - last).total_seconds() >= wait


def judge(record: dict[str, Any] | None, generation: str, req_hash: str, answer: Answer, expected: str | None,
          now: str) -> dict[str, Any]:
    """The new record after one check. The baseline is ``expected`` when pinned, else the first
    answer of the generation (or the first since ``expected`` was removed); a failed first check
    keeps no baseline (the next answer becomes it)."""
    old = dict(record) if record is not None and same_baseline(record, generation, req_hash) else {}
    base: dict[str, Any] = {"generation": generation, "requestHash": req_hash, "lastCheckTime": now,
                            "latencyMs": answer.latency_ms}
    if expected is not None:
        base |= {"answer": _short(expected), "answerHash": answer_hash(expected), "baselineSource": "expected"}
    elif old.get("answerHash") and old.get("baselineSource") != "expected":
        # A baseline pinned by ``expected`` goes with the field: once it is removed the next answer
        # becomes the baseline, as if the generation had started without it.
        base |= {k: old[k] for k in ("answer", "answerHash", "baselineSource") if k in old}
    if answer.text is None:
        return base | {"lastResult": FAILED, "message": _short(answer.error or "no answer")}
    if "answerHash" not in base:
        return base | {"answer": _short(answer.text), "answerHash": answer_hash(answer.text),
                       "baselineSource": "first-answer", "lastResult": PASSED}
    if answer_hash(answer.text) == base["answerHash"]:
        return base | {"lastResult": PASSED}
    return base | {"lastResult": MISMATCH, "lastAnswer": _short(answer.text),
                   "message": f"expected {base['answer']!r} ({base['baselineSource']}), got {_short(answer.text)!r}"}


def state_of(record: dict[str, Any], url: str) -> CanaryState:
    """The conditions' view of a record (the last check's result)."""
    result = record.get("lastResult")
    gen = record.get("generation", "")
    if result == PASSED:
        return CanaryState(True, Reason.CANARY_PASSED,
                           f"the answer equals the baseline of generation {gen} ({record.get('baselineSource')}: "
                           f"{record.get('answer')!r})", record)
    if result == MISMATCH:
        return CanaryState(False, Reason.CANARY_MISMATCH,
                           f"canary through {url}: {record.get('message')} (generation {gen})", record)
    return CanaryState(False, Reason.CANARY_FAILED, f"canary through {url}: {record.get('message')}", record)


def _cond(status: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    return next((c for c in (status or {}).get("conditions") or [] if c.get("type") == ctype), {})


def canary_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events a status change posts: a Warning when the canary starts
    failing or fails differently, a Normal CanaryPassed when it passes again after a failure."""
    was, now = _cond(old, C.CANARY_PASSED), _cond(new, C.CANARY_PASSED)
    if now.get("status") == "False" and (was.get("status") != "False" or was.get("reason") != now.get("reason")
                                         or was.get("message") != now.get("message")):
        return [("Warning", now["reason"], now.get("message", ""))]
    if now.get("status") == "True" and now.get("reason") == Reason.CANARY_PASSED and was.get("status") == "False":
        return [("Normal", Reason.CANARY_PASSED, now.get("message", ""))]
    return []
