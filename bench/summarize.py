"""Print a short table of preflight results: python3 bench/summarize.py RESULT.json..."""

from __future__ import annotations

import json
import sys

MOVES = ("bulk", "per_page", "coalesced", "nixl_merge")


def main(paths: list[str]) -> None:
    for path in paths:
        try:
            with open(path) as fh:
                r = json.load(fh)
        except (OSError, ValueError) as e:
            print(f"{path}: unreadable ({e})")
            continue
        if "variants" not in r:
            continue
        peer = r.get("peer_copy") or {}
        print(f"\n{path}: pass={r.get('pass')} {r.get('reason')} — {r.get('message')}")
        print(f"  transports={r.get('transports')} ({(r.get('transports_detail') or {}).get('source')}) "
              f"peer={peer.get('gbps')} rev={peer.get('reverse_gbps')} pull={peer.get('pull_on_dst_gbps')} "
              f"error={r.get('error')}")
        print(f"  {'variant':16} {'bulk GB/s':>9} {'bulk ms':>8} {'page ms':>8} {'coal ms':>8} {'merge ms':>8}  posted")
        for v in r["variants"]:
            m = {k: v.get(k) or {} for k in MOVES}
            posted = "/".join(str(m[k].get("posted_descriptors")) for k in MOVES if m[k])
            print(f"  {v['name']:16} {m['bulk'].get('gbps') or '-':>9} {m['bulk'].get('median_ms') or '-':>8} "
                  f"{m['per_page'].get('median_ms') or '-':>8} {m['coalesced'].get('median_ms') or '-':>8} "
                  f"{m['nixl_merge'].get('median_ms') or '-':>8}  {posted}")


if __name__ == "__main__":
    main(sys.argv[1:])
