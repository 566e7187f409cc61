"""profanalyzer: where did the TPU7x step go, and which tuning lever to pull next."""

__version__ = "0.1.0"
