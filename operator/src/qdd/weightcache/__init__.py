"""The node-local weight cache's program (:mod:`.program`): a standard-library file the prefetch and
engine pods run with the engine image's python (docs/cold-start.md#node-local-weight-cache)."""
