"""`goose chat` (not built yet)."""

from .main import app


@app.command()
def chat() -> None:
    """Not built yet."""
    raise SystemExit("goose chat is not built yet.")
