"""Bridges from goose's drafting code to other inference engines."""
