"""The `goose` command line. Importing it sets goose's OpenMP start-up settings before torch loads (see
drafting.machine.openmp; a setting the user made is never overridden)."""

from drafting.machine.openmp import apply_startup_settings

apply_startup_settings()
