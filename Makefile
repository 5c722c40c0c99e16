# Each target creates .venv and installs the project into it, so a fresh machine with only
# Python 3.11 and the package registries can run it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test lint demo docs bench bench-peers clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,dask]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto

# ruff (configured in pyproject.toml): the lint rules, and the format checked, not applied
# (`.venv/bin/ruff format .` applies it)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# the documentation site (MkDocs) into site/; --strict: a warning fails the build
docs: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[docs]'
	$(BIN)/mkdocs build --strict --site-dir site

# bench-peers also times primc's kernels compiled for an AVX2 CPU (PRIMC_CPU) on x86
PEER_CPUS ?= $(shell [ "$$(uname -m)" = x86_64 ] && echo haswell)

bench: $(STAMP)
	$(BIN)/python benchmarks/suite.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/w8_train.py --compare
	$(BIN)/python benchmarks/w9_dask.py
	$(BIN)/python benchmarks/w10_busy.py
	$(BIN)/python benchmarks/w11_first.py
	$(BIN)/python benchmarks/numpy_calls.py
	$(BIN)/python benchmarks/w12_length.py
	$(BIN)/python benchmarks/w14_cnn.py
	$(BIN)/python benchmarks/kernel_compile.py

# torch pinned to the CPU build that machines of this project's kind keep on disk (a
# newer or unpinned torch from the index is a CUDA build of several GB)
bench-peers: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check jax jaxlib autograd matplotlib torch==2.13.0
	$(BIN)/python benchmarks/suite.py --cpus $(PEER_CPUS) $(BENCH_ARGS)
	$(BIN)/python benchmarks/w8_train.py --compare
	$(BIN)/python benchmarks/w10_busy.py
	$(BIN)/python benchmarks/w11_first.py
	$(BIN)/python benchmarks/w12_length.py
	$(BIN)/python benchmarks/w13_autograd.py $(if $(AUTOGRAD_EXAMPLES),--examples $(AUTOGRAD_EXAMPLES))
	$(BIN)/python benchmarks/w14_cnn.py
	$(BIN)/python benchmarks/check_torch.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache
