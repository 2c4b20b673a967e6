"""``python -m parley``: the command line."""

from parley.cli import app

app()
