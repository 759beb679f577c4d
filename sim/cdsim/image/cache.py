"""Images built once per revision, kept beside the tools: ``<cache>/images/<key>/``.

``<key>`` is the commit, or ``<commit>-dirty-<content hash>`` for an edited working tree.
A build is reused while the recipe that made it is unchanged (its fingerprint covers this
package's sources and the Debian mirror). Builders of one key (test workers, two checkouts)
take turns on a lock file beside it, so the second finds the first's build instead of
building it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping

from cdsim import tools
from cdsim.image import debian, errors, recipe, source, wheels

KEEP_DIRTY = 3
"""Working-tree builds kept (newest first); commits' builds stay until removed by hand."""
_PACKAGE = pathlib.Path(__file__).parent


def recipe_fingerprint(mirror: debian.Mirror) -> str:
    """Hex digest of this package's sources and the mirror: what else decides the bytes."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.glob("*.py")):
        if path.name == "workload.py":  # the workload image's recipe, not the product's
            continue
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(repr(mirror).encode())
    return digest.hexdigest()


@contextlib.contextmanager
def turn(root: pathlib.Path, key: str) -> Iterator[None]:
    """Hold ``root``'s lock of ``key`` (released when the process dies, too).

    Builders of one key take turns, so the second finds the first's work done.
    """
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{key}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclasses.dataclass
class ImageCache:
    """Finds or builds the image of a revision."""

    root: pathlib.Path
    repo: pathlib.Path
    mirror: debian.Mirror
    log: Callable[[str], None]

    @classmethod
    def from_env(cls, repo: pathlib.Path, env: Mapping[str, str] | None = None) -> ImageCache:
        """The cache under the tools' cache folder; the mirror from the environment."""
        env = dict(os.environ if env is None else env)
        return cls(
            root=tools.cache_root(env) / "images",
            repo=repo,
            mirror=debian.Mirror.from_env(env),
            log=_stderr,
        )

    def lookup(self, src: source.Source) -> recipe.Build | None:
        """The cached build of ``src``, if one by the current recipe exists."""
        directory = self.root / src.key
        if not (directory / "build.json").exists():
            return None
        build = recipe.Build.load(directory)
        return build if build.recipe == recipe_fingerprint(self.mirror) else None

    def ensure(
        self, rev: str | None = None, *, waived: tuple[str, ...] = ()
    ) -> tuple[recipe.Build, bool]:
        """The build of ``rev`` (None: HEAD or the working tree), and whether it was reused.

        ``waived``: see :attr:`recipe.Recipe.waived` (for a named release's commit only).
        """
        src = source.resolve(self.repo, rev)
        with turn(self.root, src.key):
            found = self.lookup(src)
            if found is not None:
                return found, True
            return self.build(src, waived=waived), False

    def build(
        self, src: source.Source, *, out: pathlib.Path | None = None, waived: tuple[str, ...] = ()
    ) -> recipe.Build:
        """Build ``src`` into the cache (or into ``out``, bypassing the cache)."""
        started = time.monotonic()
        if out is not None and out.exists():
            raise errors.ImageError(f"{out} exists: --out takes a folder that does not exist yet")
        final = out or self.root / src.key
        staging = final.with_name(f".{final.name}.{os.getpid()}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        cook = recipe.Recipe(
            mirror=self.mirror,
            recipe=recipe_fingerprint(self.mirror),
            fallback_lock=self.repo / wheels.LOCK,
            log=self.log,
            waived=waived,
        )
        with tempfile.TemporaryDirectory(prefix="cd-image-") as work:
            try:
                cook.build(src, out=staging, work=pathlib.Path(work))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        try:
            staging.rename(final)
        except OSError:  # an older recipe's build of the key (in the cache only: checked above)
            shutil.rmtree(final, ignore_errors=True)
            staging.rename(final)
        self.log(f"[image] {src.version} built in {time.monotonic() - started:.0f}s: {final}")
        if src.dirty and out is None:
            self._forget_old_dirty()
        return recipe.Build.load(final)

    def _forget_old_dirty(self) -> None:
        dirty = sorted(
            (p for p in self.root.glob("*-dirty-*") if p.is_dir()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in dirty[KEEP_DIRTY:]:
            shutil.rmtree(old, ignore_errors=True)
