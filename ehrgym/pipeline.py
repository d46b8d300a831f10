"""``make reproduce``: the whole kit end to end, through the papermill-parameterised notebooks.

::

    python -m ehrgym.pipeline --source synthetic --patients 1000 --seed 0 --config paper --k 4 \\
        --workers 2 --data data

executes ``notebooks/00_build_database`` → ``01_build_benchmark`` → ``02_run_evaluation`` →
``03_robustness_analysis`` with papermill (kernel ``python3`` run by this interpreter), then the
teaching notebooks ``04_explore_noise`` and ``07_exercises`` on the same database and benchmark;
saves the executed notebooks under ``DATA/notebooks/`` and regenerates ``figures/`` and ``tables/``.

Redoing it is cheap: the notebooks call :func:`ensure_database` and :func:`ensure_benchmark`,
which reuse a database / benchmark that already exists with matching parameters, and the
evaluation runner resumes run directories episode by episode. ``--force`` rebuilds.

The baselines are evaluated on the benchmark's held-out ``test`` split by default (``--split all``
evaluates every task; the dataset statistics always describe the whole benchmark).

Sources are small registered objects (:data:`SOURCES`): ``synthetic`` (the embedded generator,
default), ``demo`` (the open MIMIC-IV demo; ``--mimic-dir`` defaults to
``../shared/mimic-iv-demo-2.2``) and ``mimic`` (the credentialed release; ``--mimic-dir`` is
required). Baselines: ``oracle``, ``credulous``, ``literal`` and ``skeptic``; the ``chat`` agent joins when a
model endpoint is configured (``--model``/``--base-url`` or ``EHRGYM_MODEL``/``OPENAI_BASE_URL``).
"""

from __future__ import annotations

import abc
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ehrgym.errors import DatabaseError, EhrGymError, LoaderError
from ehrgym.registry import Registry

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
DEFAULT_PATIENTS = 1000          # `make reproduce` default (see the module docstring of benchmarks)
DEFAULT_DEMO_DIR = REPO_ROOT.parent / "shared" / "mimic-iv-demo-2.2"
BASELINES: tuple[str, ...] = ("oracle", "credulous", "literal", "skeptic")
# the baselines are evaluated on the held-out test split (the train split is for SFT/RL); the dataset
# statistics always cover the whole benchmark. `--split all` evaluates every task.
DEFAULT_SPLIT = "test"
MODEL_AGENTS: tuple[str, ...] = ("chat", "hf")   # agents whose runs are named after their model
KERNEL_NAME = "python3"
RESULT_STORE = ".results"  # under the runs directory: query results the baselines' runs share (out of `<runs>/*`)

# the notebooks the pipeline executes, in order: the stages, then the teaching notebooks (the noise
# explorer and the exercises), executed on the same database and benchmark so a shared executed copy
# shows this build's pairs
PIPELINE_NOTEBOOKS: tuple[str, ...] = ("00_build_database", "01_build_benchmark", "02_run_evaluation",
                                       "03_robustness_analysis")
EXPLORE_NOTEBOOK = "04_explore_noise"
EXERCISE_NOTEBOOK = "07_exercises"
TEACHING_NOTEBOOKS: tuple[str, ...] = (EXPLORE_NOTEBOOK, EXERCISE_NOTEBOOK)
ALL_NOTEBOOKS: tuple[str, ...] = PIPELINE_NOTEBOOKS + TEACHING_NOTEBOOKS


class PipelineError(EhrGymError):
    """The reproduction pipeline cannot run as asked (bad source, missing data, failed notebook)."""


# =============================================================================================
# data sources
# =============================================================================================
@dataclass(frozen=True)
class DataSource(abc.ABC):
    """How one kind of database is named, built, and recognised for reuse."""

    name: str
    description: str

    @abc.abstractmethod
    def db_filename(self, patients: int, seed: int) -> str:
        """The database file name under DATA/."""

    def resolve_dir(self, mimic_dir: str | Path | None) -> Path | None:
        """The source directory this source reads (None for generated sources)."""
        return None

    @abc.abstractmethod
    def build(self, out: Path, *, patients: int, seed: int, mimic_dir: Path | None, progress: bool,
              overwrite: bool) -> dict[str, Any]:
        """Write the database to ``out``; returns its bookkeeping record."""

    @abc.abstractmethod
    def mismatch(self, meta: dict[str, Any], *, patients: int, seed: int, mimic_dir: Path | None) -> str | None:
        """Why an existing database with bookkeeping ``meta`` cannot be reused (None: it can)."""


# other packages add sources through the entry-point group "ehrgym.data_sources"
SOURCES: Registry[DataSource] = Registry("data source", error=PipelineError)


def register_source(source: DataSource) -> DataSource:
    return SOURCES.add(source.name, source)


def get_source(name: str) -> DataSource:
    return SOURCES.get(name)


@dataclass(frozen=True)
class SyntheticSource(DataSource):
    def db_filename(self, patients: int, seed: int) -> str:
        return f"synthetic-p{patients}-s{seed}.duckdb"

    def build(self, out: Path, *, patients: int, seed: int, mimic_dir: Path | None, progress: bool,
              overwrite: bool) -> dict[str, Any]:
        from ehrgym.db.synth import build_synthetic_database

        return build_synthetic_database(out, patients=patients, seed=seed, progress=progress, overwrite=overwrite)

    def mismatch(self, meta: dict[str, Any], *, patients: int, seed: int, mimic_dir: Path | None) -> str | None:
        from ehrgym.db.synth import RELEASE

        want = {"source": "synthetic", "patients": patients, "seed": seed, "release": RELEASE}
        diff = {k: meta.get(k) for k, v in want.items() if meta.get(k) != v}
        return None if not diff else f"it was built with {diff}, not {({k: want[k] for k in diff})}"


@dataclass(frozen=True)
class MimicSource(DataSource):
    demo: bool = False
    default_dir: Path | None = None

    def db_filename(self, patients: int, seed: int) -> str:
        return "mimic-iv-demo.duckdb" if self.demo else "mimic-iv.duckdb"

    def resolve_dir(self, mimic_dir: str | Path | None) -> Path:
        from ehrgym.db.mimic_layout import DOWNLOAD_HINT

        raw = mimic_dir if mimic_dir not in (None, "") else self.default_dir
        if raw is None:
            raise PipelineError(f"--source {self.name} needs MIMIC_DIR (make reproduce SOURCE={self.name} "
                                f"MIMIC_DIR=/path/to/mimic-iv); {DOWNLOAD_HINT}")
        from ehrgym.db.mimic_layout import scan_source

        path = Path(raw).expanduser()
        if not path.is_dir():
            raise PipelineError(f"MIMIC_DIR {path} is not a directory; {DOWNLOAD_HINT}")
        try:
            layout = scan_source(path)
        except LoaderError as exc:
            raise PipelineError(f"--source {self.name}: {exc}") from exc
        if layout.is_demo and not self.demo:
            raise PipelineError(f"MIMIC_DIR {path} holds the MIMIC-IV demo, but SOURCE=mimic asks for the full "
                                f"credentialed release; pass SOURCE=demo for the demo, or MIMIC_DIR=/path/to/"
                                f"mimic-iv (the directory with hosp/ and icu/ from PhysioNet)")
        return path.resolve()

    def build(self, out: Path, *, patients: int, seed: int, mimic_dir: Path | None, progress: bool,
              overwrite: bool) -> dict[str, Any]:
        from ehrgym.db.mimic import load_mimic

        return load_mimic(self.resolve_dir(mimic_dir), out, progress=progress, overwrite=overwrite)

    def mismatch(self, meta: dict[str, Any], *, patients: int, seed: int, mimic_dir: Path | None) -> str | None:
        root = self.resolve_dir(mimic_dir)
        have = meta.get("source_dir")
        if have is None or Path(have) != root:
            return f"it was loaded from {have}, not {root}"
        is_demo = str(meta.get("source", "")).endswith("demo")
        if is_demo != self.demo:
            return f"it holds {meta.get('source')}, not {'the demo' if self.demo else 'the full release'}"
        return None


register_source(SyntheticSource("synthetic", "the embedded synthetic hospital (deterministic from the seed)"))
register_source(MimicSource("demo", "the open MIMIC-IV demo (100 patients, ODbL)", demo=True,
                            default_dir=DEFAULT_DEMO_DIR))
register_source(MimicSource("mimic", "the credentialed MIMIC-IV release from PhysioNet", demo=False))


# =============================================================================================
# configuration and paths
# =============================================================================================
def endpoint_from_env(model: str | None = None, base_url: str | None = None) -> dict[str, str]:
    """The chat agent's endpoint from flags, else ``EHRGYM_MODEL`` / ``OPENAI_BASE_URL`` (empty: none)."""
    model = model or os.environ.get("EHRGYM_MODEL") or None
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    out: dict[str, str] = {}
    if model:
        out["model"] = model
    if base_url:
        out["base_url"] = base_url
    return out


@dataclass(frozen=True)
class PipelineConfig:
    """Everything ``make reproduce`` varies. Paths are resolved against the current directory."""

    source: str = "synthetic"
    patients: int = DEFAULT_PATIENTS
    seed: int = 0
    config: str = "paper"
    k: int = 4
    workers: int = 2
    mimic_dir: str | None = None
    data: str = "data"
    tables: str = ""   # "" → results_dir("tables", source)
    figures: str = ""  # "" → results_dir("figures", source)
    agents: tuple[str, ...] = BASELINES
    model: str | None = None
    base_url: str | None = None
    split: str | None = DEFAULT_SPLIT
    limit_pairs: int | None = None
    n_boot: int = 1000
    force: bool = False
    progress: bool = True
    notebooks: str = str(NOTEBOOK_DIR)

    def __post_init__(self) -> None:
        get_source(self.source)
        for kind in ("tables", "figures"):
            if not getattr(self, kind):
                object.__setattr__(self, kind, str(results_dir(kind, self.source)))
        if self.patients < 1:
            raise PipelineError(f"--patients must be at least 1 (got {self.patients})")
        if self.k < 1:
            raise PipelineError(f"--k must be at least 1 (got {self.k})")
        if self.workers < 1:
            raise PipelineError(f"--workers must be at least 1 (got {self.workers})")
        from ehrgym.vocab import SPLITS

        if self.split is not None and self.split not in SPLITS:
            raise PipelineError(f"--split must be one of {SPLITS} or all (got {self.split!r})")

    # -- derived ---------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return Path(self.data).resolve()

    @property
    def db_path(self) -> Path:
        return database_path(self.source, self.patients, self.seed, self.data_dir)

    @property
    def bench_dir(self) -> Path:
        return benchmark_path(self.db_path, self.config, self.seed)

    @property
    def runs_dir(self) -> Path:
        return runs_path(self.bench_dir)

    @property
    def executed_dir(self) -> Path:
        return self.data_dir / "notebooks"

    @property
    def endpoint(self) -> dict[str, str]:
        return endpoint_from_env(self.model, self.base_url)

    @property
    def agent_list(self) -> list[str]:
        """The baselines, plus ``chat`` when an endpoint is configured (and not already listed)."""
        agents = list(dict.fromkeys(self.agents))
        if self.endpoint.get("model") and "chat" not in agents:
            agents.append("chat")
        return agents

    def notebook_parameters(self) -> dict[str, dict[str, Any]]:
        """The papermill parameters of each pipeline notebook."""
        src = get_source(self.source)
        mimic_dir = self.mimic_dir
        if mimic_dir in (None, "") and isinstance(src, MimicSource) and src.default_dir is not None:
            mimic_dir = str(src.default_dir)
        return {
            "00_build_database": {"source": self.source, "patients": self.patients, "seed": self.seed,
                                  "mimic_dir": str(Path(mimic_dir).resolve()) if mimic_dir else None,
                                  "db_path": str(self.db_path), "force": self.force, "progress": self.progress},
            "01_build_benchmark": {"db_path": str(self.db_path), "bench_dir": str(self.bench_dir),
                                   "config": self.config, "seed": self.seed, "force": self.force,
                                   "progress": self.progress},
            "02_run_evaluation": {"db_path": str(self.db_path), "bench_dir": str(self.bench_dir),
                                  "runs_dir": str(self.runs_dir), "agents": self.agent_list, "k": self.k,
                                  "workers": self.workers, "seed": self.seed, "split": self.split,
                                  "limit_pairs": self.limit_pairs,
                                  "model": self.endpoint.get("model"), "base_url": self.endpoint.get("base_url"),
                                  "progress": self.progress},
            "03_robustness_analysis": {"bench_dir": str(self.bench_dir),
                                       "run_dirs": [str(self.runs_dir / run_name(a, self.endpoint.get("model")))
                                                    for a in self.agent_list],
                                       "tables_out": str(Path(self.tables).resolve()),
                                       "figures_out": str(Path(self.figures).resolve()),
                                       "n_boot": self.n_boot, "seed": self.seed},
            EXPLORE_NOTEBOOK: {"db_path": str(self.db_path), "bench_dir": str(self.bench_dir)},
            EXERCISE_NOTEBOOK: {"db_path": str(self.db_path), "bench_dir": str(self.bench_dir), "seed": self.seed},
        }


def results_dir(kind: str, source: str) -> Path:
    """Where ``make reproduce`` writes tables/figures: the committed synthetic set at the top level,
    other sources beside it (``tables/demo/``), so a demo or MIMIC run never overwrites it."""
    root = REPO_ROOT / kind
    return root if source == "synthetic" else root / source


def database_path(source: str, patients: int, seed: int, data: str | Path = "data") -> Path:
    """Where the pipeline keeps the database of (source, patients, seed): ``DATA/<name>.duckdb``."""
    return Path(data).resolve() / get_source(source).db_filename(patients, seed)


def benchmark_path(db_path: str | Path, config: str, seed: int) -> Path:
    """``DATA/bench/<db>-<config>-s<seed>`` next to the database ``DATA/<db>.duckdb``."""
    db_path = Path(db_path).resolve()
    return db_path.parent / "bench" / f"{db_path.stem}-{config}-s{seed}"


def runs_path(bench_dir: str | Path) -> Path:
    """``DATA/runs/<benchmark name>``: one run directory per agent below it."""
    bench_dir = Path(bench_dir).resolve()
    return bench_dir.parent.parent / "runs" / bench_dir.name


def run_dirs(runs_dir: str | Path, agents: Sequence[str], model: str | None = None) -> list[Path]:
    return [Path(runs_dir) / run_name(a, model) for a in agents]


def run_name(agent: str, model: str | None = None) -> str:
    """Run directory name of an agent (the model joins for model-backed agents)."""
    if model and agent in MODEL_AGENTS:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
        return f"{agent}-{safe}"
    return agent


# =============================================================================================
# stages the notebooks call (reusable, resumable)
# =============================================================================================
@dataclass
class StageResult:
    """What a stage produced and whether it was built now or reused."""

    path: Path
    built: bool
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def ensure_database(source: str, db_path: str | Path, *, patients: int = DEFAULT_PATIENTS, seed: int = 0,
                    mimic_dir: str | Path | None = None, force: bool = False,
                    progress: bool = True) -> StageResult:
    """Build (or reuse) the database: an existing ``db_path`` is reused when its bookkeeping
    matches ``source``/``patients``/``seed``/``mimic_dir``; otherwise (or with ``force``) it is rebuilt."""
    import duckdb

    from ehrgym.db.info import database_info

    src = get_source(source)
    db_path = Path(db_path)
    root = src.resolve_dir(mimic_dir)
    started = time.perf_counter()
    note = ""
    if db_path.exists() and not force:
        try:
            info = database_info(db_path)
        except (DatabaseError, duckdb.Error) as exc:   # open_database lets a schema-less file's error through
            note = f"rebuilt: the existing file is not a kit database ({exc})"
        else:
            reason = src.mismatch(info, patients=patients, seed=seed, mimic_dir=root)
            if reason is None:
                return StageResult(db_path, False, time.perf_counter() - started, info, "reused")
            note = f"rebuilt: {reason}"
    src.build(db_path, patients=patients, seed=seed, mimic_dir=root, progress=progress, overwrite=True)
    info = database_info(db_path)
    return StageResult(db_path, True, time.perf_counter() - started, info, note or "built")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def benchmark_mismatch(bench_dir: str | Path, db_path: str | Path, config: Any, seed: int) -> str | None:
    """Why an existing benchmark directory cannot be reused for (db, config, seed); None if it can."""
    from ehrgym.bench.build import builder_code_hash
    from ehrgym.bench.configs import get_config
    from ehrgym.db.connect import open_database, read_meta

    bench_dir = Path(bench_dir)
    manifest = _read_json(bench_dir / "manifest.json")
    if manifest is None:
        return "no readable manifest.json"
    if not (bench_dir / "tasks.jsonl").is_file():
        return "no tasks.jsonl"
    con = open_database(db_path, read_only=True)
    try:
        db_hash = read_meta(con).get("content_hash")
    finally:
        con.close()
    have = {"config": manifest.get("config"), "seed": manifest.get("seed"),
            "db_content_hash": manifest.get("db_content_hash"), "builder code": manifest.get("builder_code_hash")}
    want = {"config": get_config(config).to_dict(), "seed": seed, "db_content_hash": db_hash,
            "builder code": builder_code_hash()}
    diff = [k for k in want if have[k] != want[k]]
    if diff:
        return "it differs in " + ", ".join(diff)
    return None


def ensure_benchmark(db_path: str | Path, bench_dir: str | Path, *, config: Any = "paper", seed: int = 0,
                     force: bool = False, progress: bool = True) -> StageResult:
    """Build (or reuse) the Clean–Noise benchmark of ``db_path`` in ``bench_dir``; an existing one is
    reused when its manifest names the same config, seed, database content hash and builder code
    (:func:`~ehrgym.bench.build.builder_code_hash`: templates or noise edited → rebuilt). ``config`` is a
    config name (``small``/``paper``) or a :class:`~ehrgym.bench.configs.BuildConfig`."""
    from ehrgym.bench.build import build_benchmark

    bench_dir = Path(bench_dir)
    started = time.perf_counter()
    note = "built"
    if bench_dir.exists() and not force:
        reason = benchmark_mismatch(bench_dir, db_path, config, seed)
        if reason is None:
            manifest = _read_json(bench_dir / "manifest.json") or {}
            return StageResult(bench_dir, False, time.perf_counter() - started, manifest, "reused")
        note = f"rebuilt: {reason}"
    result = build_benchmark(db_path, bench_dir, config=config, seed=seed, progress=progress)
    return StageResult(bench_dir, True, time.perf_counter() - started, dict(result.manifest), note)


def run_agents(db_path: str | Path, bench_dir: str | Path, runs_dir: str | Path, agents: Sequence[str], *,
               k: int = 4, workers: int = 2, seed: int = 0, split: str | None = None,
               limit_pairs: int | None = None, model: str | None = None, base_url: str | None = None,
               progress: bool = True) -> list[Any]:
    """Run (or resume) every agent on the benchmark; returns one ``RunSummary`` per agent.

    ``split`` keeps the tasks of one split (train/dev/test/ood), ``limit_pairs`` N pairs spread over intents and subtypes.
    Scripted agents take no options; ``chat`` gets ``model``/``base_url`` (it also reads
    ``EHRGYM_MODEL``/``OPENAI_BASE_URL`` itself)."""
    from ehrgym.eval.runner import run_evaluation

    summaries = []
    for agent in agents:
        kwargs: dict[str, Any] = {}
        if agent in MODEL_AGENTS:
            kwargs = {key: v for key, v in {"model": model, "base_url": base_url if agent == "chat" else None}.items()
                      if v}
        out = Path(runs_dir) / run_name(agent, model if agent in MODEL_AGENTS else None)
        retire_stale_run(out, bench_dir, db_path)
        # the scripted baselines share query results (credulous and literal run the same draft SQL on the same
        # twins, the oracle the same gold on most); a model agent keeps its own, as reuse shows in its timings
        store = None if agent in MODEL_AGENTS else Path(runs_dir) / RESULT_STORE
        summaries.append(run_evaluation(bench_dir, db_path, agent, out, k=k, workers=workers, agent_kwargs=kwargs,
                                        tasks={"split": split} if split else None, limit_pairs=limit_pairs,
                                        seed=seed, progress=progress, result_store=store))
    return summaries


def retire_stale_run(out: Path, bench_dir: str | Path, db_path: str | Path) -> Path | None:
    """Move aside a run directory made on another build of this benchmark or database.

    The pipeline rebuilds a benchmark when its code or database changed; the runs of the old build
    no longer describe it, and resuming them is refused. They are kept as
    ``<runs>/.stale/<run>-<old benchmark hash>`` (out of ``<runs>/*`` globs) and the new run starts
    fresh. Returns where the old run went.
    """
    from ehrgym.bench.dataset import load_benchmark
    from ehrgym.eval.runner import _db_content_hash
    from ehrgym.eval.store import read_run_config

    previous = read_run_config(out) if out.is_dir() else None
    if previous is None:
        return None
    manifest = dict(getattr(load_benchmark(bench_dir), "manifest", {}) or {})
    bench_hash = manifest.get("content_hash") or manifest.get("tasks_sha256")
    if previous.get("bench_content_hash") == bench_hash and \
            previous.get("db_content_hash") == _db_content_hash(db_path):
        return None
    old = str(previous.get("bench_content_hash") or "unknown")[:12]
    target = out.parent / ".stale" / f"{out.name}-{old}"
    n = 1
    while target.exists():
        n += 1
        target = out.parent / ".stale" / f"{out.name}-{old}-{n}"
    target.parent.mkdir(exist_ok=True)
    out.rename(target)
    print(f"{_rel(out)} held a run of another build of this benchmark; kept as {_rel(target)}, starting afresh")
    return target


# =============================================================================================
# papermill
# =============================================================================================
def check_kernel(kernel_name: str = KERNEL_NAME) -> str:
    """The interpreter the kernel will run; raises unless it is this interpreter (the venv)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        raise PipelineError(f"no Jupyter kernel {kernel_name!r}; install one into the venv with "
                            f"`{sys.executable} -m ipykernel install --sys-prefix`") from None
    exe = spec.argv[0] if spec.argv else ""
    # jupyter_client runs a spec whose argv[0] is a bare `python`/`python3` with sys.executable
    if exe in ("python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        return sys.executable
    if Path(exe).resolve() != Path(sys.executable).resolve():
        raise PipelineError(f"the Jupyter kernel {kernel_name!r} runs {exe}, not this interpreter "
                            f"({sys.executable}); reinstall it into the venv with "
                            f"`{sys.executable} -m ipykernel install --sys-prefix`")
    return exe


def execute_notebook(name: str, parameters: dict[str, Any], out_dir: str | Path, *,
                     notebooks: str | Path = NOTEBOOK_DIR, cwd: str | Path | None = None,
                     progress: bool = False, timeout: int | None = None) -> Path:
    """Execute ``notebooks/NAME.ipynb`` with papermill into ``OUT_DIR/NAME.ipynb``."""
    import papermill as pm

    src = Path(notebooks) / f"{name}.ipynb"
    if not src.is_file():
        raise PipelineError(f"notebook {src} does not exist")
    out = Path(out_dir) / f"{name}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    # With progress on, the kernel's own output (the stages' tqdm bars, warnings) streams to this
    # console, so a long cell is never silent; tqdm refreshes at most once a second there.
    stream: dict[str, Any] = {}
    if progress:
        os.environ.setdefault("TQDM_MININTERVAL", "1")
        stream = {"stdout_file": sys.stdout, "stderr_file": sys.stderr}
    try:
        pm.execute_notebook(str(src), str(out), parameters=parameters, kernel_name=KERNEL_NAME,
                            cwd=str(cwd or src.parent), progress_bar=False, log_output=False, **stream,
                            execution_timeout=timeout,
                            # the kernel's start-up notice about local TCP transport is noise in a log
                            extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
    except pm.PapermillExecutionError as exc:
        raise PipelineError(f"{name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue} "
                            f"(see the executed notebook {out})") from exc
    return out


Logger = Callable[[str], None]


def _default_log(message: str) -> None:
    print(f"[reproduce {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class PipelineReport:
    config: dict[str, Any]
    notebooks: dict[str, str] = field(default_factory=dict)    # name -> executed path
    seconds: dict[str, float] = field(default_factory=dict)    # name -> wall seconds
    total_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _describe(name: str, cfg: PipelineConfig) -> str:
    return {
        "00_build_database": f"database ({cfg.source}{'' if cfg.source != 'synthetic' else f', {cfg.patients} patients'}"
                             f", seed {cfg.seed}) → {_rel(cfg.db_path)}",
        "01_build_benchmark": f"benchmark (config {cfg.config}, seed {cfg.seed}) → {_rel(cfg.bench_dir)}",
        "02_run_evaluation": f"agents {', '.join(cfg.agent_list)} × k={cfg.k} on "
                             f"{f'the {cfg.split} split' if cfg.split else 'every task'}"
                             f"{f' ({cfg.limit_pairs} pairs)' if cfg.limit_pairs else ''}, {cfg.workers} workers → "
                             f"{_rel(cfg.runs_dir)}",
        "03_robustness_analysis": f"report → {_rel(Path(cfg.tables).resolve())}/, "
                                  f"{_rel(Path(cfg.figures).resolve())}/",
        EXPLORE_NOTEBOOK: "noise explorer (teaching; interactive in Jupyter)",
        EXERCISE_NOTEBOOK: "exercises (teaching: one pair per noise level, open exercises)",
    }.get(name, name)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _outcome(name: str, cfg: PipelineConfig) -> str:
    """One line on what a stage left behind (read back from its artefacts)."""
    if name == "00_build_database":
        from ehrgym.db.info import database_info

        info = database_info(cfg.db_path)
        rows = sum(info.get("row_counts", {}).values())
        return f"{info.get('patients')} patients, {rows:,} rows, {info['size_bytes'] / 2**20:.0f} MiB"
    if name == "01_build_benchmark":
        manifest = _read_json(cfg.bench_dir / "manifest.json") or {}
        pairs = (manifest.get("task_counts") or {}).get("pairs")
        limits = (_read_json(cfg.bench_dir / "card.json") or {}).get("limitations") or []
        note = "".join(f"\n    warning: {w}" for w in limits)
        return f"{pairs if pairs is not None else '?'} Clean–Noise pairs{note}"
    if name == "02_run_evaluation":
        from ehrgym.eval.metrics import load_episodes

        dirs = [cfg.runs_dir / run_name(a, cfg.endpoint.get("model")) for a in cfg.agent_list]
        df = load_episodes(dirs)
        parts = []
        for system, g in df.groupby("system", sort=True):
            valid = g[g["success_strict"].notna()]
            rate = {v: valid[valid["variant"] == v]["success_strict"].astype(float).mean() for v in ("clean", "noise")}
            parts.append(f"{system} {100 * rate['clean']:.1f}%→{100 * rate['noise']:.1f}%")
        return f"{len(df)} episodes; episode success clean→noise: " + ", ".join(parts)
    if name == "03_robustness_analysis":
        tables = len(list(Path(cfg.tables).resolve().glob("*.csv")))
        figures = len(list(Path(cfg.figures).resolve().glob("*.png")))
        return f"{tables} tables, {figures} figures"
    return ""


def run_pipeline(cfg: PipelineConfig, *, log: Logger = _default_log,
                 notebooks: Sequence[str] = ALL_NOTEBOOKS) -> PipelineReport:
    """Execute the pipeline notebooks in order; returns what ran and how long it took."""
    src = get_source(cfg.source)
    src.resolve_dir(cfg.mimic_dir)             # fail fast on a missing MIMIC_DIR
    exe = check_kernel()
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    params = cfg.notebook_parameters()
    report = PipelineReport(config=asdict(cfg))
    log(f"kernel {KERNEL_NAME} → {exe}; executed notebooks → {_rel(cfg.executed_dir)}/")
    started = time.perf_counter()
    for i, name in enumerate(notebooks, 1):
        if name not in params:
            raise PipelineError(f"{name} is not a pipeline notebook; choose from {list(params)}")
        log(f"[{i}/{len(notebooks)}] {name}: {_describe(name, cfg)}")
        t0 = time.perf_counter()
        out = execute_notebook(name, params[name], cfg.executed_dir, notebooks=cfg.notebooks,
                               progress=cfg.progress)
        seconds = time.perf_counter() - t0
        report.notebooks[name] = str(out)
        report.seconds[name] = round(seconds, 1)
        log(f"[{i}/{len(notebooks)}] {name} done in {seconds:.0f} s: {_outcome(name, cfg)}")
    report.total_seconds = round(time.perf_counter() - started, 1)
    (cfg.executed_dir / "pipeline.json").write_text(json.dumps(report.to_dict(), indent=2, sort_keys=True,
                                                               default=str) + "\n", encoding="utf-8")
    log(f"finished in {report.total_seconds / 60:.1f} min; tables in {_rel(Path(cfg.tables).resolve())}/, "
        f"figures in {_rel(Path(cfg.figures).resolve())}/")
    return report


# =============================================================================================
# command line
# =============================================================================================
def _cli() -> Any:
    import click

    @click.command("reproduce", context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--source", type=click.Choice(sorted(SOURCES)), default="synthetic", show_default=True)
    @click.option("--patients", type=click.IntRange(min=1), default=DEFAULT_PATIENTS, show_default=True,
                  help="synthetic hospital size (ignored for demo/mimic)")
    @click.option("--seed", type=int, default=0, show_default=True)
    @click.option("--config", default="paper", show_default=True, help="benchmark config: small | paper")
    @click.option("--k", type=click.IntRange(min=1), default=4, show_default=True, help="trials per task")
    @click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
    @click.option("--mimic-dir", default=None, help="MIMIC-IV directory (hosp/, icu/) for --source demo|mimic")
    @click.option("--data", default="data", show_default=True, help="where databases, benchmarks, runs and "
                  "executed notebooks go")
    @click.option("--tables", default="", help="table directory [default: tables/ for synthetic, "
                  "tables/SOURCE/ otherwise]")
    @click.option("--figures", default="", help="figure directory [default: figures/ for synthetic, "
                  "figures/SOURCE/ otherwise]")
    @click.option("--agents", default=",".join(BASELINES), show_default=True, help="comma-separated agents")
    @click.option("--model", default=None, help="chat model (or EHRGYM_MODEL); adds the chat agent")
    @click.option("--base-url", default=None, help="OpenAI-compatible endpoint (or OPENAI_BASE_URL)")
    @click.option("--split", default=DEFAULT_SPLIT, show_default=True,
                  type=click.Choice(["train", "dev", "test", "ood", "all"]),
                  help="the split the agents are evaluated on (all: every task)")
    @click.option("--limit-pairs", type=int, default=None, help="evaluate only N pairs, spread over intents and noise subtypes")
    @click.option("--n-boot", type=click.IntRange(min=0), default=1000, show_default=True)
    @click.option("--force", is_flag=True, default=False, help="rebuild the database and the benchmark")
    @click.option("--no-progress", is_flag=True, default=False)
    def main(source: str, patients: int, seed: int, config: str, k: int, workers: int, mimic_dir: str | None,
             data: str, tables: str, figures: str, agents: str, model: str | None, base_url: str | None,
             split: str | None, limit_pairs: int | None, n_boot: int, force: bool, no_progress: bool) -> None:
        """Database → benchmark → baselines (k trials) → tables/ and figures/, through the notebooks."""
        if source == "synthetic":
            mimic_dir = None
        cfg = PipelineConfig(source=source, patients=patients, seed=seed, config=config, k=k, workers=workers,
                             mimic_dir=mimic_dir, data=data, tables=tables, figures=figures,
                             agents=tuple(a.strip() for a in agents.split(",") if a.strip()), model=model,
                             base_url=base_url, split=None if split == "all" else split,
                             limit_pairs=limit_pairs, n_boot=n_boot, force=force,
                             progress=not no_progress)
        run_pipeline(cfg)

    return main


def main(argv: Sequence[str] | None = None) -> None:
    from ehrgym.cli import run_command

    run_command(_cli(), list(argv) if argv is not None else None)


if __name__ == "__main__":
    main()
