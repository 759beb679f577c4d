"""Images built once per revision, kept beside the tools: ``<cache>/images/<key>/``.

``<key>`` is the commit, or ``<commit>-dirty-<content hash>`` for an edited working tree.
A build is reused while the recipe that made it is unchanged (its fingerprint covers this
package's sources and the Debian mirror); builders racing each other (test workers) each build
into a folder of their own and the first rename wins.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping

from cdsim import tools
from cdsim.image import debian, recipe, source, wheels

KEEP_DIRTY = 3
"""Working-tree builds kept (newest first); commits' builds stay until removed by hand."""
_PACKAGE = pathlib.Path(__file__).parent


def recipe_fingerprint(mirror: debian.Mirror) -> str:
    """Hex digest of this package's sources and the mirror: what else decides the bytes."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(repr(mirror).encode())
    return digest.hexdigest()


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

    def ensure(self, rev: str | None = None) -> tuple[recipe.Build, bool]:
        """The build of ``rev`` (None: HEAD or the working tree), and whether it was reused."""
        src = source.resolve(self.repo, rev)
        found = self.lookup(src)
        if found is not None:
            return found, True
        return self.build(src), False

    def build(self, src: source.Source, *, out: pathlib.Path | None = None) -> recipe.Build:
        """Build ``src`` into the cache (or into ``out``, bypassing the cache)."""
        started = time.monotonic()
        final = out or self.root / src.key
        staging = final.with_name(f".{final.name}.{os.getpid()}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        cook = recipe.Recipe(
            mirror=self.mirror,
            recipe=recipe_fingerprint(self.mirror),
            fallback_lock=self.repo / wheels.LOCK,
            log=self.log,
        )
        with tempfile.TemporaryDirectory(prefix="cd-image-") as work:
            try:
                cook.build(src, out=staging, work=pathlib.Path(work))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        try:
            staging.rename(final)
        except OSError:  # another builder was first (keep its build), or an older recipe's
            if out is None and self.lookup(src) is not None:
                shutil.rmtree(staging, ignore_errors=True)
            else:
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
