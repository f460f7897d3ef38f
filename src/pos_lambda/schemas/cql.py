"""CQL DDL for every view, assembled from the contract (src/pos_lambda/schemas/contract.py).

The receipt columns and the line-item UDT come from the contract, so a field added
there reaches the raw table here. Tables are keyed for the queries users run:
a store's day (raw receipts, aggregates), a Kafka coordinate (dead letters), an
alert id (alerts). Aggregates hold absolute values, never counters: a replayed
micro-batch rewrites the same rows with the same numbers.

Apply with `pos-infra schema` (or `make up`, which does it).
"""

from __future__ import annotations

from pos_lambda.schemas import contract

RAW_TABLE = "receipts_by_store_day"
AGG_SPEED_TABLE = "agg_15m_speed"
# Batch views (see batch_layer): each run writes its rows under a version key, then
# commits by one atomic write to BATCH_POINTER_TABLE; readers follow the pointer.
AGG_BATCH_TABLE = "agg_15m_batch"
RECEIPTS_BATCH_TABLE = "receipts_batch"
GAPS_BATCH_TABLE = "device_gaps_batch"
BATCH_POINTER_TABLE = "batch_views"
BATCH_RUNS_TABLE = "batch_runs"
BATCH_FIXES_TABLE = "batch_fixes"
# The partition of BATCH_POINTER_TABLE and BATCH_RUNS_TABLE (their `view_name`) the batch
# layer commits receipts_batch + agg_15m_batch under, together; serving reads it.
BATCH_VIEW_NAME = "batch"
DEAD_LETTERS_TABLE = "dead_letters"
ALERTS_TABLE = "alerts"
# One row per alerts processor id while an instance runs (src/pos_lambda/transactional/lease.py).
ALERTS_LEASES_TABLE = "alerts_leases"
SPEED_PROGRESS_TABLE = "speed_progress"
# `pos-speed run --jobs` names -> their streaming queries' names: the `query_name` each
# records its micro-batches under in SPEED_PROGRESS_TABLE (and its metrics' label).
SPEED_QUERY_OF_JOB = {"archiver": "pos-speed-archiver", "views": "pos-speed-views"}
# One row per natural key: the winning copy, wherever its happened_at puts it. The
# speed layer looks incoming copies up here (a direct join on the partition key),
# so a resend is found across windows, days and store partitions. Partitioned by
# device and a bucket of KEY_BUCKET_SIZE consecutive receipt numbers (a device numbers
# its receipts in sequence): a micro-batch reads and writes a few partitions per
# device, not one per receipt, and no partition grows without bound.
RECEIPT_KEYS_TABLE = "receipt_keys"
KEY_BUCKET_SIZE = 1000
# The batch layer's own natural-key index (the same columns, per generation): each run
# looks up only the keys of the records archived since the last commit (src/pos_lambda/batch_layer/
# fold.py). Its own table, not the speed layer's: final answers come from the master
# dataset alone.
RECEIPT_KEYS_BATCH_TABLE = "receipt_keys_batch"
# Conflicting copies, as each layer decided them: the speed layer's (`conflicts`, by the
# winner's store-day) and the batch layer's, versioned like its views
# (`conflicts_batch`: a generation's or a pinned run's own partitions), so that a
# reader sees the conflicts of the version it serves and no other (issue 62 case 5).
CONFLICTS_TABLE = "conflicts"
CONFLICTS_BATCH_TABLE = "conflicts_batch"
# The store registry (src/pos_lambda/stores): each store's name, IANA time zone and
# opening hours per weekday. Written by `pos-stores` and the simulator, read by serving
# to answer by local day. A handful of rows, one partition each.
STORES_TABLE = "stores"


def keyspace_ddl(keyspace: str, replication_factor: int) -> str:
    # NetworkTopologyStrategy, whose `replication_factor` applies to every data centre
    # (Cassandra 4.0+): what production uses, and a second data centre is an ALTER away.
    return (
        f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
        f"{{'class': 'NetworkTopologyStrategy', 'replication_factor': {replication_factor}}}"
    )


# What a receipt row holds beside its contract fields: derived totals, the content
# hash that tells resends from conflicts, and where the copy came from.
COPY_COLUMNS = [
    ("day", "date"),
    ("item_quantity", "bigint"),
    ("revenue", "decimal"),
    ("content_hash", "text"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp", "timestamp"),
]


# What receipt_keys does not keep of a receipt: its content (src/pos_lambda/views/winners.py reads
# the rest; a conflict's stored winner gets its content from the raw row).
INDEX_LEAVES_OUT = ("line_items", "item_quantity", "revenue")


def _columns(cols: list[tuple[str, str]]) -> str:
    return ",\n  ".join(f"{name} {cql_type}" for name, cql_type in cols)


def _aggregate_table(keyspace: str, name: str, extra: str = "") -> str:
    return f"""CREATE TABLE IF NOT EXISTS {keyspace}.{name} (
  operation_id {contract.cql_type_of("operation_id")},
  day date,
  window_start timestamp,
  receipt_count int,
  item_quantity bigint,
  revenue decimal,
  late_count int,{extra}
  PRIMARY KEY ((operation_id, day), window_start)
) WITH CLUSTERING ORDER BY (window_start ASC)"""


def _conflict_columns(receipt_cols: list[tuple[str, str]]) -> str:
    """A conflicting copy and its winner, side by side (both layers' conflicts tables)."""
    return ",\n  ".join(
        [
            _columns(receipt_cols),
            _columns(
                [(f"winner_{n}", t) for n, t in receipt_cols if n not in contract.NATURAL_KEY]
            ),
            "winner_day date",
            _columns(COPY_COLUMNS),
            _columns([(f"winner_{n}", t) for n, t in COPY_COLUMNS if n != "day"]),
            "differs list<text>",
        ]
    )


def _batch_tables(keyspace: str, receipt_cols: list[tuple[str, str]]) -> list[str]:
    """The batch layer's versioned views, their pointer, run bookkeeping and fixes."""
    return [
        # A version's rows live in their own partitions ((store, day, version)), so a
        # reader that follows the pointer reads exactly one committed version.
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{AGG_BATCH_TABLE} (
  operation_id {contract.cql_type_of("operation_id")},
  day date,
  version text,
  window_start timestamp,
  receipt_count int,
  item_quantity bigint,
  revenue decimal,
  late_count int,
  duplicates int,
  conflicts int,
  beyond_speed_bound int,
  PRIMARY KEY ((operation_id, day, version), window_start)
) WITH CLUSTERING ORDER BY (window_start ASC)""",
        # The batch layer's conflicts, versioned as its receipts are: a generation's
        # rows show when their `master_version` is at most the day's `delta_version`
        # (a fold's rows with its commit), a pinned run's never (nothing points to it).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{CONFLICTS_BATCH_TABLE} (
  version text,
  {_conflict_columns(receipt_cols)},
  master_version bigint,
  PRIMARY KEY ((operation_id, winner_day, version), vendor_fiscal_module, transaction_id,
               kafka_partition, kafka_offset)
)""",
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{RECEIPTS_BATCH_TABLE} (
  day date,
  version text,
  {_columns(receipt_cols)},
  item_quantity bigint,
  revenue decimal,
  content_hash text,
  kafka_partition int,
  kafka_offset bigint,
  kafka_timestamp timestamp,
  late boolean,
  beyond_bound boolean,
  master_version bigint,
  PRIMARY KEY ((operation_id, day, version), happened_at, vendor_fiscal_module,
               transaction_id)
)""",
        # Gaps in each device's receipt numbers (src/pos_lambda/views/gaps.py), versioned
        # with the aggregates: a day's rows under the version the pointer names for it.
        # A store-day that has receipts but no rows here under that version was committed
        # before this view existed: not yet backfilled (`pos-batch rebuild` backfills).
        # missing: ranges as '1041-1042' or '1041'; restarts: the first number of each
        # run after the first (a restarted or renumbered device, not a gap); revenue: the
        # receipts' sum (a till's day-close total is reconciled against it).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{GAPS_BATCH_TABLE} (
  operation_id {contract.cql_type_of("operation_id")},
  day date,
  version text,
  vendor_fiscal_module {contract.cql_type_of("vendor_fiscal_module")},
  first_number {contract.cql_type_of("transaction_id")},
  last_number {contract.cql_type_of("transaction_id")},
  receipt_count int,
  missing_count int,
  missing list<text>,
  restarts list<{contract.cql_type_of("transaction_id")}>,
  revenue decimal,
  PRIMARY KEY ((operation_id, day, version), vendor_fiscal_module)
)""",
        # The pointer: one partition per view, one row per day. A run commits all its
        # days in one single-partition logged batch, which Cassandra applies atomically
        # and in isolation: a reader sees all of a run's days or none. `horizon`
        # (static) is the end of event time up to which the batch views are final;
        # `commits` (static) counts the commits, which are conditional on it (a
        # lightweight transaction: two racing runs cannot interleave). `generation`
        # (static) names the receipts_batch partitions of every day and the index
        # rows; `folded_version` / `folded_table`: the master dataset's table version
        # (and table id) the committed views count every record of. A receipts_batch
        # row is served when its `master_version` (the table version that archived its
        # record) is at most its day's `delta_version`: each receipt is written once,
        # and a run's rows show only with the commit that counts them.
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{BATCH_POINTER_TABLE} (
  view_name text,
  horizon timestamp STATIC,
  commits bigint STATIC,
  generation text STATIC,
  folded_version bigint STATIC,
  folded_table text STATIC,
  day date,
  version text,
  covered_until timestamp,
  run_id timeuuid,
  delta_version bigint,
  receipt_count bigint,
  aggregate_rows bigint,
  committed_at timestamp,
  PRIMARY KEY (view_name, day)
)""",
        # One row per batch run. The quality_* columns (added after the first release:
        # `pos-infra schema` adds them to older keyspaces) hold the data-quality check of
        # `pos-batch run --quality`, so the DAG's `quality` task reads it without Spark;
        # quality_checked_at says the check ran (an empty list reads back as null).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{BATCH_RUNS_TABLE} (
  view_name text,
  run_id timeuuid,
  status text,
  interval_start timestamp,
  interval_end timestamp,
  lookback_hours double,
  recompute_start timestamp,
  version text,
  delta_version bigint,
  horizon timestamp,
  input_rows bigint,
  invalid_rows bigint,
  receipts bigint,
  duplicates_removed bigint,
  conflicts bigint,
  beyond_speed_bound bigint,
  aggregate_rows bigint,
  started_at timestamp,
  finished_at timestamp,
  error text,
  quality_checked_at timestamp,
  quality_windows bigint,
  quality_windows_fixed bigint,
  quality_missing_days list<text>,
  quality_error text,
  PRIMARY KEY (view_name, run_id)
) WITH CLUSTERING ORDER BY (run_id DESC)""",
        # What the batch fixed per store-window, compared with the speed view (written
        # by `pos-batch quality`, the DAG's data-quality task).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{BATCH_FIXES_TABLE} (
  operation_id {contract.cql_type_of("operation_id")},
  day date,
  window_start timestamp,
  version text,
  batch_receipts int,
  speed_receipts int,
  batch_revenue decimal,
  speed_revenue decimal,
  revenue_fixed decimal,
  receipts_fixed int,
  duplicates int,
  conflicts int,
  beyond_speed_bound int,
  checked_at timestamp,
  PRIMARY KEY ((operation_id, day), window_start)
)""",
    ]


# The last copy of a receipt that the speed layer absorbed as a resend (the same
# content as the winner's), on the receipt's receipt_keys row: what tells "received
# more than once" from "received once" for receipt status (src/pos_lambda/serving/
# receipt_status.py); the micro-batch's tally only counted resends. Columns of the
# index row, not a table of their own: the row is there already (a resend always has
# a stored winner), a write names only these cells (the winner's stay), and a replayed
# micro-batch writes the same values. Added after the first release: `pos-infra
# schema` adds them to older keyspaces; rows of resends absorbed before hold null.
RESEND_COLUMNS = (
    ("resent_kafka_partition", "int"),
    ("resent_kafka_offset", "bigint"),
    ("resent_kafka_timestamp", "timestamp"),
)
# The natural key a dead letter's value claims, read from its JSON where it parses that
# far (null otherwise: a value that is not JSON names no receipt). Receipt status looks
# dead letters up by natural key; they are keyed by Kafka coordinates. Why these columns
# and not the Kafka key: the key names a device, not a receipt (every receipt of a
# device shares it), and a receipt number narrows a lookup to a handful of rows. Added
# after the first release (rows written before hold null and are not found this way).
DEAD_LETTER_KEY_COLUMNS = (
    ("operation_id", contract.cql_type_of("operation_id")),
    ("vendor_fiscal_module", contract.cql_type_of("vendor_fiscal_module")),
    ("transaction_id", contract.cql_type_of("transaction_id")),
)

# Serving layer (src/pos_lambda/serving/views.py): Storage-Attached Indexes (Cassandra 5 SAI) on
# parts of the aggregates' composite partition keys, for the questions that cross
# stores. "Which stores sold on day D" reads the day's rows of every store through
# `day` (+ `version` for the committed batch version): its cost follows that day's
# rows, not the history, and no writer had to maintain a store registry. `operation_id`
# answers "does any view know this store" (404 otherwise). Index upkeep costs the
# aggregate writes a little (96 rows per store-day), not the per-receipt tables.
SERVING_INDEXES = (
    (AGG_SPEED_TABLE, "day"),
    (AGG_SPEED_TABLE, "operation_id"),
    (AGG_BATCH_TABLE, "day"),
    (AGG_BATCH_TABLE, "version"),
    (AGG_BATCH_TABLE, "operation_id"),
    # Receipt status: a receipt's dead letters by the natural key its value claims. All
    # three columns, so SAI intersects them: a request reads this store's and device's
    # rows only, never every device's that used the number (which a hostile producer
    # could make arbitrarily many). Index upkeep costs dead-letter writes only, a small
    # share of the input; the receipt tables pay nothing.
    (DEAD_LETTERS_TABLE, "transaction_id"),
    (DEAD_LETTERS_TABLE, "operation_id"),
    (DEAD_LETTERS_TABLE, "vendor_fiscal_module"),
)


def serving_index_ddl(keyspace: str) -> list[str]:
    return [
        f"CREATE INDEX IF NOT EXISTS {table}_by_{column} ON {keyspace}.{table} ({column}) "
        "USING 'sai'"
        for table, column in SERVING_INDEXES
    ]


def table_ddl(keyspace: str) -> list[str]:
    """CREATE statements (idempotent) for the UDT and every table, in dependency order."""
    udt_name, udt_fields = contract.cql_line_item_type()
    receipt_cols = contract.cql_receipt_columns()
    return [
        f"CREATE TYPE IF NOT EXISTS {keyspace}.{udt_name} ({_columns(udt_fields)})",
        # Raw receipts, one row per natural key, time-sorted within a store-day.
        # happened_at leads the clustering key for time order; the natural key
        # follows, so two receipts in the same second of one store never collide
        # (the field's original ((year_day, operation_id), happened_at) key did).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{RAW_TABLE} (
  day date,
  {_columns(receipt_cols)},
  item_quantity bigint,
  revenue decimal,
  kafka_partition int,
  kafka_offset bigint,
  kafka_timestamp timestamp,
  late boolean,
  PRIMARY KEY ((operation_id, day), happened_at, vendor_fiscal_module, transaction_id)
)""",
        # The speed layer's natural-key index: what its winner rule reads of a stored
        # winner, not the receipt's content (line items, totals: the raw row has them),
        # and the last resend it absorbed (RESEND_COLUMNS).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{RECEIPT_KEYS_TABLE} (
  {_columns([c for c in receipt_cols if c[0] not in INDEX_LEAVES_OUT])},
  {_columns([c for c in COPY_COLUMNS if c[0] not in INDEX_LEAVES_OUT])},
  late boolean,
  beyond_bound boolean,
  key_bucket bigint,
  {_columns(list(RESEND_COLUMNS))},
  PRIMARY KEY ((operation_id, vendor_fiscal_module, key_bucket), transaction_id)
)""",
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{RECEIPT_KEYS_BATCH_TABLE} (
  generation text,
  {_columns([c for c in receipt_cols if c[0] not in INDEX_LEAVES_OUT])},
  {_columns([c for c in COPY_COLUMNS if c[0] not in INDEX_LEAVES_OUT])},
  late boolean,
  beyond_bound boolean,
  key_bucket bigint,
  PRIMARY KEY ((generation, operation_id, vendor_fiscal_module, key_bucket), transaction_id)
)""",
        # Copies that differ from their receipt's winner, both versions side by side,
        # by the winner's store-day (the serving layer's question) and the copy's
        # Kafka coordinates (a replay rewrites the same row). The speed layer's.
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{CONFLICTS_TABLE} (
  {_conflict_columns(receipt_cols)},
  PRIMARY KEY ((operation_id, winner_day), vendor_fiscal_module, transaction_id,
               kafka_partition, kafka_offset)
)""",
        # applied_offsets: per Kafka partition, the highest offset the row counts, so
        # that a replayed micro-batch adds nothing twice (src/pos_lambda/views/increments.py).
        _aggregate_table(keyspace, AGG_SPEED_TABLE, "\n  applied_offsets map<int, bigint>,"),
        *_batch_tables(keyspace, receipt_cols),
        # Keyed by Kafka coordinates: a replayed micro-batch rewrites the same row.
        # DEAD_LETTER_KEY_COLUMNS: the natural key the value claims, where it says one.
        # raw_value: the value's first bytes only (src/pos_lambda/views/records.py
        # DEAD_LETTER_PREFIX_BYTES); value_length and value_sha256 are the whole
        # value's, which the master dataset keeps. Rows written before these two
        # columns existed hold the whole value in raw_value and null in both.
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{DEAD_LETTERS_TABLE} (
  kafka_topic text,
  kafka_partition int,
  kafka_offset bigint,
  kafka_timestamp timestamp,
  kafka_key blob,
  raw_value blob,
  value_length int,
  value_sha256 text,
  reason text,
  detail text,
  {_columns(list(DEAD_LETTER_KEY_COLUMNS))},
  PRIMARY KEY ((kafka_topic, kafka_partition), kafka_offset)
)""",
        # One row per alert id (alerts/sink.py): a replayed alert rewrites its own row.
        # The triggering receipt's key and coordinates, the rule's details, and the
        # alert exactly as it was produced to Kafka (payload).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{ALERTS_TABLE} (
  alert_id text PRIMARY KEY,
  rule text,
  {_columns([(k, contract.cql_type_of(k)) for k in contract.NATURAL_KEY])},
  happened_at timestamp,
  detail map<text, text>,
  source_partition int,
  source_offset bigint,
  payload text
)""",
        # Who runs each alerts processor id now (transactional/lease.py): written with a TTL and
        # renewed by the holder's heartbeat, so a dead holder's row expires.
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{ALERTS_LEASES_TABLE} (
  transactional_id text PRIMARY KEY,
  owner text,
  host text,
  pid int,
  beats bigint,
  renewed_at timestamp
)""",
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{SPEED_PROGRESS_TABLE} (
  query_name text,
  batch_id bigint,
  finished_at timestamp,
  input_rows bigint,
  input_rows_per_second double,
  processed_rows_per_second double,
  duration_ms bigint,
  kafka_lag bigint,
  valid_rows bigint,
  invalid_rows bigint,
  resends_absorbed bigint,
  conflicts bigint,
  late_receipts bigint,
  beyond_lateness_bound bigint,
  PRIMARY KEY (query_name, batch_id)
) WITH CLUSTERING ORDER BY (batch_id DESC)""",
        # opening_hours: weekday (mon..sun) -> "HH:MM-HH:MM" local, or "closed"
        # (src/pos_lambda/stores/model.py validates both ways).
        f"""CREATE TABLE IF NOT EXISTS {keyspace}.{STORES_TABLE} (
  operation_id {contract.cql_type_of("operation_id")} PRIMARY KEY,
  name text,
  time_zone text,
  opening_hours map<text, text>,
  updated_at timestamp
)""",
        *serving_index_ddl(keyspace),
    ]


def ddl(keyspace: str, replication_factor: int = 1) -> list[str]:
    return [keyspace_ddl(keyspace, replication_factor), *table_ddl(keyspace)]
