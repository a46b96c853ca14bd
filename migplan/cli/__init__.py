"""The `migplan` command line (typer). Each command group lives in its own module."""
