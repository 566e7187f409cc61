"""The version of profanalyzer (`profanalyzer.__version__`), in a leaf module:
the stages import it from here, so the package's own `__init__` (which offers
`profanalyzer.load`, the notebook API at the top) is imported by none of them."""

__version__ = "0.1.0"
