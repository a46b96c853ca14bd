"""migplan: right-size every GPU in a fleet with MIG."""

__version__ = "0.1.0"
