/** Versioned schema migrations. Append only: a released migration is never edited. */

export interface Migration {
  version: number;
  name: string;
  statements: string[];
}

export const MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: 'initial schema',
    statements: [
      `CREATE TABLE nodes (
        id VARCHAR(64) PRIMARY KEY,
        state VARCHAR(16) NOT NULL DEFAULT 'ready',
        inventory JSON NOT NULL,
        last_seen DATETIME(3) NULL,
        registered_at DATETIME(3) NOT NULL
      )`,
      `CREATE TABLE models (
        name VARCHAR(128) PRIMARY KEY,
        source VARCHAR(1024) NOT NULL,
        desired_replicas INT NOT NULL,
        spec JSON NOT NULL,
        updated_at DATETIME(3) NOT NULL
      )`,
      `CREATE TABLE replicas (
        id VARCHAR(160) PRIMARY KEY,
        model VARCHAR(128) NOT NULL,
        profile VARCHAR(128) NOT NULL,
        state VARCHAR(16) NOT NULL,
        reason TEXT NULL,
        endpoint VARCHAR(256) NULL,
        updated_at DATETIME(3) NOT NULL,
        KEY replicas_model (model)
      )`,
      `CREATE TABLE shards (
        replica_id VARCHAR(160) NOT NULL,
        \`rank\` INT NOT NULL,
        node_id VARCHAR(64) NOT NULL,
        port INT NOT NULL,
        gpus INT NOT NULL,
        PRIMARY KEY (replica_id, \`rank\`),
        KEY shards_node (node_id)
      )`,
      `CREATE TABLE port_leases (
        host VARCHAR(128) NOT NULL,
        port INT NOT NULL,
        replica_id VARCHAR(160) NOT NULL,
        PRIMARY KEY (host, port),
        KEY port_leases_replica (replica_id)
      )`,
      `CREATE TABLE events (
        id BIGINT AUTO_INCREMENT PRIMARY KEY,
        at DATETIME(3) NOT NULL,
        kind VARCHAR(64) NOT NULL,
        node_id VARCHAR(64) NULL,
        model VARCHAR(128) NULL,
        replica_id VARCHAR(160) NULL,
        message TEXT NOT NULL,
        KEY events_node (node_id),
        KEY events_replica (replica_id)
      )`,
    ],
  },
  {
    version: 2,
    name: 'certificates',
    statements: [
      // Every certificate the CA issued; the CRL is built from the revoked rows.
      `CREATE TABLE certificates (
        serial VARCHAR(40) PRIMARY KEY,
        cn VARCHAR(255) NOT NULL,
        role VARCHAR(16) NOT NULL,
        not_before DATETIME(3) NOT NULL,
        not_after DATETIME(3) NOT NULL,
        revoked_at DATETIME(3) NULL,
        revoked_reason VARCHAR(255) NULL,
        issued_at DATETIME(3) NOT NULL,
        pem TEXT NOT NULL,
        KEY certificates_cn (cn)
      )`,
    ],
  },
  {
    version: 3,
    name: 'port lease history',
    statements: [
      // A released lease stays as a row with released_at set, so the next lease on that host takes the port
      // released longest ago (or never leased): a port is not handed to a new engine seconds after its last
      // one left, while a stale route or a lingering engine may still point at it.
      `ALTER TABLE port_leases MODIFY replica_id VARCHAR(160) NULL, ADD COLUMN released_at DATETIME(3) NULL`,
    ],
  },
  {
    version: 4,
    name: 'cordon apart from liveness',
    statements: [
      // A cordon is the operator's; down is the sweeper's. Kept apart, a cordoned node that goes down and comes
      // back is still cordoned (state stays the one column everything reads: down, else cordoned, else ready).
      `ALTER TABLE nodes ADD COLUMN cordoned TINYINT(1) NOT NULL DEFAULT 0`,
      `UPDATE nodes SET cordoned = 1 WHERE state = 'cordoned'`,
    ],
  },
  {
    version: 5,
    name: 'ssh host keys',
    statements: [
      // What onboarding learned of each node's ssh host keys, the accept-new way: a node is known by these and
      // refused when it presents any other. By node id, not address: the id is the machine (its hostname, its
      // certificate's CN); llmgw ctl forget-host-key NODE deletes a node's rows when it was rebuilt on purpose.
      `CREATE TABLE host_keys (
        node_id VARCHAR(64) NOT NULL,
        fingerprint VARCHAR(80) NOT NULL,
        key_type VARCHAR(64) NOT NULL,
        public_key TEXT NOT NULL,
        address VARCHAR(255) NOT NULL,
        learned_at DATETIME(3) NOT NULL,
        PRIMARY KEY (node_id, fingerprint)
      )`,
    ],
  },
  {
    version: 6,
    name: 'weights copies',
    statements: [
      // Which node holds which whole file of its weights cache, so a node fetches from a peer before the origin.
      // A hint, not the truth (that is each node's disk): rows are written only after a file is in place, and an
      // agent replaces all of its rows each time it starts, so a wiped cache is forgotten; a stale row costs one
      // failed peer attempt and the fetch goes on to the next peer or the origin.
      `CREATE TABLE weight_copies (
        node_id VARCHAR(64) NOT NULL,
        weight_key VARCHAR(80) NOT NULL,
        url VARCHAR(2048) NOT NULL,
        size BIGINT NOT NULL,
        sha256 CHAR(64) NOT NULL,
        verified TINYINT(1) NOT NULL,
        endpoint VARCHAR(256) NOT NULL,
        stored_at DATETIME(3) NOT NULL,
        reported_at DATETIME(3) NOT NULL,
        PRIMARY KEY (node_id, weight_key),
        KEY weight_copies_key (weight_key)
      )`,
    ],
  },
  {
    version: 7,
    name: 'engines on nodes',
    statements: [
      // Each engine's install and probe result on the node (ctl nodes' ENGINES column), and the hash of the
      // server.yaml engines + catalog it was checked against: a control plane started with other engines re-runs it.
      `ALTER TABLE nodes ADD COLUMN engine_status JSON NULL`,
      `ALTER TABLE nodes ADD COLUMN engines_config CHAR(16) NULL`,
    ],
  },
  {
    version: 8,
    name: 'temporal door task tokens',
    statements: [
      // Which activity task token (its SHA-256, never the token) the Temporal door handed to which node, so a
      // restarted control plane, or another one, still lets a running shard heartbeat and answer its task.
      `CREATE TABLE door_task_tokens (
        cn VARCHAR(64) NOT NULL,
        digest CHAR(43) NOT NULL,
        handed_at DATETIME(3) NOT NULL,
        PRIMARY KEY (cn, digest),
        KEY door_task_tokens_handed (handed_at)
      )`,
    ],
  },
  {
    version: 9,
    name: 'gateway in-flight reports',
    statements: [
      // Each gateway process's report, one row it rewrites about every second: the replicas its routing table
      // holds and its requests in flight per replica. A stopping replica waits until no live gateway (row newer
      // than a few seconds) routes it or has a request on it. JSON, so a report is one statement.
      `CREATE TABLE gateway_inflight (
        gateway_id VARCHAR(160) PRIMARY KEY,
        routed JSON NOT NULL,
        inflight JSON NOT NULL,
        started_at DATETIME(3) NOT NULL,
        updated_at DATETIME(3) NOT NULL,
        KEY gateway_inflight_updated (updated_at)
      )`,
    ],
  },
  {
    version: 10,
    name: 'shard GPU indices',
    statements: [
      // Which GPUs of its node each shard holds (a JSON array of nvidia-smi indices): placement gives disjoint
      // ones, and the engine is launched with them as CUDA_VISIBLE_DEVICES. NULL on rows placed before: those count
      // as holding their node's lowest indices not held by another shard (an engine launched without
      // CUDA_VISIBLE_DEVICES starts on GPU 0 and up).
      `ALTER TABLE shards ADD COLUMN gpu_indices JSON NULL`,
    ],
  },
  {
    version: 11,
    name: 'engine probe time',
    statements: [
      // When the node's engine install and probe was last recorded: onboarding waits for one newer than the
      // agent it started, and fails with an engine's own error when one failed.
      `ALTER TABLE nodes ADD COLUMN engines_checked_at DATETIME(3) NULL`,
    ],
  },
  {
    version: 12,
    name: 'cluster page keys and sessions',
    statements: [
      // Operator keys for the cluster page (llmgw ctl page-key create NAME): only the SHA-256 of the key is kept;
      // the key itself is shown once. A revoked key signs nobody in and its sessions end.
      `CREATE TABLE page_keys (
        name VARCHAR(64) PRIMARY KEY,
        digest CHAR(64) NOT NULL,
        created_at DATETIME(3) NOT NULL,
        revoked_at DATETIME(3) NULL,
        UNIQUE KEY page_keys_digest (digest)
      )`,
      // A signed-in browser: the SHA-256 of its session cookie, who it is (a key's name or an operator
      // certificate's CN), the CSRF token its actions must carry, and when it ends. In MySQL so that every
      // control plane copy, and a restarted one, knows it.
      `CREATE TABLE page_sessions (
        digest CHAR(64) PRIMARY KEY,
        operator VARCHAR(80) NOT NULL,
        key_name VARCHAR(64) NULL,
        csrf CHAR(43) NOT NULL,
        created_at DATETIME(3) NOT NULL,
        expires_at DATETIME(3) NOT NULL,
        KEY page_sessions_expires (expires_at)
      )`,
    ],
  },
  {
    version: 13,
    name: 'inference api keys, quota windows, usage',
    statements: [
      // Inference keys: the SHA-256 of the key (never the key), its scope and quotas. Rows are never deleted (usage
      // names them); a revoked key keeps its row with revoked_at set. Every change bumps updated_at, which is what
      // gateways poll to keep their in-memory copy current (revocation reaches every gateway within a second).
      `CREATE TABLE api_keys (
        id INT AUTO_INCREMENT PRIMARY KEY,
        name VARCHAR(64) NOT NULL,
        digest CHAR(64) NOT NULL,
        prefix VARCHAR(16) NOT NULL,
        models JSON NULL,
        rpm INT NULL,
        tpm INT NULL,
        expires_at DATETIME(3) NULL,
        created_at DATETIME(3) NOT NULL,
        revoked_at DATETIME(3) NULL,
        updated_at DATETIME(3) NOT NULL,
        UNIQUE KEY api_keys_name (name),
        UNIQUE KEY api_keys_digest (digest),
        KEY api_keys_updated (updated_at)
      )`,
      // What all gateways together have leased of each key's budget for one minute (minute = epoch ms / 60000):
      // a gateway takes a slice with one conditional UPDATE, so the sum of slices never passes the limit.
      `CREATE TABLE key_quota (
        key_id INT NOT NULL,
        minute INT NOT NULL,
        requests INT NOT NULL DEFAULT 0,
        tokens BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (key_id, minute)
      )`,
      // Usage per key, model and hour (what the engines reported), flushed by each gateway in batches.
      `CREATE TABLE key_usage (
        key_id INT NOT NULL,
        model VARCHAR(128) NOT NULL,
        hour DATETIME NOT NULL,
        requests BIGINT NOT NULL DEFAULT 0,
        refused BIGINT NOT NULL DEFAULT 0,
        prompt_tokens BIGINT NOT NULL DEFAULT 0,
        completion_tokens BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (key_id, hour, model)
      )`,
    ],
  },
  {
    version: 14,
    name: 'model minute stats',
    statements: [
      // Each gateway's counts per model per UTC minute, for the cluster page's requests/s and TTFT graphs: the
      // gateway rewrites its own row with cumulative counts (a retried write never counts twice) and deletes rows
      // older than two hours. ttft_le_N counts TTFTs in (previous bound, N] ms (lib/stats/ttft.ts), ttft_inf above 10 s.
      `CREATE TABLE model_minute_stats (
        minute DATETIME NOT NULL,
        model VARCHAR(128) NOT NULL,
        gateway_id VARCHAR(160) NOT NULL,
        requests INT UNSIGNED NOT NULL,
        errors_5xx INT UNSIGNED NOT NULL,
        errors_4xx INT UNSIGNED NOT NULL,
        ttft_le_10 INT UNSIGNED NOT NULL,
        ttft_le_25 INT UNSIGNED NOT NULL,
        ttft_le_50 INT UNSIGNED NOT NULL,
        ttft_le_100 INT UNSIGNED NOT NULL,
        ttft_le_250 INT UNSIGNED NOT NULL,
        ttft_le_500 INT UNSIGNED NOT NULL,
        ttft_le_1000 INT UNSIGNED NOT NULL,
        ttft_le_2500 INT UNSIGNED NOT NULL,
        ttft_le_5000 INT UNSIGNED NOT NULL,
        ttft_le_10000 INT UNSIGNED NOT NULL,
        ttft_inf INT UNSIGNED NOT NULL,
        updated_at DATETIME(3) NOT NULL,
        PRIMARY KEY (minute, model, gateway_id)
      )`,
    ],
  },
  {
    version: 15,
    name: 'route changes',
    statements: [
      // One row per change of what the gateways route (a replica's state or endpoint; a model's routing fields),
      // written in the same transaction as the change. Control planes tail it by id and push each change to the
      // gateways subscribed to them, so a change made through any control plane reaches every gateway
      // (docs/architecture.md, "Routes pushed"). replica_id NULL: a model change. Rows older than an hour go.
      `CREATE TABLE route_changes (
        id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
        at DATETIME(3) NOT NULL,
        replica_id VARCHAR(160) NULL,
        model VARCHAR(128) NOT NULL,
        KEY route_changes_at (at)
      )`,
    ],
  },
];
