"""The engine: the decode loop, one forward over a draft tree, its masks and KV cache, acceptance and sampling.

Imports nothing above it in goose (docs/architecture.md)."""
