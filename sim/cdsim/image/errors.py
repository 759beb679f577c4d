"""The one base of every error the image build reports (each module has its own kind)."""

from __future__ import annotations


class ImageError(RuntimeError):
    """The image could not be built or checked; the message says which step and why."""
