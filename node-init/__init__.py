"""The node init container: NVLink fabric validation and clique labelling of a node.

The chart runs it before the kubelet plugin on every GPU node (once, as an init container),
and again with ``--watch`` as a sidecar that re-checks the fabric periodically.
"""
