"""goose's engine. Importing it before torch sets goose's OpenMP start-up settings (drafting.openmp: a bounded
spin that keeps the speed alone and shares the cores with other processes); imported after torch, or with any
OpenMP wait or thread variable set by the user, or with ``GOOSE_OPENMP=keep``, it changes nothing."""

from .openmp import apply_startup_settings

apply_startup_settings()
