"""The operator (kopf): the only layer that talks to the API server.

Pure helpers (:mod:`.children`, :mod:`.groups`, :mod:`.status`) decide; :mod:`.kube` executes;
:mod:`.reconcile` ties one level-triggered reconcile together; :mod:`.handlers` registers it with kopf.
"""
