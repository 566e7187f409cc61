"""profanalyzer: where did the TPU7x step go, and which tuning lever to pull next."""

from profanalyzer.version import __version__

__all__ = ["__version__", "load"]


def __getattr__(name: str):
    """`profanalyzer.load` (the notebook API, profanalyzer.notebook), imported
    on first use: `import profanalyzer` stays light for the command line."""
    if name == "load":
        from profanalyzer.notebook import load

        return load
    raise AttributeError(f"module 'profanalyzer' has no attribute {name!r}")
