"""A seeded chaos run against the simulated cluster with the chart installed (test-only).

From a seed and a duration, :mod:`schedule` draws a timeline: ComputeDomains created, scaled and
deleted across two racks and several tenants, and faults (a component SIGKILLed, IMEX killed or
hung, the API server restarted, etcd paused, a fabric degraded, a node NotReady, a checkpoint
corrupted), each undone after a while. :mod:`run` plays it (:mod:`faults` does the faults,
:mod:`observe` reads the cluster and the nodes into :mod:`snapshot` dataclasses) and checks the
invariants of :mod:`invariants` after every step and at the end; :mod:`report` counts and tells
what happened. ``cdsim chaos`` runs it on a cluster of its own (``make chaos``);
``tests/cluster/with_chart/test_chaos.py`` runs a short one in ``make test``.

The pure parts (:mod:`schedule`, :mod:`snapshot`, :mod:`invariants`, :mod:`report`) do no I/O:
an import-linter contract keeps them so.
"""
