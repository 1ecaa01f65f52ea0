"""`goose viz` (not built yet)."""

from .main import app


@app.command()
def viz() -> None:
    """Not built yet."""
    raise SystemExit("goose viz is not built yet.")
