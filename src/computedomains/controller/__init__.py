"""The ComputeDomain controller: templates, slots, cliques, status and Events (control-side.md)."""
