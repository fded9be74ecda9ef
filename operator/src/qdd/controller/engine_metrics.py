"""Reading engine metrics: one pod's ``/metrics``, or many pods' series from a Prometheus.

Every read is bounded: ``timeout_s`` (connect to last byte), ``max_bytes`` (what is read of the
body; beyond it the read is refused as over the limit, not truncated and half-parsed) and
``max_series`` (sample lines). Parsing is prometheus-client's own text parser
(``prometheus_client.parser.text_string_to_metric_families``), once per series text
(:class:`SeriesCache`); only the series qdd reads (qdd.observe.metrics) are parsed and kept. Used from the observer's threads (qdd.controller.observer), never
inside a reconcile pass.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ..observe import PodRead, engines_of
from ..observe.extract import OverLimit, Sample
from ..observe.metrics import EXPOSED, PREFIX_REGEX
from . import metrics

DEFAULT_TIMEOUT_S = 2.0
"""A vLLM API server answers /metrics in milliseconds; 2 s is a hung or overloaded one."""
DEFAULT_MAX_BYTES = 4 << 20
"""4 MiB per pod: a DEP8 leader's /metrics (8 engines × every vLLM 0.33 histogram) is about
0.4 MiB (bench/results/observe-scale.json); ten times that is not an engine."""
DEFAULT_MAX_SERIES = 50_000
"""Samples parsed per pod: a DEP8 leader exposes about 3,000."""


@dataclass(frozen=True)
class Bounds:
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_bytes: int = DEFAULT_MAX_BYTES
    max_series: int = DEFAULT_MAX_SERIES


DEFAULT_BOUNDS = Bounds()


class _Status(Exception):
    """An HTTP answer other than 2xx; its body is not read."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


async def _fetch(url: str, b: Bounds, accept: str) -> bytes:
    async with asyncio.timeout(b.timeout_s), aiohttp.ClientSession(
            trust_env=False, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None),
            connector=aiohttp.TCPConnector(force_close=True, limit=1)) as session, session.get(
            url, headers={"Accept": accept, "Accept-Encoding": "identity", "User-Agent": "qdd-operator"},
            allow_redirects=False) as resp:
        if not 200 <= resp.status < 300:
            raise _Status(resp.status)
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(65536):
            size += len(chunk)
            if size > b.max_bytes:
                raise OverLimit(f"more than {b.max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)


def _get(url: str, b: Bounds, accept: str = "text/plain") -> bytes:
    """The body of one GET of ``url``: one deadline from connect to last byte (``b.timeout_s``), at
    most ``b.max_bytes`` (OverLimit beyond), no redirect followed (a 3xx is an error, as any
    non-2xx), no proxy, no compression asked for or undone. Before (round 4), urllib followed
    redirects to any address — an engine image could make the operator GET any URL its network
    reaches and learn from the error whether it answered — and its timeout restarted on every byte,
    so a /metrics trickled a byte at a time held one of the observer's threads for ever."""
    return asyncio.run(_fetch(url, b, accept))


SERIES_CACHE_MAX = 100_000
"""Series texts whose parse is kept (:class:`SeriesCache`): the distinct series of every model and
engine rank the operator reads (about 1,000 for a DEP8 leader's families read, the same texts on
every pod of a model), many times over; beyond it the cache starts again empty."""


class SeriesCache:
    """A series' text (a sample line up to its value: name and labels) → (sample name, labels) as
    prometheus-client's parser reads it. An engine exposes the same series on every read, only their
    values change, so the parser runs once per series the operator has not seen before, and each
    later read splits the line at its value and looks the series up. prometheus-client's parser
    reads labels a character at a time: parsing every kept line on every read was 85 % of the
    reader's CPU (cProfile, ``make bench-observe``, bench/README.md). The labels are shared between
    reads: never mutate them. Thread-safe (one dict, atomic operations)."""

    def __init__(self, max_size: int = SERIES_CACHE_MAX):
        self.max_size = max_size
        self._parsed: dict[str, tuple[str, dict[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._parsed)

    def sample(self, line: str) -> Sample:
        """The line's (name, labels, value); ValueError for a line the parser refuses."""
        close = line.rfind("}")
        if close >= 0:
            series, rest = line[:close + 1], line[close + 1:]
        else:
            series, _, rest = line.partition(" ")
        known = self._parsed.get(series)
        if known is None:
            parsed = [s for fam in text_string_to_metric_families(line + "\n") for s in fam.samples]
            if len(parsed) != 1:
                raise ValueError(f"not one sample: {line[:200]!r}")
            if len(self._parsed) >= self.max_size:
                self._parsed.clear()
            self._parsed[series] = (parsed[0].name, parsed[0].labels)
            return parsed[0].name, parsed[0].labels, float(parsed[0].value)
        value = rest.split(None, 1)[0] if rest.strip() else rest
        if "_" in value:  # float() takes "1_0"; prometheus-client's parser does not
            raise ValueError(f"invalid value: {value!r}")
        return known[0], known[1], float(value)


_SERIES = SeriesCache()


def parse_text(text: str, max_series: int = DEFAULT_MAX_SERIES,
               cache: SeriesCache | None = None) -> tuple[list[Sample], int]:
    """(the samples qdd reads, every sample line of the body) of a Prometheus text exposition;
    OverLimit beyond ``max_series`` sample lines. A sample's name ends at ``{`` or the first space:
    only the lines of the series qdd reads (a quarter of a DEP8 leader's 3,600 lines) are parsed,
    by prometheus-client's parser through ``cache`` (default: the process's :class:`SeriesCache`)."""
    cache = _SERIES if cache is None else cache
    kept: list[Sample] = []
    n = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        n += 1
        if n > max_series:
            raise OverLimit(f"more than {max_series} series")
        end = line.find("{")
        name = line[:end] if end >= 0 else line.split(None, 1)[0]
        if name in EXPOSED:
            kept.append(cache.sample(line))
    return kept, n


def _error(e: BaseException, b: Bounds = DEFAULT_BOUNDS) -> str:
    if isinstance(e, _Status):
        return f"HTTP {e.status}" + (": a redirect, which the reader does not follow" if 300 <= e.status < 400 else "")
    if isinstance(e, TimeoutError):
        return f"no answer within {b.timeout_s:g} s"
    if isinstance(e, (aiohttp.ClientConnectionError, OSError)):
        return f"unreachable: {type(e).__name__}: {str(e)[:200]}"
    return f"{type(e).__name__}: {str(e)[:200]}"


def read_pod(url: str, pod: str, role: str, endpoint: int, bounds: Bounds = DEFAULT_BOUNDS) -> PodRead:
    """One bounded read of one pod's /metrics; never raises (a failure is the read's ``error``)."""
    t0, now = time.perf_counter(), time.time()
    result = "ok"
    try:
        body = _get(url, bounds)
        samples, n = parse_text(body.decode("utf-8", "replace"), bounds.max_series)
        metrics.ENGINE_READ_BYTES.inc(len(body))
        return PodRead(pod, role, endpoint, now, engines_of(samples), None, len(body), n)
    except OverLimit as e:
        result = "limit"
        return PodRead(pod, role, endpoint, now, error=f"over the read limit: {e}")
    except Exception as e:  # noqa: BLE001 — refused, timeout, HTTP error, a body that does not parse
        result = "error"
        return PodRead(pod, role, endpoint, now, error=_error(e, bounds))
    finally:
        metrics.ENGINE_READS.labels(result).inc()
        metrics.ENGINE_READ_SECONDS.observe(time.perf_counter() - t0)


def prometheus_query(namespace: str, pods: list[str]) -> str:
    """The instant query for exactly the series qdd reads of ``pods`` (regex-quoted names)."""
    names = "|".join(p.replace(".", "\\\\.") for p in sorted(pods))
    return f'{{__name__=~"{PREFIX_REGEX}",namespace="{namespace}",pod=~"{names}"}}'


def read_prometheus(base: str, namespace: str, targets: dict[str, tuple[str, int]],
                    bounds: Bounds = DEFAULT_BOUNDS) -> dict[str, PodRead]:
    """One instant query of a Prometheus for every pod in ``targets`` (pod -> (role, endpoint));
    a pod without series, or whose series are over a bound, reads as an error. At most
    ``bounds.max_bytes`` and ``bounds.max_series`` per pod asked. Never raises."""
    now = time.time()
    t0 = time.perf_counter()
    n = max(1, len(targets))
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode(
        {"query": prometheus_query(namespace, list(targets))})
    try:
        body = _get(url, Bounds(bounds.timeout_s, bounds.max_bytes * n, bounds.max_series * n), accept="application/json")
        data = json.loads(body)
        if data.get("status") != "success":
            raise ValueError(f"Prometheus answered {data.get('errorType')}: {data.get('error')}")
        result = data["data"]["result"]
        if len(result) > bounds.max_series * n:
            raise OverLimit(f"more than {bounds.max_series * n} series")
        per_pod: dict[str, list[Sample]] = defaultdict(list)
        for item in result:
            m = dict(item["metric"])
            per_pod[str(m.get("pod", ""))].append((str(m.pop("__name__", "")), m, float(item["value"][1])))
        metrics.ENGINE_READS.labels("ok").inc()
        metrics.ENGINE_READ_BYTES.inc(len(body))
    except Exception as e:  # noqa: BLE001 — whatever the answer was, every pod reads as its error
        metrics.ENGINE_READS.labels("error").inc()
        why = f"Prometheus {base}: {_error(e, bounds)}"
        return {p: PodRead(p, r, ep, now, error=why) for p, (r, ep) in targets.items()}
    finally:
        metrics.ENGINE_READ_SECONDS.observe(time.perf_counter() - t0)
    out = {}
    for pod, (role, endpoint) in targets.items():
        s = per_pod.get(pod)
        if not s:
            out[pod] = PodRead(pod, role, endpoint, now, error=f"Prometheus {base} has no vLLM series of this pod")
            continue
        try:  # one pod's series over a bound (or with labels of other types) do not blank the others
            out[pod] = PodRead(pod, role, endpoint, now, engines_of(s), None, 0, len(s))
        except Exception as e:  # noqa: BLE001
            out[pod] = PodRead(pod, role, endpoint, now, error=f"Prometheus {base}: over the read limit: {e}"
                               if isinstance(e, OverLimit) else f"Prometheus {base}: {_error(e, bounds)}")
    return out
