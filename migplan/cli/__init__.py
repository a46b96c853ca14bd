"""The `migplan` command line (typer): parse options, call `migplan.commands`, render the result.

Each command group lives in its own module; `options.py` holds the options every command shares
(and the fleet options, declared once), `render.py` the table/JSON/YAML output and the one place
errors become messages and exit codes.

May import: everything in migplan. Nothing else imports this package.
"""
