/** Loads server.yaml once at the edge into a frozen ServerConfig; every problem names file, key path and fix. */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { isNode, LineCounter, parseDocument, type Document, type YAMLError } from 'yaml';
import { LlmgwError } from '../lib/errors';
import {
  ENGINES,
  ROUTING_POLICIES,
  type EngineName,
  type ModelRouting,
  type ModelSpec,
  type Profile,
} from '../lib/types';
import { DEFAULT_CONFIG } from './defaults';
import {
  METRICS_ROLES,
  type Listener,
  type MetricsListener,
  type MetricsRole,
  type MysqlTls,
  type ServerConfig,
} from './types';
import { Checker, isObj, quote, suggest, type Obj, type RawIssue, type Rule, type Seg } from './check';
import { classifySource, SHA256_RE } from '../lib/weights/classify';

/** One problem in a config file; `line`/`col` are set when the key is in the file. */
export interface ConfigIssue {
  keyPath: string;
  problem: string;
  fix: string;
  line?: number;
  col?: number;
}

/** Every problem found in one config file; fields describe the first, `issues` holds them all. */
export class ConfigError extends LlmgwError {
  override readonly code = 'LLMGW_CONFIG_INVALID' as const;
  readonly file: string;
  readonly keyPath: string;
  readonly problem: string;
  readonly fix: string;
  readonly issues: readonly ConfigIssue[];
  constructor(file: string, issues: readonly ConfigIssue[]) {
    super('LLMGW_CONFIG_INVALID', issues.map((i) => formatIssue(file, i)).join('\n'), { file, issues });
    const first = issues[0] ?? { keyPath: '', problem: 'invalid', fix: 'check the file' };
    this.file = file;
    this.keyPath = first.keyPath;
    this.problem = first.problem;
    this.fix = first.fix;
    this.issues = issues;
  }
}

/** `file:line:col: key.path: problem; fix`, one issue per line. */
function formatIssue(file: string, i: ConfigIssue): string {
  const pos = i.line === undefined ? '' : `:${i.line}:${i.col ?? 1}`;
  return `${file}${pos}: ${i.keyPath ? `${i.keyPath}: ` : ''}${i.problem}; ${i.fix}`;
}

/** Reads and parses `file`; with no file, returns the embedded defaults (validated and frozen). */
export function loadServerConfig(file?: string): ServerConfig {
  if (file === undefined) return parseServerConfig('', '<defaults>');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new ConfigError(file, [
      {
        keyPath: '',
        problem: `cannot be read (${reason})`,
        fix: 'check the path, or give no config file to use the built-in local-cluster defaults',
      },
    ]);
  }
  return parseServerConfig(text, file);
}

/** Parses server.yaml text merged over DEFAULT_CONFIG; `file` is only used in messages. */
export function parseServerConfig(text: string, file: string): ServerConfig {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) throw new ConfigError(file, doc.errors.map(syntaxIssue));
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    throw new ConfigError(file, [
      { keyPath: '', problem: (err as Error).message, fix: 'expand the YAML aliases into plain values' },
    ]);
  }
  const c = new Checker();
  const config = checkConfig(c, merge(DEFAULT_CONFIG, raw ?? {}, []));
  if (c.issues.length > 0)
    throw new ConfigError(
      file,
      c.issues.map((i) => locate(doc, lines, i)),
    );
  const frozen = deepFreeze(config);
  const given = isObj(raw) ? raw : {};
  DEFAULTED.set(frozen, {
    file,
    sections: (Object.keys(DEFAULT_CONFIG) as (keyof ServerConfig)[]).filter((k) => given[k] === undefined),
  });
  return frozen;
}

/** The top-level sections each loaded config took from the built-in defaults, and its file. */
const DEFAULTED = new WeakMap<ServerConfig, { file: string; sections: (keyof ServerConfig)[] }>();

/**
 * Where a loaded config took `section` from the built-in defaults (no such section in its file, or no file at all):
 * the file it was read from, or null when the file set the section (or the config was not loaded by this module).
 */
export function defaultedIn(config: ServerConfig, section: keyof ServerConfig): string | null {
  const d = DEFAULTED.get(config);
  return d?.sections.includes(section) ? d.file : null;
}

function syntaxIssue(err: YAMLError): ConfigIssue {
  const problem = (err.message.split('\n')[0] ?? err.code).replace(/ at line \d+, column \d+:?$/, '');
  const fix =
    err.code === 'DUPLICATE_KEY'
      ? 'keep only one entry with this key'
      : err.code === 'TAB_AS_INDENT'
        ? 'indent with spaces; YAML does not allow tabs'
        : 'fix the YAML at this position: indent with spaces and quote values that contain ": " or " #"';
  const pos = err.linePos?.[0];
  return { keyPath: '', problem: `YAML syntax error: ${problem}`, fix, line: pos?.line, col: pos?.col };
}

/** Points an issue at the nearest enclosing key the file spells out; otherwise says the value is a default. */
function locate(doc: Document, lines: LineCounter, i: RawIssue): ConfigIssue {
  const issue: ConfigIssue = { keyPath: keyPath(i.path), problem: i.problem, fix: i.fix };
  for (let n = i.path.length; n > 0; n--) {
    const node: unknown = doc.getIn(i.path.slice(0, n), true);
    if (isNode(node) && node.range) return { ...issue, ...lines.linePos(node.range[0]) };
  }
  const top = i.path[0];
  if (typeof top === 'string') issue.problem += ` (the built-in default ${top}, as the file sets none)`;
  return issue;
}

function keyPath(path: readonly Seg[]): string {
  return path.map((s, n) => (typeof s === 'number' ? `[${s}]` : n === 0 ? s : `.${s}`)).join('');
}

/**
 * Sections (temporal, listeners.gateway, ...) merge key by key, so a file may change one value.
 * Lists and the engines map replace the default whole: a file that lists its engines or models
 * means exactly those, not those plus the sim defaults.
 */
function merge(base: unknown, over: unknown, path: Seg[]): unknown {
  if (over === undefined) return base;
  if (!isObj(base) || !isObj(over) || keyPath(path) === 'engines') return over;
  const out: Obj = { ...base };
  // defineProperty, not assignment: a "__proto__" key in the file must stay a key (and be reported).
  for (const [k, v] of Object.entries(over))
    Object.defineProperty(out, k, {
      value: merge(base[k], v, [...path, k]),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  return out;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const VERSION_RE = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/;
const HOST_PORT_RE = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?):(\d{1,5})$/;
const ENGINE_LIST = ENGINES.join(', ');

const nameRule: Rule = (s) =>
  NAME_RE.test(s)
    ? undefined
    : [
        `${quote(s)} is not a valid name`,
        "use letters, digits, '.', '_' and '-', starting with a letter or digit (clients send it as the model name)",
      ];

const hostPortRule: Rule = (s) => {
  const m = HOST_PORT_RE.exec(s);
  if (m && Number(m[3]) >= 1 && Number(m[3]) <= 65535) return undefined;
  const why = s.includes('://') ? 'has a URL scheme' : 'is not host:port';
  return [`${quote(s)} ${why}`, 'write it as host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233'];
};

const httpUrlRule: Rule = (s) => {
  const url = URL.canParse(s) ? new URL(s) : undefined;
  if (url && (url.protocol === 'http:' || url.protocol === 'https:')) return undefined;
  return [`${quote(s)} is not an http(s) URL`, 'give the Temporal UI base URL, e.g. http://127.0.0.1:8233'];
};

const mysqlUrlRule: Rule = (s) => {
  const shown = quote(s.replace(/\/\/([^:@/]*):[^@]*@/, '//$1:***@')); // never echo a password
  const url = URL.canParse(s) ? new URL(s) : undefined;
  const fix = 'write it as mysql://user:password@host:3306/database, e.g. mysql://root@127.0.0.1:3306/llmgw';
  if (!url || url.protocol !== 'mysql:' || url.hostname === '')
    return [`${shown} is not a mysql:// URL with a host`, fix];
  if (!/^\/[^/]+$/.test(url.pathname)) return [`${shown} names no database`, fix];
  return undefined;
};

const wordRule: Rule = (s) =>
  /\s|:\/\//.test(s)
    ? [`${quote(s)} contains whitespace or a URL scheme`, 'give a bare name or address, e.g. 127.0.0.1']
    : undefined;

/** A stopping replica's wait for its requests in flight is one activity run: a day at most (proxies.ts gives it 25 h). */
const MAX_GRACE_S = 86_400;
const GRACE_EXAMPLE = '600 (10 minutes: longer than the longest stream clients run)';

const controlPlaneUrlRule: Rule = (s) =>
  /^https:\/\/[^/\s?#]+\/?$/.test(s)
    ? undefined
    : [`${quote(s)} is not a control plane's URL`, 'give https://HOST:PORT, e.g. https://cp.example.net:7443'];

const TLS_KEYS = ['ca', 'serverCert', 'serverKey', 'clientCert', 'clientKey', 'gatewayCert', 'gatewayKey'] as const;

const pathRule: Rule = (s) =>
  /^\s|\s$|:\/\//.test(s)
    ? [
        `${quote(s)} is not a file path`,
        'give the path of a PEM file, e.g. .llmgw/ca/ca.crt (no URL, no surrounding spaces)',
      ]
    : undefined;

function checkConfig(c: Checker, raw: unknown): ServerConfig {
  const root = c.obj(
    raw,
    [],
    [
      'temporal',
      'mysql',
      'listeners',
      'metrics',
      'tls',
      'engines',
      'enginePorts',
      'gateway',
      'drain',
      'catalog',
      'proxmox',
    ],
  );
  const t = c.sub(root, ['temporal'], ['address', 'namespace', 'uiUrl', 'tls', 'apiKeyFile']);
  const m = c.sub(root, ['mysql'], ['url', 'autoMigrate', 'tls']);
  const l = c.sub(root, ['listeners'], ['controlPlane', 'gateway', 'temporalDoor']);
  const p = c.sub(root, ['enginePorts'], ['base', 'count']);
  const g = c.sub(
    root,
    ['gateway'],
    ['apiKeys', 'refreshMs', 'controlPlanes', 'timeouts', 'accessLog', 'corsOrigins', 'admission'],
  );
  const d = c.sub(root, ['drain'], ['graceS']);
  const tls = c.sub(root, ['tls'], TLS_KEYS);
  const engines = checkEngines(c, root?.engines);
  const config: ServerConfig = {
    temporal: {
      address: c.str(t, ['temporal', 'address'], '127.0.0.1:7233', hostPortRule),
      namespace: c.str(t, ['temporal', 'namespace'], 'default', wordRule),
      uiUrl: c.str(t, ['temporal', 'uiUrl'], 'http://127.0.0.1:8233', httpUrlRule).replace(/\/+$/, ''),
      ...checkTemporalCredentials(c, t),
    },
    mysql: {
      url: c.str(m, ['mysql', 'url'], 'mysql://root@127.0.0.1:3306/llmgw', mysqlUrlRule),
      autoMigrate: m?.autoMigrate === undefined ? true : c.bool(m, ['mysql', 'autoMigrate']),
      tls: checkMysqlTls(c, m?.tls),
    },
    listeners: {
      controlPlane: checkListener(c, l, 'controlPlane', 7443),
      gateway: checkListener(c, l, 'gateway', 8080),
      temporalDoor: checkListener(c, l, 'temporalDoor', 7444),
    },
    metrics: checkMetricsListeners(c, root),
    tls: {
      ca: c.str(tls, ['tls', 'ca'], '.llmgw/ca/ca.crt', pathRule),
      serverCert: c.str(tls, ['tls', 'serverCert'], '/etc/llmgw/control-plane/server.crt', pathRule),
      serverKey: c.str(tls, ['tls', 'serverKey'], '/etc/llmgw/control-plane/server.key', pathRule),
      clientCert: c.str(tls, ['tls', 'clientCert'], '.llmgw/certs/operator/operator.crt', pathRule),
      clientKey: c.str(tls, ['tls', 'clientKey'], '.llmgw/certs/operator/operator.key', pathRule),
      gatewayCert: c.str(tls, ['tls', 'gatewayCert'], '.llmgw/certs/gateway/gateway.crt', pathRule),
      gatewayKey: c.str(tls, ['tls', 'gatewayKey'], '.llmgw/certs/gateway/gateway.key', pathRule),
    },
    engines: engines ?? {},
    enginePorts: checkEnginePorts(c, p),
    gateway: {
      apiKeys: c.strList(g, ['gateway', 'apiKeys'], 'an API key', (s) =>
        /\s/.test(s)
          ? ['an API key contains whitespace', 'use a key without spaces; it is sent as "Authorization: Bearer <key>"']
          : undefined,
      ),
      refreshMs: c.int(g, ['gateway', 'refreshMs'], 50, 60000, '500 (how stale the routing table may get)'),
      controlPlanes: c.strList(g, ['gateway', 'controlPlanes'], 'https://cp.example.net:7443', controlPlaneUrlRule),
      timeouts: checkTimeouts(c, g),
      accessLog: c.bool(g, ['gateway', 'accessLog']),
      corsOrigins: c.strList(g, ['gateway', 'corsOrigins'], 'an origin such as https://app.example.net', originRule),
      admission: checkAdmission(c, g),
    },
    drain: { graceS: c.int(d, ['drain', 'graceS'], 0, MAX_GRACE_S, GRACE_EXAMPLE) },
    catalog: checkCatalog(c, root?.catalog, engines),
    proxmox: checkProxmox(c, root?.proxmox),
  };
  // Cross-key checks only on otherwise valid values, so they never report on placeholders.
  if (c.issues.length === 0) checkPortClashes(c, config);
  return config;
}

const TEMPORAL_TLS_KEYS = ['ca', 'clientCert', 'clientKey', 'serverName'] as const;

/**
 * temporal.tls and temporal.apiKeyFile: paths only (the files are read, and the certificate checked, when a role
 * connects: lib/temporal-connect.ts). An API key never travels in clear, so it needs tls.
 */
function checkTemporalCredentials(
  c: Checker,
  t: Obj | undefined,
): Pick<ServerConfig['temporal'], 'tls' | 'apiKeyFile'> {
  const at = (k: string): Seg[] => ['temporal', 'tls', k];
  const rawTls = t?.tls;
  let tls: ServerConfig['temporal']['tls'] = null;
  if (rawTls !== undefined && rawTls !== null) {
    const o = c.obj(rawTls, ['temporal', 'tls'], TEMPORAL_TLS_KEYS);
    const opt = (k: string, example: string, rule: Rule): string | null =>
      o?.[k] === undefined || o[k] === null ? null : c.str(o, at(k), example, rule);
    tls = {
      ca: opt('ca', '/etc/llmgw/temporal/ca.crt', pathRule),
      clientCert: opt('clientCert', '/etc/llmgw/temporal/client.crt', pathRule),
      clientKey: opt('clientKey', '/etc/llmgw/temporal/client.key', pathRule),
      serverName: opt('serverName', 'temporal.example.net', wordRule),
    };
    if ((tls.clientCert === null) !== (tls.clientKey === null))
      c.add(
        at(tls.clientCert === null ? 'clientCert' : 'clientKey'),
        'is missing while temporal.tls.' + (tls.clientCert === null ? 'clientKey' : 'clientCert') + ' is set',
        'give both the client certificate and its key (mutual TLS), or neither',
      );
  }
  const apiKeyFile =
    t?.apiKeyFile === undefined || t.apiKeyFile === null
      ? null
      : c.str(t, ['temporal', 'apiKeyFile'], '/etc/llmgw/temporal/api-key (a file holding the key)', pathRule);
  if (apiKeyFile !== null && tls === null && t)
    c.add(
      ['temporal', 'apiKeyFile'],
      'an API key is set but temporal.tls is not: the key would travel in clear',
      'add temporal.tls (tls: {} trusts the system CAs, as Temporal Cloud needs; or give tls.ca)',
    );
  return { tls, apiKeyFile };
}

/** mysql.tls: null or absent (no TLS), or { ca, cert?, key?, serverName? } with cert and key given together. */
function checkMysqlTls(c: Checker, raw: unknown): MysqlTls | null {
  if (raw === undefined || raw === null) return null;
  const at = (k: string): Seg[] => ['mysql', 'tls', k];
  const o = c.obj(raw, ['mysql', 'tls'], ['ca', 'cert', 'key', 'serverName']);
  const tls: MysqlTls = { ca: c.str(o, at('ca'), '/etc/llmgw/mysql-ca.pem', pathRule) };
  if (o?.cert !== undefined && o.cert !== null)
    tls.cert = c.str(o, at('cert'), '/etc/llmgw/mysql-client.crt', pathRule);
  if (o?.key !== undefined && o.key !== null) tls.key = c.str(o, at('key'), '/etc/llmgw/mysql-client.key', pathRule);
  if (o?.serverName !== undefined && o.serverName !== null)
    tls.serverName = c.str(o, at('serverName'), 'mysql.example.net', wordRule);
  if (o && Boolean(tls.cert) !== Boolean(tls.key))
    c.add(
      at(tls.cert ? 'key' : 'cert'),
      `is missing while mysql.tls.${tls.cert ? 'cert' : 'key'} is set`,
      'give the client certificate and its key together, or neither (a user without REQUIRE X509 needs none)',
    );
  return tls;
}

const PROXMOX_KEYS = [
  'url',
  'node',
  'tokenId',
  'tokenSecretFile',
  'ca',
  'storage',
  'image',
  'bridge',
  'gateway',
  'nameserver',
  'cores',
  'memoryMiB',
  'disk',
] as const;

function checkProxmox(c: Checker, raw: unknown): ServerConfig['proxmox'] {
  if (raw === undefined || raw === null) return null;
  const o = c.obj(raw, ['proxmox'], PROXMOX_KEYS);
  const at = (k: string): Seg[] => ['proxmox', k];
  const opt = (k: string, rule: Rule): string | null =>
    o?.[k] === undefined || o[k] === null ? null : c.str(o, at(k), '10.0.0.1', rule);
  const ipRule: Rule = (s) =>
    isIP(s) ? undefined : [`${quote(s)} is not an IP address`, 'give an address such as 10.0.0.1'];
  return {
    url: c
      .str(o, at('url'), 'https://pve.example.net:8006', (s) =>
        /^https:\/\/[^/\s]+$/.test(s.replace(/\/+$/, ''))
          ? undefined
          : [
              `${quote(s)} is not an https://HOST:PORT URL`,
              "give the Proxmox API's https://HOST:8006 (llmgw adds /api2/json; plain http is refused: the token would travel in clear)",
            ],
      )
      .replace(/\/+$/, ''),
    node: c.str(o, at('node'), 'pve', wordRule),
    tokenId: c.str(o, at('tokenId'), 'llmgw@pve!provision', (s) =>
      /^[^@\s]+@[^!\s]+![A-Za-z][A-Za-z0-9._-]*$/.test(s)
        ? undefined
        : [
            `${quote(s)} is not an API token id`,
            'write USER@REALM!TOKENNAME, as Datacenter > Permissions > API Tokens shows it, e.g. llmgw@pve!provision',
          ],
    ),
    tokenSecretFile: c.str(o, at('tokenSecretFile'), '/etc/llmgw/proxmox-token (a file holding the secret)', pathRule),
    ca: c.str(o, at('ca'), "/etc/llmgw/pve-root-ca.pem (a copy of the host's /etc/pve/pve-root-ca.pem)", pathRule),
    storage: c.str(o, at('storage'), 'local-lvm', wordRule),
    image: c.str(o, at('image'), 'local:import/debian-12-genericcloud-amd64.qcow2', (s) =>
      /^[A-Za-z][\w.-]*:import\/\S+\.(qcow2|raw|vmdk)$/.test(s)
        ? undefined
        : [
            `${quote(s)} is not an import volume id`,
            'name a cloud image on an import-capable storage, e.g. local:import/debian-12-genericcloud-amd64.qcow2 (download it with Storage > Download from URL, content "import")',
          ],
    ),
    bridge: c.str(o, at('bridge'), 'vmbr0', wordRule),
    gateway: opt('gateway', ipRule),
    nameserver: opt('nameserver', ipRule),
    cores: o?.cores === undefined ? 4 : c.int(o, at('cores'), 1, 512, '8'),
    memoryMiB: o?.memoryMiB === undefined ? 8192 : c.int(o, at('memoryMiB'), 512, 16_777_216, '32768 (MiB)'),
    disk:
      o?.disk === undefined
        ? '64G'
        : c.str(o, at('disk'), '64G', (s) =>
            /^\d+G$/.test(s)
              ? undefined
              : [`${quote(s)} is not a size in GiB`, 'write it as a whole number of GiB, e.g. 64G'],
          ),
  };
}

/** A browser origin the gateway answers cross-origin requests from: `*`, or scheme://host[:port] and nothing more. */
const originRule: Rule = (s) =>
  s === '*' || /^https?:\/\/[^/\s?#]+$/.test(s)
    ? undefined
    : [
        `${quote(s)} is not an origin`,
        'write it as a browser sends it, scheme://host[:port] with no path (e.g. https://app.example.net), or * for any',
      ];

/** The longest wait llmgw accepts for a first byte: a day, which no client waits for anyway. */
const MAX_FIRST_BYTE_MS = 86_400_000;
const FIRST_BYTE_EXAMPLE = '600000 (10 min: a long prefill, or a whole non-streamed answer)';

function checkTimeouts(c: Checker, g: Obj | undefined): ServerConfig['gateway']['timeouts'] {
  const at = (k: string): Seg[] => ['gateway', 'timeouts', k];
  const t = c.sub(g, ['gateway', 'timeouts'], ['connectMs', 'firstByteMs', 'idleMs', 'requestMs']);
  return {
    requestMs: c.int(t, at('requestMs'), 1000, 3_600_000, '60000 (a whole request, body included, in a minute)'),
    connectMs: c.int(
      t,
      at('connectMs'),
      100,
      60_000,
      '2000 (a replica on a reachable network connects in milliseconds)',
    ),
    firstByteMs: c.int(t, at('firstByteMs'), 1000, MAX_FIRST_BYTE_MS, FIRST_BYTE_EXAMPLE),
    idleMs: c.int(t, at('idleMs'), 1000, MAX_FIRST_BYTE_MS, '120000 (2 min between two chunks of an answer)'),
  };
}

function checkAdmission(c: Checker, g: Obj | undefined): ServerConfig['gateway']['admission'] {
  const at = (k: string): Seg[] => ['gateway', 'admission', k];
  const a = c.sub(g, ['gateway', 'admission'], ['queueMax', 'queueTimeoutMs', 'defaultMaxConcurrent']);
  return {
    queueMax: c.int(a, at('queueMax'), 0, 1_000_000, '256 (requests waiting per model)'),
    queueTimeoutMs: c.int(a, at('queueTimeoutMs'), 100, 3_600_000, '30000 (how long a request may wait)'),
    defaultMaxConcurrent: c.int(a, at('defaultMaxConcurrent'), 1, 100_000, '64 (requests per replica at once)'),
  };
}

function checkMetricsListeners(c: Checker, root: Obj | undefined): ServerConfig['metrics'] {
  const m = c.sub(root, ['metrics'], METRICS_ROLES);
  const one = (role: MetricsRole): MetricsListener | null => {
    const raw = m?.[role];
    if (raw === undefined || raw === null) return null;
    const at: Seg[] = ['metrics', role];
    const o = c.obj(raw, at, ['host', 'port', 'temporalPort']);
    return {
      host: c.str(o, [...at, 'host'], '127.0.0.1', wordRule),
      port: c.int(o, [...at, 'port'], 0, 65535, '9464'),
      temporalPort: o?.temporalPort === undefined ? 0 : c.int(o, [...at, 'temporalPort'], 0, 65535, '9465'),
    };
  };
  return {
    gateway: one('gateway'),
    controlPlane: one('controlPlane'),
    caWorker: one('caWorker'),
    proxmoxWorker: one('proxmoxWorker'),
  };
}

function checkListener(c: Checker, l: Obj | undefined, name: string, port: number): Listener {
  const o = c.sub(l, ['listeners', name], ['host', 'port']);
  return {
    host: c.str(o, ['listeners', name, 'host'], '127.0.0.1', wordRule),
    port: c.int(o, ['listeners', name, 'port'], 1, 65535, String(port)),
  };
}

/** Returns undefined when `engines` is not a mapping at all, so profiles are not all blamed for it. */
function checkEngines(c: Checker, raw: unknown): Partial<Record<EngineName, string>> | undefined {
  if (!isObj(raw)) {
    c.add(
      ['engines'],
      `expected a mapping of engine to version, got ${c.describe(raw)}`,
      `write e.g. engines: { sim: "1.0.0" }; engines are ${ENGINE_LIST}`,
    );
    return undefined;
  }
  const out: Partial<Record<EngineName, string>> = {};
  for (const [k, v] of Object.entries(raw)) {
    const engine = ENGINES.find((e) => e === k);
    if (engine === undefined) {
      const near = suggest(k, ENGINES);
      c.add(
        ['engines', k],
        `${quote(k)} is not an engine`,
        `${near ? `did you mean "${near}"? ` : ''}use one of ${ENGINE_LIST}`,
      );
    } else if (typeof v === 'number') {
      c.add(
        ['engines', k],
        `version ${v} is a number`,
        `quote it, e.g. "${v}" (YAML reads 0.60 unquoted as the number 0.6)`,
      );
    } else if (typeof v !== 'string' || (v !== '' && !VERSION_RE.test(v))) {
      // "" is the operator's own binary on each node (the agent's --llamacpp-bin, --vllm-bin, --sglang-python).
      c.add(
        ['engines', k],
        `expected a version string, got ${c.describe(v)}`,
        'give the version the nodes should install, e.g. "0.33.0" (vllm) or "b11434" (llamacpp), or "" for the operator\'s own binary on each node',
      );
    } else out[engine] = v;
  }
  return out;
}

function checkEnginePorts(c: Checker, p: Obj | undefined): ServerConfig['enginePorts'] {
  // Below 1024 needs root, and engines run unprivileged.
  const base = c.int(p, ['enginePorts', 'base'], 1024, 65535, '20000');
  const count = c.int(p, ['enginePorts', 'count'], 1, 64512, '2000');
  if (base > 0 && count > 0 && base + count > 65536) {
    c.add(
      ['enginePorts', 'count'],
      `ports ${base}..${base + count - 1} run past 65535`,
      `lower count to at most ${65536 - base}, or lower base`,
    );
  }
  return { base, count };
}

function checkPortClashes(c: Checker, cfg: ServerConfig): void {
  const { controlPlane: cp, gateway: gw, temporalDoor: door } = cfg.listeners;
  if (cp.port === gw.port && cp.host === gw.host)
    c.add(
      ['listeners', 'gateway', 'port'],
      `${gw.port} is also the controlPlane port`,
      'give the gateway and the control plane different ports',
    );
  for (const [name, l] of [
    ['controlPlane', cp],
    ['gateway', gw],
  ] as const) {
    if (door.port === l.port && door.host === l.host)
      c.add(
        ['listeners', 'temporalDoor', 'port'],
        `${door.port} is also the ${name} port`,
        `give the Temporal door its own port, e.g. 7444`,
      );
  }
  const temporal = HOST_PORT_RE.exec(cfg.temporal.address);
  if (
    temporal &&
    Number(temporal[3]) === door.port &&
    (temporal[1] === door.host || ['0.0.0.0', '::'].includes(door.host))
  ) {
    c.add(
      ['listeners', 'temporalDoor', 'port'],
      `${door.port} is Temporal's own port (temporal.address ${cfg.temporal.address})`,
      'the door stands in front of Temporal on a port of its own, e.g. 7444',
    );
  }
  const { base, count } = cfg.enginePorts;
  for (const [name, l] of [
    ['controlPlane', cp],
    ['gateway', gw],
    ['temporalDoor', door],
  ] as const) {
    if (l.port >= base && l.port < base + count) {
      c.add(
        ['listeners', name, 'port'],
        `${l.port} lies inside enginePorts ${base}..${base + count - 1}`,
        'move it outside that range; an engine on this host would be handed the same port',
      );
    }
  }
}

function checkCatalog(c: Checker, raw: unknown, engines: Partial<Record<EngineName, string>> | undefined): ModelSpec[] {
  const seen = new Map<string, number>();
  return c.list(raw, ['catalog']).map((item, i): ModelSpec => {
    const at: Seg[] = ['catalog', i];
    const o = c.obj(item, at, [
      'name',
      'source',
      'sha256',
      'replicas',
      'drainGraceS',
      'profiles',
      'firstByteMs',
      'maxConcurrent',
      'startTimeoutS',
      'routing',
    ]);
    const name = c.str(o, [...at, 'name'], 'sim-small', nameRule);
    const prev = seen.get(name);
    if (name && prev !== undefined)
      c.add(
        [...at, 'name'],
        `${quote(name)} is already the name of catalog[${prev}]`,
        'give each model a unique name; clients choose a model by it',
      );
    else if (name) seen.set(name, i);
    const profilesRaw = o ? o.profiles : undefined;
    const profiles = o && profilesRaw === undefined ? [] : c.list(profilesRaw, [...at, 'profiles']);
    if (o && profiles.length === 0 && (profilesRaw === undefined || Array.isArray(profilesRaw))) {
      c.add(
        [...at, 'profiles'],
        'the model has no profiles',
        'add at least one, e.g. profiles: [{ name: default, engine: sim, nodes: 1, gpusPerNode: 1 }]',
      );
    }
    const names = new Set<string>();
    const source = c.str(o, [...at, 'source'], 'sim://sim-small, https://huggingface.co/... or /models/x.gguf');
    const sha256 = checkSha256(c, o, at, source);
    return {
      name,
      source,
      ...(sha256 ? { sha256 } : {}),
      replicas: c.int(o, [...at, 'replicas'], 0, Infinity, '1'),
      ...(o?.drainGraceS === undefined
        ? {}
        : { drainGraceS: c.int(o, [...at, 'drainGraceS'], 0, MAX_GRACE_S, GRACE_EXAMPLE) }),
      profiles: profiles.map((p, j) => checkProfile(c, p, [...at, 'profiles', j], engines, names)),
      ...(o?.firstByteMs === undefined
        ? {}
        : { firstByteMs: c.int(o, [...at, 'firstByteMs'], 1000, MAX_FIRST_BYTE_MS, FIRST_BYTE_EXAMPLE) }),
      // Requests one replica takes at once before the gateway queues; unset: the engine's slots, else the default.
      ...(o?.maxConcurrent === undefined
        ? {}
        : {
            maxConcurrent: c.int(o, [...at, 'maxConcurrent'], 1, 100_000, '16 (requests one replica serves at once)'),
          }),
      // How long its engine may take to serve once the weights are there; unset: DEFAULT_START_TIMEOUT_S.
      ...(o?.startTimeoutS !== undefined
        ? { startTimeoutS: c.int(o, [...at, 'startTimeoutS'], 10, 86_400, '3600') }
        : {}),
      // How the gateway picks among its replicas; unset: least outstanding. Read live, rolls nothing.
      ...(o?.routing !== undefined ? { routing: checkRouting(c, o.routing, [...at, 'routing']) } : {}),
    };
  });
}

const POLICY_LIST = ROUTING_POLICIES.join(', ');
const HEADER_RE = /^[a-z0-9!#$%&'*+.^_`|~-]+$/;

/** A catalog model's `routing`: a policy and the fields it uses, each in its range. */
function checkRouting(c: Checker, raw: unknown, at: Seg[]): ModelRouting {
  const o = c.obj(raw, at, ['policy', 'sessionHeader', 'prefixBytes', 'loadFactor']);
  const given = c.str(o, [...at, 'policy'], 'prefix');
  const policy = ROUTING_POLICIES.find((p) => p === given);
  if (given && policy === undefined) {
    const near = suggest(given, ROUTING_POLICIES);
    c.add(
      [...at, 'policy'],
      `${quote(given)} is not a routing policy`,
      `${near ? `did you mean "${near}"? ` : ''}use one of ${POLICY_LIST}`,
    );
  }
  const out: ModelRouting = { policy: policy ?? 'least' };
  if (o?.sessionHeader !== undefined)
    out.sessionHeader = c
      .str(o, [...at, 'sessionHeader'], 'x-session-id', (s) =>
        HEADER_RE.test(s.toLowerCase())
          ? undefined
          : [`${quote(s)} is not an HTTP header name`, 'use letters, digits and dashes, e.g. x-session-id'],
      )
      .toLowerCase();
  if (o?.prefixBytes !== undefined)
    out.prefixBytes = c.int(o, [...at, 'prefixBytes'], 64, 262_144, '8192 (bytes of the prompt hashed)');
  if (o?.loadFactor !== undefined) {
    const v = o.loadFactor;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 1 || v > 10)
      c.add(
        [...at, 'loadFactor'],
        `expected a number from 1 to 10, got ${c.describe(v)}`,
        'set it to e.g. 1.25: a replica takes new requests of its keys until it holds 1.25 × its share',
      );
    else out.loadFactor = v;
  }
  return out;
}

/** A catalog model's optional sha256: 64 hex digits, for a URL source only (lowercased). */
function checkSha256(c: Checker, o: Obj | undefined, at: Seg[], source: string): string | undefined {
  if (!o || o.sha256 === undefined) return undefined;
  const v = c.str(o, [...at, 'sha256'], 'the output of sha256sum FILE (64 hex digits)', (s) =>
    SHA256_RE.test(s)
      ? undefined
      : [`${quote(s)} is not a sha256`, 'give the 64 hex digits sha256sum prints for the file (no "sha256:" prefix)'],
  );
  if (v && source && classifySource(source).kind !== 'url') {
    c.add(
      [...at, 'sha256'],
      `is set, but source ${quote(source)} is not an http(s) URL`,
      'remove sha256 (only a fetched file is verified), or give the model a URL source',
    );
  }
  return SHA256_RE.test(v) ? v.toLowerCase() : undefined;
}

function checkProfile(
  c: Checker,
  raw: unknown,
  at: Seg[],
  engines: Partial<Record<EngineName, string>> | undefined,
  names: Set<string>,
): Profile {
  const o = c.obj(raw, at, ['name', 'engine', 'nodes', 'gpusPerNode', 'args']);
  const name = c.str(o, [...at, 'name'], 'default', nameRule);
  if (name && names.has(name))
    c.add(
      [...at, 'name'],
      `${quote(name)} is already a profile of this model`,
      'give each profile of a model a unique name',
    );
  names.add(name);
  const given = c.str(o, [...at, 'engine'], 'sim');
  const engine = ENGINES.find((e) => e === given);
  if (given && engine === undefined) {
    const near = suggest(given, ENGINES);
    c.add(
      [...at, 'engine'],
      `${quote(given)} is not an engine`,
      `${near ? `did you mean "${near}"? ` : ''}use one of ${ENGINE_LIST}`,
    );
  } else if (engine && engines && engines[engine] === undefined) {
    c.add(
      [...at, 'engine'],
      `${quote(engine)} has no version in engines`,
      `add engines.${engine}: "<version>" so nodes install it, or use one of: ${Object.keys(engines).join(', ') || '(none listed)'}`,
    );
  }
  return {
    name,
    engine: engine ?? 'sim',
    nodes: c.int(o, [...at, 'nodes'], 1, Infinity, '1'),
    gpusPerNode: c.int(o, [...at, 'gpusPerNode'], 0, Infinity, '1'),
    args: o && o.args === undefined ? [] : c.strList(o, [...at, 'args'], '"--ctx-size"'),
  };
}
