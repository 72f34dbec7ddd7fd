# The two set-up commands of the README:
#   make book   builds the book into _build/html, executing every notebook
#   make test   runs every test: unit tests, checker tests, and every notebook under nbval
# Both create the virtual environment .venv from requirements.txt on first use.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: book test benchmark clean

$(BIN)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

book: $(BIN)/.installed
	$(BIN)/jupyter-book build . -W -n --keep-going

test: $(BIN)/.installed
	$(BIN)/python -m pytest

clean:
	rm -rf _build
