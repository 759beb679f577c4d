"""Errors of API calls, for code outside ``kube`` that must not import the client library."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

API_ERRORS: tuple[type[Exception], ...] = (ApiException, HTTPError, OSError)
"""What an API call raises when the server refuses it or cannot be reached."""
