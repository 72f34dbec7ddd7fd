# `make help` lists every target with one line each: the `## ` comment on the target's line.
# The README's two set-up commands are `make book` (the book, executing every notebook) and
# `make test` (every test); both create the virtual environment .venv from requirements.txt on
# first use, as does every target that runs the venv's Python.
# PYTHON: the interpreter that creates .venv (Python 3.11 or newer). The first of python3.11,
# python3.12, python3 and python on the PATH unless given: `make book PYTHON=/path/to/python`.
PYTHON ?= $(firstword $(foreach name,python3.11 python3.12 python3 python,$(shell command -v $(name) 2>/dev/null)))
VENV ?= .venv
# A venv keeps its programs in bin/, or in Scripts/ on Windows.
ifeq ($(OS),Windows_NT)
BIN := $(VENV)/Scripts
else
BIN := $(VENV)/bin
endif
help:  ## lists the targets, one line each (this list)
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z0-9_-]+:[^#]*## / {printf "  make %-25s %s\n", $$1, $$2}' \
		$(MAKEFILE_LIST)

# The built book: rebuilt when a chapter, the configuration, the package or the environment changed.
BOOK := _build/html/index.html
BOOK_SOURCES := _config.yml _toc.yml tools/execute_book.py tools/book_fixes.py tools/zh_edition.py \
	tools/exercise_index.py \
	$(wildcard tools/book_templates/*) \
	$(shell find book attncourse -type f -not -path '*/.*' -not -path '*/__pycache__/*' 2>/dev/null)

.PHONY: help book test test-fast book-loaded lock lint colab clean mutation-checkers \
	mutation-package mutation-package-sample compile-matrix gpu-check assignments
# Plain `make` lists the targets rather than building anything.
.DEFAULT_GOAL := help
# A recipe that fails removes its target: a failed book build leaves no index.html behind.
.DELETE_ON_ERROR:

# The readers' environment from the lock. Bytecode is written by compileall on every core, not by
# pip one file after another (the install took 43 s here, 20 s + 14 s this way, the same 10,196
# files), and for the package, installed editable, and the tools too: once, where
# PYTHONDONTWRITEBYTECODE is set (this project's machines, many containers) and each notebook
# kernel, grading and test process would compile them again. Left out: the packages' own test
# suites, which nothing here imports (2,649 files with the instructor extra: 19 s became 14 s
# here), and one file of torch's in Python 3.12 syntax, which pip skips too.
$(BIN)/.installed: requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "no python3.11, python3.12, python3 or python on the PATH: make ... PYTHON=/path/to/python"; exit 1; }
	"$(PYTHON)" -c "import sys; assert sys.version_info >= (3, 11), f'$(PYTHON) is Python {sys.version.split()[0]}; \
	the book needs 3.11 or newer: make ... PYTHON=/path/to/python3.11'"
	"$(PYTHON)" -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -r requirements.txt
	$(BIN)/python -m compileall -q -j 0 -x 'py312_intrinsics|site-packages/.*/tests/' $(VENV) attncourse tools
	touch $@

# Two editions, one execution: every chapter executes once, afresh, by jupyter-cache's parallel
# executor (a failing cell or assert fails the build), one chapter per core, into the emptied
# execution cache (tools/execute_book.py; why not under nbval: docs/decisions/0006),
# with ATTNCOURSE_EXTRA_LANGUAGES=zh (check(), hint() and solution() also render their output in
# Chinese). The English build takes its outputs from that cache; the Chinese sources are generated
# from the executed notebooks and the catalogues of book/locale (tools/zh_edition.py) and built
# without executing anything, into _build/html/zh. The two builds run side by side, one per
# core, each into its own log, shown once both have finished.
$(BOOK): $(BIN)/.installed $(BOOK_SOURCES)
	rm -rf _build/html _build/zh _build/.jupyter_cache _build/executed  # nothing left over from an earlier build
	ATTNCOURSE_EXTRA_LANGUAGES=zh $(BIN)/python tools/execute_book.py
	$(BIN)/python tools/zh_edition.py sources _build/zh/src --executed _build/executed
	ATTNCOURSE_EXTRA_LANGUAGES=zh $(BIN)/jupyter-book build . -W -n --keep-going \
		> _build/zh/build-en.log 2>&1 & en=$$!; \
	$(BIN)/jupyter-book build _build/zh/src -W -n --keep-going > _build/zh/build-zh.log 2>&1; \
	zh=$$?; wait $$en; en=$$?; cat _build/zh/build-en.log _build/zh/build-zh.log; \
	echo "English build: exit $$en; Chinese build: exit $$zh"; test $$en = 0 && test $$zh = 0
	cp -R _build/zh/src/_build/html _build/html/zh
	touch $@

book: $(BOOK)  ## builds both editions into _build/html, executing every notebook once

# The instructor extra: otter-grader, locked in requirements-instructor.txt against requirements.txt
# (so it moves nothing the readers install), added to the environment for the assignments and
# their test.
$(BIN)/.instructor: $(BIN)/.installed requirements-instructor.txt
	$(BIN)/python -m pip install --quiet -r requirements-instructor.txt
	touch $@

# The instructor edition (tools/assignments.py): every chapter as an otter-grader assignment, in
# English and Chinese, under _build/assignments/<lang>/<chapter>/ (master notebook, student notebook,
# the autograder zip, one per chapter for both languages), and the two downloads the instructors'
# page links, _build/html/assignments/attncourse-assignments-<lang>.zip (so after the book, whose
# build empties _build/html). tests/test_assignments.py grades two submissions of each chapter
# (three of chapters 1 and 10). The notebooks pin the commit they are built from: a new commit
# (the branch's ref in .git) builds them again.
ASSIGNMENTS := _build/assignments/.built
$(ASSIGNMENTS): $(BIN)/.instructor $(BOOK) tools/assignments.py tools/assignment_answers.py \
		tools/assignments.yml tools/colab_edition.py $(wildcard .git/HEAD .git/refs/heads/*)
	rm -rf _build/assignments _build/html/assignments
	$(BIN)/python tools/assignments.py --site _build/html/assignments
	touch $@

assignments: $(ASSIGNMENTS)  ## the instructor edition: every chapter as an otter-grader assignment (both languages), and the site's downloads

# ruff, configured in pyproject.toml (book/ruff.toml: the chapters at 80 characters a line):
# the lint rules, and the formatting checked, not applied (ruff format . applies it).
lint: $(BIN)/.installed  ## ruff: the lint rules, and the formatting checked (ruff format . applies it)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The Colab edition: notebooks/ regenerated from book/, and notebooks/zh from book/ and its
# Chinese catalogues (tests/test_colab_edition.py and tests/test_zh_edition.py check both).
colab: $(BIN)/.installed  ## regenerates the Colab editions, notebooks/ and notebooks/zh/, from book/
	$(BIN)/python tools/colab_edition.py
	$(BIN)/python tools/colab_edition.py --lang zh

# On two workers (pytest-xdist): each test module stays on one worker (--dist loadscope), the
# longest first (tests/conftest.py's order; --no-loadscope-reorder keeps it, where xdist would
# start the modules with the most tests first and leave the gradings, the browser and the
# Colab-like runtime, a few long tests each, to the end), one torch thread per worker; the 15
# slowest steps are printed at the end, where the run's time goes. The notebooks ran, each cell
# asserting what it teaches, in the book build this depends on (rebuilt when a chapter, the
# package or the environment changed): `pytest` alone runs tests/ and book/ (under nbval) both.
test: $(BIN)/.installed $(BIN)/.instructor $(BOOK) $(ASSIGNMENTS)  ## every test: unit, checkers, the browser test of the book and the graded assignments (both built first if stale)
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder --durations=15 tests

# The unit tests without the notebooks, the browser tests and the fresh Colab-like environment
# (marker `slow`): what the macOS and Windows jobs of the workflow run. A few minutes.
test-fast: $(BIN)/.installed  ## the tests not marked slow: no notebooks, browser or fresh Colab-like runtime
	$(BIN)/python -m pytest tests -m "not slow"

# Every notebook of book/, one at a time, while two busy processes hold the cores: each must
# finish within 150 s (tools/loaded_run.py; the weekly run of the workflow runs it).
book-loaded: $(BIN)/.installed  ## every notebook while two busy processes hold the cores, each within 150 s
	$(BIN)/python tools/loaded_run.py --budget 150 --busy 2

# requirements.txt, the lock, rewritten from requirements.in (tools/lock_requirements.py).
lock: $(BIN)/.installed  ## rewrites the lock, requirements.txt, from requirements.in
	$(BIN)/python tools/lock_requirements.py

# every mutant of every exercise's solution through its checker: a table of kill rates per exercise
mutation-checkers: $(BIN)/.installed  ## mutation testing of the exercise checkers (the tests run it too)
	$(BIN)/python tools/mutate_checkers.py

# Mutation testing of the package (tools/mutate_package.py): every mutant of attention, masks,
# multihead, efficient, adaptive_span and all_attention against that module's unit tests.
# The whole run takes tens of minutes on 2 cores: the workflow runs it weekly (job mutation of
# .github/workflows/book.yml; why this tool and not mutmut: docs/decisions/0007); CI's push runs
# take the fixed sample below.
mutation-package: $(BIN)/.installed  ## mutation testing of the package: every mutant of six modules (tens of minutes)
	$(BIN)/python tools/mutate_package.py --report reports/mutation-package.json --min-rate 0.9

mutation-package-sample: $(BIN)/.installed  ## mutation testing of the package: 3 mutants per module, as CI runs it
	$(BIN)/python tools/mutate_package.py --sample 3 --seed 0 --min-rate 0.6

# Chapter 10's kernels compiled for sm_75, sm_80, sm_86, sm_89 and sm_90 without a GPU, every
# variant, dtype and head size the launcher takes (tools/kernel_compile), on both cores at
# nice 10: shared memory, registers, spills and tensor-core instructions, written into the package
# for the chapter's table. Compiles are cached (~/.cache/attncourse/compile), so a rerun after a
# kernel change compiles only what changed. CI checks every request's kernels against the
# committed fingerprints without compiling (--check) and compiles a sample of five requests
# (tests/test_compile_matrix.py).
compile-matrix: $(BIN)/.installed  ## chapter 10's kernels compiled for five GPU architectures (no GPU needed)
	env -u TRITON_INTERPRET $(BIN)/python tools/kernel_compile --workers 2 --nice 10 \
		--out attncourse/results/ch10_compile_matrix.json

# On a machine with a CUDA GPU (tools/gpu_check.py): the kernel tests on CUDA, a sweep against
# float64 references, chapter 10 executed cell by cell and compute-sanitizer's memcheck, then the
# kernels timed beside torch's SDPA backends and FlexAttention, adaptive span's speed-up and the
# launch-configuration questions; writes reports/gpu/<gpu>.json and .md (reports/gpu/README.md).
# It runs the machine's own Python with its own torch and triton (GPU_PYTHON), never the .venv,
# and installs nothing; it refuses without a GPU. GPU_CHECK_ARGS=--quick: a 2-minute run.
GPU_PYTHON ?= python3
GPU_CHECK_ARGS ?=
gpu-check:  ## on a CUDA machine: chapter 10's kernels checked and timed (GPU_PYTHON; no .venv)
	PYTHONPATH=. $(GPU_PYTHON) tools/gpu_check.py $(GPU_CHECK_ARGS)

clean:  ## removes _build, so that the next make book builds afresh
	rm -rf _build
