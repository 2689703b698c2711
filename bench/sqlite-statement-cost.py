#!/usr/bin/env python3
"""What the SQLite engine's statements cost, without the gateway around them (docs/benchmarks.md).

Replays the durable queue's write pattern on the queue's own schema (Sources/QueueStore/Schema.swift):
per transaction, one notification of 100 tokens is inserted (12-column job rows, one multi-row INSERT,
jobs leased on insert) and the 100 jobs inserted two transactions earlier are completed (one multi-row
UPDATE ... FROM (VALUES ...)). Prints SQLite's CPU per 100,000 jobs for variants of the schema and of
the statements, so one can see what an index or a re-prepared statement costs; then variants that were
priced as possible next steps (docs/benchmarks.md, the SQLite engine): a row
without a provider id, a shorter lease owner, other page sizes, more jobs per transaction, and
completions appended to a table of their own instead of updating the job's row; and a
job row written once, at its outcome.

Needs apsw (a SQLite binding with the same SQLite as sqlite-nio, 3.54; pip install apsw), e.g.
  python3 -m venv .venv-bench && .venv-bench/bin/pip install apsw && .venv-bench/bin/python bench/sqlite-statement-cost.py
"""
import json, os, sys, tempfile, time, uuid

import apsw

SCHEMA = """
CREATE TABLE pushgate_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO pushgate_meta VALUES ('next_job_id', 0), ('next_notif_id', 0);
CREATE TABLE notifications (id INTEGER PRIMARY KEY, notif_id TEXT NOT NULL, platform INTEGER NOT NULL, body TEXT NOT NULL,
  created_at REAL NOT NULL, app TEXT NOT NULL DEFAULT 'default', fallback TEXT);
CREATE INDEX notifications_notif_id ON notifications (notif_id);
CREATE INDEX notifications_created ON notifications (created_at);
CREATE TABLE jobs (id INTEGER PRIMARY KEY, notif_row INTEGER NOT NULL, platform INTEGER NOT NULL, target_kind INTEGER NOT NULL,
  target TEXT NOT NULL, target_keys TEXT, message_id TEXT NOT NULL, attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
  cred_retry INTEGER NOT NULL DEFAULT 0, not_before REAL NOT NULL, enqueued_at REAL NOT NULL, last_error TEXT,
  state INTEGER NOT NULL DEFAULT 0, provider_id TEXT, finished_at REAL, lease_owner TEXT);
CREATE INDEX jobs_free ON jobs (platform, not_before, id) WHERE state = 0 AND lease_owner IS NULL;
CREATE INDEX jobs_leased ON jobs (id) WHERE state = 0 AND lease_owner IS NOT NULL;
CREATE INDEX jobs_notif_row ON jobs (notif_row);
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state <> 0;
"""
OWNER_BY_OWNER = "CREATE INDEX jobs_leased ON jobs (lease_owner) WHERE state = 0 AND lease_owner IS NOT NULL;"

# name: (schema edit, statement cache on, statements)
VARIANTS = {
    "as shipped (leased index by id), statements re-prepared (sqlite-nio)": ({}, False, "values"),
    "as shipped, statements prepared once (a statement cache)": ({}, True, "values"),
    "leased index keyed by owner (before 405a420), re-prepared": ({"leased": OWNER_BY_OWNER}, False, "values"),
    "no finished index, re-prepared": ({"finished": ""}, False, "values"),
    "no notif_row index, re-prepared": ({"notif_row": ""}, False, "values"),
    "rows as JSON (json_each) instead of VALUES, re-prepared": ({}, False, "json"),
    "neither finished nor notif_row index, re-prepared": ({"finished": "", "notif_row": ""}, False, "values"),
    "neither finished nor notif_row index, prepared once": ({"finished": "", "notif_row": ""}, True, "values"),
}

# name: keyword arguments of run (statements prepared once)
NEXT = {
    "as shipped (36-character provider id and lease owner), 100 jobs per transaction": {},
    "no provider id stored (APNs echoes the apns-id the gateway sent)": {"provider": False},
    "16-character lease owner": {"owner_len": 16},
    "page size 2048": {"page_size": 2048},
    "page size 8192": {"page_size": 8192},
    "200 jobs per transaction": {"per": 200},
    "50 jobs per transaction": {"per": 50},
    "completions appended to an outcomes table, no finished index": {"outcomes": True},
}

# A layout priced before it was adopted: a job row written once, at its outcome, with every column
# (no leased index, no notif_row index: ids of a notification are consecutive); pending jobs are
# the notification's targets without a row (a counter of open jobs per notification, decremented
# with each batch of outcomes). Not a working design as is either (retries, leases of a shared
# store, status of pending jobs); a floor. name: (statements prepared once, finished index kept)
WRITTEN_ONCE = {
    "job row written once at its outcome, statements re-prepared (sqlite-nio)": (False, True),
    "job row written once at its outcome, statements prepared once": (True, True),
    "job row written once at its outcome, no finished index, re-prepared": (False, False),
}


def run_written_once(cache, finished_index, n=100_000, per=100):
    schema = SCHEMA.replace("CREATE INDEX jobs_leased ON jobs (id) WHERE state = 0 AND lease_owner IS NOT NULL;", "")
    schema = schema.replace("CREATE INDEX jobs_notif_row ON jobs (notif_row);", "")
    if not finished_index:
        schema = schema.replace("CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state <> 0;", "")
    schema += "ALTER TABLE notifications ADD COLUMN open INTEGER; CREATE INDEX notifications_open ON notifications (id) WHERE open > 0;"
    replay = Replay(schema, cache)
    sql = replay.sql
    tokens = [os.urandom(32).hex() for _ in range(per)]
    body = json.dumps({"tokens": tokens, "platform": 1, "message": "x" * 200})

    cols = COLS.replace(", lease_owner", ", state, provider_id, finished_at")
    row = "(" + ",".join("?" * 14) + ")"
    pending, jid, nid, now = [], 0, 0, time.time()
    while jid < n:
        sql("BEGIN IMMEDIATE")
        sql("UPDATE pushgate_meta SET value = value + ? WHERE key = 'next_job_id' RETURNING value", (per,))
        sql("INSERT INTO notifications (id, notif_id, platform, body, created_at, app, fallback, open) VALUES (?,?,?,?,?,?,?,?)",
            (nid, str(uuid.uuid4()), 1, body, now, "default", None, per))
        for k in range(per):
            pending.append((jid, nid, k))
            jid += 1
        nid += 1
        if len(pending) > 2 * per:
            done, pending = pending[:per], pending[per:]
            rows = [[j, nr, 1, 0, tokens[k], None, str(uuid.uuid4()), 1, 3, now, now, 1, str(uuid.uuid4()), now] for (j, nr, k) in done]
            sql(f"INSERT INTO jobs ({cols}) VALUES " + ",".join([row] * len(rows)), [v for r in rows for v in r])
            sql("UPDATE notifications SET open = open - ? WHERE id = ?", (per, done[0][1]))
        sql("COMMIT")
    return replay.close(n)

COLS = "id, notif_row, platform, target_kind, target, target_keys, message_id, attempts, max_attempts, not_before, enqueued_at, lease_owner"


class Replay:
    """A fresh queue store in a temporary directory, with SQLite's CPU of the statements run through `sql` summed."""

    def __init__(self, schema, cache, page_size=4096):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "q.sqlite")
        self.db = apsw.Connection(self.path, statementcachesize=100 if cache else 0)
        self.c = self.db.cursor()
        for p in [f"page_size={page_size}", "journal_mode=WAL", "synchronous=NORMAL", "cache_size=-16000", "wal_autocheckpoint=0"]:
            self.c.execute("PRAGMA " + p)
        self.c.execute(schema)
        self.spent = 0.0

    def sql(self, q, b=()):
        t = time.process_time()
        r = list(self.c.execute(q, b))
        self.spent += time.process_time() - t
        return r

    def close(self, n):
        """SQLite CPU and WAL bytes, per 100,000 jobs of the `n` replayed; removes the store."""
        wal = os.path.getsize(self.path + "-wal")
        self.db.close()
        for f in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, f))
        os.rmdir(self.dir)
        return self.spent * 100_000 / n, wal * 100_000 / n


def run(edits, cache, style, n=100_000, per=100, provider=True, owner_len=36, page_size=4096, outcomes=False):
    schema = SCHEMA
    if "leased" in edits:
        schema = schema.replace("CREATE INDEX jobs_leased ON jobs (id) WHERE state = 0 AND lease_owner IS NOT NULL;", edits["leased"])
    if "finished" in edits:
        schema = schema.replace("CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state <> 0;", edits["finished"])
    if "notif_row" in edits:
        schema = schema.replace("CREATE INDEX jobs_notif_row ON jobs (notif_row);", edits["notif_row"])
    if outcomes:
        # completions go to a table of their own (the job row and its indexes stay as inserted);
        # not a working design as is (pending and leased would have to be told apart otherwise),
        # a floor for what an append-only layout could cost
        schema = schema.replace("CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state <> 0;", "")
        schema += "CREATE TABLE outcomes (job INTEGER PRIMARY KEY, state INTEGER, attempts INTEGER, provider_id TEXT, last_error TEXT, finished_at REAL);"
    replay = Replay(schema, cache, page_size)
    sql = replay.sql
    owner = str(uuid.uuid4()).replace("-", "")[:owner_len] if owner_len < 36 else str(uuid.uuid4())
    tokens = [os.urandom(32).hex() for _ in range(per)]
    body = json.dumps({"tokens": tokens, "platform": 1, "message": "x" * 200})

    row = "(" + ",".join("?" * 12) + ")"
    pending, jid, nid, now = [], 0, 0, time.time()
    while jid < n:
        sql("BEGIN IMMEDIATE")
        sql("UPDATE pushgate_meta SET value = value + ? WHERE key = 'next_job_id' RETURNING value", (per,))
        sql("INSERT INTO notifications (id, notif_id, platform, body, created_at, app, fallback) VALUES (?,?,?,?,?,?,?)",
            (nid, str(uuid.uuid4()), 1, body, now, "default", None))
        rows = []
        for k in range(per):
            rows.append([jid, nid, 1, 0, tokens[k], None, str(uuid.uuid4()), 0, 3, now, now, owner])
            pending.append(jid)
            jid += 1
        nid += 1
        if style == "json":
            sql(f"INSERT INTO jobs ({COLS}) SELECT " + ", ".join(f"value->>{i}" for i in range(12)) + " FROM json_each(?)", (json.dumps(rows),))
        else:
            sql(f"INSERT INTO jobs ({COLS}) VALUES " + ",".join([row] * len(rows)), [v for r in rows for v in r])
        if len(pending) > 2 * per:
            done, pending = pending[:per], pending[per:]
            ups = [[i, 1, 1, str(uuid.uuid4()) if provider else None, None, now] for i in done]
            if outcomes:
                sql("INSERT INTO outcomes VALUES " + ",".join(["(?,?,?,?,?,?)"] * len(ups)), [v for u in ups for v in u])
            elif style == "json":
                sql("UPDATE jobs SET state = v.value->>1, attempts = v.value->>2, provider_id = v.value->>3, "
                    "last_error = coalesce(v.value->>4, jobs.last_error), finished_at = v.value->>5, lease_owner = NULL "
                    "FROM json_each(?1) AS v WHERE jobs.id = v.value->>0 AND (?2 OR jobs.lease_owner = ?3)", (json.dumps(ups), 0, owner))
            else:
                sql("UPDATE jobs SET state = v.column2, attempts = v.column3, provider_id = v.column4, "
                    "last_error = coalesce(v.column5, jobs.last_error), finished_at = v.column6, lease_owner = NULL FROM (VALUES "
                    + ",".join(["(?,?,?,?,?,?)"] * len(ups)) + ") AS v WHERE jobs.id = v.column1 AND (? OR jobs.lease_owner = ?)",
                    [v for u in ups for v in u] + [0, owner])
        sql("COMMIT")
    return replay.close(n)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(f"SQLite {apsw.sqlite_lib_version()}; {n} jobs, 100 per transaction; SQLite CPU (statements only) per 100,000 jobs")
    for name, (edits, cache, style) in VARIANTS.items():
        cpu, wal = run(edits, cache, style, n)
        print(f"  {cpu:5.2f} s   WAL {wal / 1e6:4.0f} MB   {name}")
    print("Possible next steps, all with statements prepared once:")
    for name, kw in NEXT.items():
        cpu, wal = run({}, True, "values", n, **kw)
        print(f"  {cpu:5.2f} s   WAL {wal / 1e6:4.0f} MB   {name}")
    print("A job row written once:")
    for name, (cache, finished) in WRITTEN_ONCE.items():
        cpu, wal = run_written_once(cache, finished, n)
        print(f"  {cpu:5.2f} s   WAL {wal / 1e6:4.0f} MB   {name}")
