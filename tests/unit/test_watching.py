"""kopf's watch-stream timeouts as `qdd run` sets them (qdd.controller.watching)."""

from __future__ import annotations

import kopf
import pytest

from qdd.cli import parser
from qdd.controller.watching import WatchTimeouts


def test_cli_defaults_are_the_documented_ones_and_reach_kopf():
    args = parser().parse_args(["run"])
    watch = WatchTimeouts(args.watch_server_timeout, args.watch_client_timeout, args.watch_inactivity_timeout)
    assert watch == WatchTimeouts() == WatchTimeouts(server=300, client=330, inactivity=70.0)
    settings = kopf.OperatorSettings()
    watch.apply(settings)
    assert settings.watching.server_timeout == 300 and isinstance(settings.watching.server_timeout, int)
    assert settings.watching.client_timeout == 330 and settings.watching.inactivity_timeout == 70.0
    # The client gives up only after the server should have ended the stream.
    assert watch.client > watch.server


def test_cli_flags_override():
    args = parser().parse_args(["run", "--watch-inactivity-timeout", "4", "--watch-server-timeout", "3600"])
    assert (args.watch_inactivity_timeout, args.watch_server_timeout) == (4.0, 3600)


@pytest.mark.parametrize("field", ["server", "client", "inactivity"])
def test_non_positive_timeout_refused_naming_it(field):
    with pytest.raises(ValueError, match=f"watch {field} timeout must be > 0"):
        WatchTimeouts(**{field: 0})
