"""Cluster tests that install, upgrade, roll back, adopt and sync whole releases.

They run after tests/cluster/with_chart (whose release is gone by then) and each starts from
a cluster without our CRDs (the ``releases`` fixture), since each decides who owns them.
"""
