"""The `goose` command line: Typer commands, argument checks and rich output; no algorithm lives here."""
