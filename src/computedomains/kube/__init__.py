"""Kubernetes access for every component: clients, tokens (and, later, caches and queues)."""
