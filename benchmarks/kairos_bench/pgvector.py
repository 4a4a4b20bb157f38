"""``pgvector``: how kairos should keep vectors on PostgreSQL, measured (issue 26 §2).

Two candidates, each on its own private PostgreSQL cluster on loopback
(:class:`~kairos.testing.servers.PostgresServer`, the same settings for both: fsync off, 512 MB of
shared buffers, 1 GB of maintenance memory, default parallel workers):

- ``pgvector``: the PostgreSQL 16 + pgvector 0.6.2 bundled in the ``pgserver`` wheel, vectors in a
  ``vector(384)`` column with an HNSW index (``vector_cosine_ops``). The bench runs the wheel's own
  ``initdb``/``postgres`` the way kairos runs Debian's: ``pgserver.get_server()`` run as root adds a
  system user and opens every parent folder of its data to all users, which a bench should not do.
- ``usearch``: Debian's PostgreSQL 15 holding the rows (the vector as float32 ``bytea``, as in the
  SQLite store) and kairos's embedded usearch HNSW index beside them, in the process, saved to a file
  per deployment and rebuilt from the rows when missing or stale
  (:class:`~kairos.knowledge.vectors.HnswIndex`).

Both graphs get the same parameters, usearch's defaults that kairos uses: M = 16, ef_construction =
128, ef_search = 64. Per size N (random unit vectors of dimension 384, the embedder's) and repeat, in
a new database:

- ``bulk_rows_per_s``: the first N − 5,000 rows stored without an index (``COPY`` in transactions
  of 1,000, rows formatted before the clock).
- ``insert_rows_per_s``: the last 5,000 rows, the same way, into the table that holds the others, the
  index kept up to date as ``kb add`` keeps it: pgvector's HNSW inside the transaction, usearch's
  ``add`` after the commit.
- ``build_s``: the index made again from the N stored rows: ``CREATE INDEX`` (pgvector), or reading
  the rows back and adding them to a new usearch index (what a process does on start without a
  current index file); ``load_s`` (usearch) restores the saved file instead.
- ``query_ms_p50``/``p99`` at k = 10 over ``queries`` new random vectors, one at a time, after 20
  warm-up queries: pgvector's ``ORDER BY v <=> q LIMIT 10`` over the connection; usearch's search plus
  the round trip that joins its ids back to the rows (``index_ms_p50``: the search alone).
- ``recall_at_10`` against exact cosine search (numpy) over the same queries; ``*_ef200`` the same
  queries again with ef_search = 200. Random unit vectors in 384 dimensions are the hardest case for a
  graph index (every point is nearly as far as every other), so recall here is far below what real
  embeddings get with the same settings; it compares the two backends, not kairos's retrieval.
- ``disk_mb``: the table with its indexes (``pg_total_relation_size``) plus the usearch file.
- ``first_query_ms`` after the server restarts (pgvector: shared buffers cold; usearch: the index
  stays in the process).

Per backend and repeat, ``start_s`` is ``initdb`` to ready on a new cluster and ``restart_s`` a
stopped cluster to ready. ``install_mb`` is what each needs on disk beyond kairos's own dependencies:
the installed files of ``pgserver`` and the packages it pulls that kairos lacks; Debian's
``postgresql-15`` and the packages only PostgreSQL uses (``dpkg``'s installed sizes), with the shared
libraries it also needs (LLVM for its JIT, ICU) reported apart. Medians over the repeats; the load
average is recorded around each measurement because other processes share the machine.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.console import Console

from kairos.testing.servers import PostgresServer, ServerUnavailable, find_postgres_bin
from kairos_bench._stats import percentile

DIM = 384
SIZES = (10_000, 50_000)
K = 10
M, EF_CONSTRUCTION, EF_SEARCH = 16, 128, 64
EF_WIDE = 200
"""A second ef_search, to show what recall costs in latency on each backend."""
BATCH = 1_000
TAIL = 5_000
WARMUP = 20
SETTINGS = {"shared_buffers": "512MB", "maintenance_work_mem": "1GB"}
BACKENDS = ("pgvector", "usearch")
PGSERVER_EXTRA = ("pgserver", "fasteners", "psutil")
"""``pgserver`` and the dependencies it adds to a kairos install (platformdirs kairos has already)."""
DEBIAN_OWN = ("postgresql-15", "postgresql-client-15", "postgresql-common", "postgresql-client-common")
DEBIAN_SHARED = ("libllvm14", "libicu72", "libxslt1.1")
"""Libraries ``postgresql-15`` depends on that other software uses too (so often already installed)."""

Vectors = npt.NDArray[np.float32]


def pgserver_bin() -> Path | None:
    """The ``bin`` folder of the PostgreSQL bundled in the ``pgserver`` wheel (None: not installed).

    Found without importing ``pgserver``, whose import creates a runtime folder and warns without
    ``XDG_RUNTIME_DIR``.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return folder if (folder / "postgres").exists() else None


def unit_vectors(n: int, seed: int) -> Vectors:
    """``n`` random unit vectors of dimension :data:`DIM` (float32)."""
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    unit: Vectors = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit


def exact_top(data: Vectors, queries: Vectors, k: int) -> list[set[int]]:
    """The ids (row numbers) of each query's ``k`` nearest vectors by cosine, exactly."""
    scores = queries @ data.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    return [{int(i) for i in row} for row in top]


def _vector_text(v: Vectors) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in v.tolist()) + "]"


def _copy_blocks(data: Vectors, backend: str) -> list[bytes]:
    """``COPY ... FROM STDIN`` text for each batch of rows (formatted before the clock starts)."""
    blocks = []
    for start in range(0, len(data), BATCH):
        lines = []
        for i in range(start, min(start + BATCH, len(data))):
            value = _vector_text(data[i]) if backend == "pgvector" else "\\\\x" + data[i].tobytes().hex()
            lines.append(f"{i}\t{value}\n")
        blocks.append("".join(lines).encode())
    return blocks


def _load() -> float:
    return round(os.getloadavg()[0], 2)


@contextlib.contextmanager
def _database(server: PostgresServer) -> Iterator[Any]:
    """A connection (autocommit) to a new database on ``server``, dropped afterwards."""
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(server.url_for(name), autocommit=True) as conn:
            yield conn
    finally:
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _timed_queries(search: Any, queries: Vectors) -> tuple[list[float], list[list[int]]]:
    """Latencies (ms) and ids of the queries after the first :data:`WARMUP` (which only warm up)."""
    for q in queries[:WARMUP]:
        search(q)
    latencies, found = [], []
    for q in queries[WARMUP:]:
        t0 = time.perf_counter()
        ids = search(q)
        latencies.append((time.perf_counter() - t0) * 1000)
        found.append(ids)
    return latencies, found


def _recall(found: list[list[int]], truth: list[set[int]]) -> float:
    return sum(len(set(f) & t) for f, t in zip(found, truth, strict=True)) / (K * len(truth))


def _split(blocks: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The bulk load (no index) and the last :data:`TAIL` rows (inserted with the index kept up to date)."""
    cut = len(blocks) - TAIL // BATCH if len(blocks) > TAIL // BATCH else len(blocks) // 2
    return blocks[:cut], blocks[cut:]


def _rows(blocks: list[bytes]) -> int:
    return sum(block.count(b"\n") for block in blocks)


def _insert(conn: Any, blocks: list[bytes], after: Any = None) -> float:
    """Seconds to COPY every block, one transaction each; ``after(i)`` runs after block ``i`` commits."""
    t0 = time.perf_counter()
    for i, block in enumerate(blocks):
        with conn.transaction(), conn.cursor().copy("COPY vecs (id, v) FROM STDIN") as copy:
            copy.write(block)
        if after is not None:
            after(i)
    return time.perf_counter() - t0


def _table_bytes(conn: Any) -> int:
    return int(conn.execute("SELECT pg_total_relation_size('vecs')").fetchone()[0])


def run_pgvector(server: PostgresServer, data: Vectors, queries: Vectors, truth: list[set[int]]) -> dict[str, Any]:
    """One repeat of the pgvector backend on ``data``."""
    blocks = _copy_blocks(data, "pgvector")
    hnsw = (
        "CREATE INDEX vecs_hnsw ON vecs USING hnsw (v vector_cosine_ops) "
        f"WITH (m = {M}, ef_construction = {EF_CONSTRUCTION})"
    )
    with _database(server) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute(f"CREATE TABLE vecs (id bigint PRIMARY KEY, v vector({DIM}) NOT NULL)")
        load = [_load()]
        bulk, tail = _split(blocks)
        bulk_s = _insert(conn, bulk)
        conn.execute(hnsw)
        insert_s = _insert(conn, tail)
        conn.execute("DROP INDEX vecs_hnsw")
        conn.execute("CHECKPOINT")
        load.append(_load())
        t0 = time.perf_counter()
        conn.execute(hnsw)
        build_s = time.perf_counter() - t0
        conn.execute("VACUUM ANALYZE vecs")
        sql = "SELECT id FROM vecs ORDER BY v <=> %s::vector LIMIT %s"
        conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, (_vector_text(queries[0]), K)).fetchall())
        if "vecs_hnsw" not in plan:
            raise RuntimeError(f"pgvector did not use its HNSW index:\n{plan}")

        def search(q: Vectors) -> list[int]:
            return [r[0] for r in conn.execute(sql, (_vector_text(q), K), prepare=True).fetchall()]

        load.append(_load())
        latencies, found = _timed_queries(search, queries)
        conn.execute(f"SET hnsw.ef_search = {EF_WIDE}")
        wide_latencies, wide_found = _timed_queries(search, queries)
        disk = _table_bytes(conn)
        index_bytes = int(conn.execute("SELECT pg_relation_size('vecs_hnsw')").fetchone()[0])
        name = conn.info.dbname
        conn.close()
        server.halt()  # first query after a restart: shared buffers are cold
        server.run()
        import psycopg

        with psycopg.connect(server.url_for(name), autocommit=True) as again:
            again.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
            t0 = time.perf_counter()
            again.execute(sql, (_vector_text(queries[0]), K)).fetchall()
            first = (time.perf_counter() - t0) * 1000
    return {
        "bulk_rows_per_s": _rows(bulk) / bulk_s,
        "insert_rows_per_s": _rows(tail) / insert_s,
        "build_s": build_s,
        "query_ms_p50": percentile(latencies, 0.5),
        "query_ms_p99": percentile(latencies, 0.99),
        "recall_at_10": _recall(found, truth),
        "query_ms_p50_ef200": percentile(wide_latencies, 0.5),
        "query_ms_p99_ef200": percentile(wide_latencies, 0.99),
        "recall_at_10_ef200": _recall(wide_found, truth),
        "disk_mb": disk / 1e6,
        "index_mb": index_bytes / 1e6,
        "first_query_ms": first,
        "load": load,
    }


def _usearch_index() -> Any:
    from usearch.index import Index

    return Index(
        ndim=DIM, metric="cos", dtype="f32", connectivity=M, expansion_add=EF_CONSTRUCTION, expansion_search=EF_SEARCH
    )


def run_usearch(server: PostgresServer, data: Vectors, queries: Vectors, truth: list[set[int]]) -> dict[str, Any]:
    """One repeat of the rows-in-PostgreSQL + embedded usearch backend on ``data``."""
    from usearch.index import Index

    blocks = _copy_blocks(data, "usearch")
    folder = Path(tempfile.mkdtemp(prefix="kairos-pgvector-bench-"))
    try:
        with _database(server) as conn:
            conn.execute("CREATE TABLE vecs (id bigint PRIMARY KEY, v bytea NOT NULL)")
            index = _usearch_index()

            bulk, tail = _split(blocks)

            def add(i: int) -> None:
                lo = (len(bulk) + i) * BATCH
                hi = min(lo + BATCH, len(data))
                index.add(np.arange(lo, hi, dtype=np.uint64), data[lo:hi])

            load = [_load()]
            bulk_s = _insert(conn, bulk)
            index.add(np.arange(len(bulk) * BATCH, dtype=np.uint64), data[: len(bulk) * BATCH])
            insert_s = _insert(conn, tail, add)
            conn.execute("CHECKPOINT")
            load.append(_load())
            t0 = time.perf_counter()  # a process starting without a current index file: from the rows
            rebuilt = _usearch_index()
            with conn.transaction(), conn.cursor(name="rows") as cursor:
                cursor.execute("SELECT id, v FROM vecs ORDER BY id")
                while batch := cursor.fetchmany(2048):
                    keys = np.array([r[0] for r in batch], dtype=np.uint64)
                    vecs = np.frombuffer(b"".join(r[1] for r in batch), dtype=np.float32).reshape(len(batch), DIM)
                    rebuilt.add(keys, vecs)
            build_s = time.perf_counter() - t0
            path = folder / "vectors.usearch"
            t0 = time.perf_counter()
            rebuilt.save(str(path))
            save_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            restored = Index.restore(str(path), view=False)
            load_s = time.perf_counter() - t0
            if restored is None or len(restored) != len(data):
                raise RuntimeError("the saved usearch index did not restore")
            # a search setting, not kept in the file (usearch has the setter; mypy reads its property only)
            restored.expansion_search = EF_SEARCH  # type: ignore[misc]
            conn.execute("VACUUM ANALYZE vecs")
            join = "SELECT id FROM vecs WHERE id = ANY(%s)"

            def search(q: Vectors) -> list[int]:
                keys = [int(key) for key in restored.search(q, K).keys]
                return [r[0] for r in conn.execute(join, (keys,), prepare=True).fetchall()]

            def search_index(q: Vectors) -> list[int]:
                return [int(key) for key in restored.search(q, K).keys]

            load.append(_load())
            latencies, found = _timed_queries(search, queries)
            index_latencies, _ = _timed_queries(search_index, queries)
            restored.expansion_search = EF_WIDE  # type: ignore[misc]
            wide_latencies, wide_found = _timed_queries(search, queries)
            disk = _table_bytes(conn) + path.stat().st_size
            memory = int(restored.memory_usage)
        return {
            "bulk_rows_per_s": _rows(bulk) / bulk_s,
            "insert_rows_per_s": _rows(tail) / insert_s,
            "build_s": build_s,
            "save_s": save_s,
            "load_s": load_s,
            "query_ms_p50": percentile(latencies, 0.5),
            "query_ms_p99": percentile(latencies, 0.99),
            "index_ms_p50": percentile(index_latencies, 0.5),
            "index_ms_p99": percentile(index_latencies, 0.99),
            "recall_at_10": _recall(found, truth),
            "query_ms_p50_ef200": percentile(wide_latencies, 0.5),
            "query_ms_p99_ef200": percentile(wide_latencies, 0.99),
            "recall_at_10_ef200": _recall(wide_found, truth),
            "disk_mb": disk / 1e6,
            "index_mb": path.stat().st_size / 1e6,
            "process_memory_mb": memory / 1e6,
            "load": load,
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _bin_dirs() -> dict[str, Path | None]:
    return {"pgvector": pgserver_bin(), "usearch": find_postgres_bin()}


def _start_times(bin_dir: Path, repeats: int) -> dict[str, Any]:
    starts, restarts = [], []
    for _ in range(repeats):
        server = PostgresServer.start(bin_dir=bin_dir, settings=SETTINGS)
        try:
            starts.append(server.startup_s)
            server.halt()
            t0 = time.perf_counter()
            server.run()
            restarts.append(time.perf_counter() - t0)
        finally:
            server.stop()
    return {
        "start_s": round(statistics.median(starts), 3),
        "start_s_runs": [round(s, 3) for s in starts],
        "restart_s": round(statistics.median(restarts), 3),
        "restart_s_runs": [round(s, 3) for s in restarts],
    }


def _dist_bytes(name: str) -> int:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return 0
    total = 0
    for file in dist.files or ():
        with contextlib.suppress(OSError):
            total += Path(str(file.locate())).stat().st_size
    return total


def _dpkg_kib(packages: tuple[str, ...]) -> dict[str, int]:
    sizes = {}
    for package in packages:
        try:
            out = subprocess.run(
                ["dpkg-query", "-W", "-f", "${Installed-Size}", package],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip().isdigit():
            sizes[package] = int(out.stdout.strip())
    return sizes


def install_footprint() -> dict[str, Any]:
    """Megabytes each backend adds on disk (see the module docstring)."""
    pip = {name: round(_dist_bytes(name) / 1e6, 1) for name in PGSERVER_EXTRA}
    own = _dpkg_kib(DEBIAN_OWN)
    shared = _dpkg_kib(DEBIAN_SHARED)
    return {
        "pgvector": {"install_mb": round(sum(pip.values()), 1), "packages_mb": pip, "how": "pip (wheel)"},
        "usearch": {
            "install_mb": round(sum(own.values()) * 1024 / 1e6, 1),
            "packages_mb": {k: round(v * 1024 / 1e6, 1) for k, v in own.items()},
            "shared_libraries_mb": {k: round(v * 1024 / 1e6, 1) for k, v in shared.items()},
            "usearch_mb": round(_dist_bytes("usearch") / 1e6, 1),
            "how": "apt-get install postgresql (usearch is already a kairos dependency)",
        },
    }


def _median_row(backend: str, n: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"backend": backend, "n": n}
    for key in runs[0]:
        if key == "load":
            continue
        values = [r[key] for r in runs]
        digits = 4 if key.startswith("recall") else 3
        row[key] = round(statistics.median(values), digits)
        row[f"{key}_runs"] = [round(v, digits) for v in values]
    loads = [x for r in runs for x in r["load"]]
    row["load_avg_1min"] = [min(loads), max(loads)]
    return row


def run(
    console: Console | None = None,
    *,
    quick: bool = False,
    trials: int | None = None,
    docs: int | None = None,
    queries: int = 200,
    sizes: tuple[int, ...] = SIZES,
    model: str | None = None,  # accepted from `kairos bench`; no model is used
) -> dict[str, Any]:
    """Both backends at every size (``--docs N``: that size alone; ``--trials``: repeats, default 3).

    Raises:
        ServerUnavailable: neither PostgreSQL is installed (one missing is reported in its row).
    """
    console = console or Console(stderr=True)
    repeats = trials or (1 if quick else 3)
    if docs is not None:
        sizes = (docs,)
    elif quick:
        sizes, queries = (2_000,), 50
    bins = _bin_dirs()
    if not any(bins.values()):
        raise ServerUnavailable("neither pgserver (pip install pgserver) nor Debian's PostgreSQL is installed")
    rows: list[dict[str, Any]] = []
    starts: dict[str, dict[str, Any]] = {}
    missing = {
        "pgvector": "pgserver is not installed: pip install pgserver (the bench's only use of it)",
        "usearch": "Debian's PostgreSQL is not installed: apt-get install postgresql",
    }
    for backend in BACKENDS:
        bin_dir = bins[backend]
        if bin_dir is None:
            rows.append({"backend": backend, "installed": False, "error": missing[backend]})
            continue
        console.print(f"pgvector bench: {backend} server start x{repeats} ...")
        starts[backend] = _start_times(bin_dir, repeats)
        measure = run_pgvector if backend == "pgvector" else run_usearch
        server = PostgresServer.start(bin_dir=bin_dir, settings=SETTINGS)
        try:
            for n in sizes:
                data = unit_vectors(n, seed=n)
                asked = unit_vectors(queries + WARMUP, seed=n + 1)
                truth = exact_top(data, asked[WARMUP:], K)
                runs = []
                for i in range(repeats):
                    console.print(f"pgvector bench: {backend} N={n:,} repeat {i + 1}/{repeats} ...")
                    one = measure(server, data, asked, truth)
                    runs.append(one)
                    shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in one.items()}
                    console.print(f"  {shown}")
                row = _median_row(backend, n, runs)
                rows.append({**row, **starts[backend], "version": _version(server)})
        finally:
            server.stop()
    footprint = install_footprint()
    for row in rows:
        if row.get("installed", True):
            row["install_mb"] = footprint[row["backend"]]["install_mb"]
    summary: dict[str, Any] = {}
    for row in rows:
        if not row.get("installed", True):
            continue
        b, n = row["backend"], row["n"]
        for key in ("insert_rows_per_s", "build_s", "query_ms_p50", "query_ms_p99", "recall_at_10", "disk_mb"):
            summary[f"{b}_{n}_{key}"] = row[key]
    for b, s in starts.items():
        summary[f"{b}_start_s"] = s["start_s"]
        summary[f"{b}_install_mb"] = footprint[b]["install_mb"]
    return {
        "bench": "pgvector",
        "params": {
            "dim": DIM,
            "sizes": list(sizes),
            "vectors": "random unit vectors (numpy, seeded), queries new random unit vectors",
            "k": K,
            "queries": queries,
            "warmup_queries": WARMUP,
            "repeats": repeats,
            "hnsw": {"m": M, "ef_construction": EF_CONSTRUCTION, "ef_search": EF_SEARCH, "metric": "cosine"},
            "ef_search_wide": f"*_ef200: the same queries again with ef_search = {EF_WIDE}",
            "insert": f"COPY in transactions of {BATCH} rows with the index maintained",
            "server_settings": {**SETTINGS, "fsync": "off", "synchronous_commit": "off"},
            "cpus": os.cpu_count(),
            "medians": "each row's value is the median over the repeats (all runs in *_runs)",
            "footprint": footprint,
        },
        "rows": rows,
        "summary": summary,
    }


def _version(server: PostgresServer) -> str:
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        version = str(row[0]) if row else "?"
        vector = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return f"PostgreSQL {version}" + (f", pgvector {vector[0]}" if vector else "")
