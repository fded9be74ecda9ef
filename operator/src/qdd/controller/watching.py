"""Watch-stream timeouts of kopf's watches and of the children's informers
(qdd.controller.informer): how fast the operator notices a watch that is dead or silent.

A watch can stop delivering while its TCP connection stays open (a load balancer or NAT that
dropped the flow, an API server that hangs). Three bounds, each a kopf setting
(``settings.watching``, kopf 1.45 ``kopf/_cogs/clients/watching.py``):

* ``inactivity`` — no event at all for this long: kopf drops the stream and watches again from
  the last resourceVersion it saw (events of the gap are replayed, or a 410 makes it list anew).
  kopf asks for bookmarks (``allowWatchBookmarks=true``) and kube-apiserver's watch cache sends
  one about every minute on a quiet stream, so a healthy stream is never idle much longer than
  60 s: kopf's own default, 70 s, is used.
* ``server`` — ``timeoutSeconds`` of each watch request: the API server ends every stream after
  this long, and kopf starts the next one.
* ``client`` — the client's total timeout of one watch request, a little above ``server``: it
  ends a stream whose end the server never sent.

Whatever a silent watch misses, qdd's resync pass (``qdd run --resync-seconds``) reconciles every
resource anyway (the custom resources listed afresh; the children as cached, each kind listed afresh
every ``informer.RELIST_S``); these bounds decide how soon the event-driven path works again. Measured: tests/integration/test_silent_watch.py, docs/reliability.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WatchTimeouts:
    """Seconds; see the module docstring for what each bounds and why these defaults."""

    server: int = 300
    """Whole seconds: the API server parses ``timeoutSeconds`` as an integer (300.0 is a 400)."""
    client: float = 330.0
    inactivity: float = 70.0

    def __post_init__(self) -> None:
        for field in ("server", "client", "inactivity"):
            if getattr(self, field) <= 0:
                raise ValueError(f"watch {field} timeout must be > 0 seconds, not {getattr(self, field)}")

    def apply(self, settings: Any) -> None:
        """Write them into kopf's ``OperatorSettings``."""
        settings.watching.server_timeout = int(self.server)
        settings.watching.client_timeout = self.client
        settings.watching.inactivity_timeout = self.inactivity
