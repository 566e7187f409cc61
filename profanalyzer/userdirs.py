"""Where profanalyzer keeps what it may rebuild at any time (caches): the
user cache dir, never next to the inputs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$PROFANALYZER_CACHE_DIR``, else ``$XDG_CACHE_HOME/profanalyzer``, else ``~/.cache/profanalyzer``."""
    env = os.environ.get("PROFANALYZER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "profanalyzer"
