"""Helm hook programs (preflight, CRD migration, post-install checks, safe uninstall).

The chart runs them as hook Jobs from the project image; they arrive with the chart work.
"""
