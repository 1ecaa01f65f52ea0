"""`goose bench` (not built yet)."""

from .main import app


@app.command()
def bench() -> None:
    """Not built yet."""
    raise SystemExit("goose bench is not built yet.")
