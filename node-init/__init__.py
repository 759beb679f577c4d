"""The node init container: NVLink fabric validation and clique labelling of a node.

The chart runs it before the kubelet plugin on every GPU node (once, as an init container);
then the plugin re-checks the fabric in a thread (:func:`run.watch`), or a sidecar runs it
again with ``--watch`` (``nodeInit.recheckIn``).
"""
