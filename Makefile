# The two commands: `make quickstart` and `make test`. Both bootstrap .venv and the system libraries.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
QUICKSTART_DIR ?= runs/quickstart
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl

.PHONY: install system-deps quickstart test test-all clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch first and pinned: its CPU wheel is on local disk here; an unpinned torch would pull a CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[sim,graph,vla,dev]"
	# robomimic's reader for the HDF5 compatibility test; --no-deps: its declared torchvision would pull a CUDA
	# torch, and SequenceDataset needs only torch, h5py, tqdm and termcolor, all already here
	$(PY) -m pip install -q --no-deps "robomimic==0.3.0"
	touch $(STAMP)

system-deps:
	@bash scripts/install_system_deps.sh

install: system-deps $(STAMP)

quickstart: install
	$(VENV)/bin/r2a demos collect --task Lift --episodes 10 --workers 2 --image-size 84 --out $(QUICKSTART_DIR)/lift.hdf5
	$(VENV)/bin/r2a demos info $(QUICKSTART_DIR)/lift.hdf5
	$(VENV)/bin/r2a graph build $(QUICKSTART_DIR)/lift.hdf5 --out $(QUICKSTART_DIR)/lift_graph
	$(VENV)/bin/r2a graph info $(QUICKSTART_DIR)/lift_graph
	$(VENV)/bin/r2a bench run --config configs/bench/clean.yaml --set 'tasks=[Lift]' --set episodes=4 \
		--policy builtin --policy r2a --out $(QUICKSTART_DIR)/builtin_r2a_clean --workers 2

test: install
	$(PY) -m pytest -q -m "not slow"

test-all: install
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
