"""The node init container: NVLink fabric validation and clique labelling of a node.

The chart runs it before the kubelet plugin on every GPU node; it arrives with the fabric work.
"""
