"""The IMEX agent: runs the node's ``nvidia-imex`` for whichever ComputeDomain the node is in.

One long-lived process per NVLink node (docs/control-side.md). It watches its own Node (the
``computeDomain`` label) and the ComputeDomainClique objects of its clique, renders IMEX's
config, nodes file and hosts entries, supervises ``nvidia-imex``, and reports IMEX's state in
the node-local ImexStatus file (with a heartbeat) and in its own pod's
``computedomains.io/IMEXReady`` condition, as :mod:`computedomains.api.imex` defines them.
"""
