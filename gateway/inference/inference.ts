/**
 * The inference routes' work once a request's body is read (POST /v1/chat/completions, /v1/completions,
 * /v1/embeddings): check the body, the key's scope and quota, admission, then the proxy. Shared by the fastify
 * routes (app.ts) and the gateway's node:http fast path in front of fastify (fast-path.ts), through `Exchange`: the
 * one request, however it arrived.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { DoorAgent } from '../../lib/door-agent';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { GatewayTimeouts } from '../../config/types';
import { quoteInput, type ErrorCode } from '../../lib/errors';
import type { KeyRecord } from '../../lib/store/keys';
import { Admission, admissionKeyOf, type AdmissionOptions, type WaitingExchange } from './admission';
import { affinityKey, byKey } from './affinity';
import { scopeRefusal, type AuthResult, type KeyTable } from './keys';
import { silentLog, type AccessNote, type GatewayLog } from './log';
import type { ModelStats } from './model-stats';
import type { GatewayMetrics } from './metrics';
import { proxyRequest, type ProxyDeps } from './proxy';
import { estimateTokens, type QuotaKeeper } from './quota';
import { checkRequest, type ProxiedPath } from './request-check';
import type { PickResult, RoutableReplica, RoutingTable } from './routing';
import { upstreamDispatcher } from './upstream';
import { UsageMeter } from './usage-meter';

/** What the inference routes are built from (the gateway plugin's options, app.ts). */
export interface InferenceOptions {
  routing: RoutingTable;
  /** Accepted bearer keys when `keys` is not given; empty = no authentication (tests of routing only). */
  apiKeys: string[];
  /** The key store's copy (it also holds server.yaml's static keys): every request but /health needs a key. */
  keys?: KeyTable;
  /** Per-key quotas and usage, for stored keys with rpm or tpm. */
  quota?: QuotaKeeper;
  /** The client to the replicas; by default one (upstream.ts) owned, and closed, by the app. */
  dispatcher?: Dispatcher;
  /** The keep-alive TLS pool to the nodes' doors (door-agent.ts); absent: a route behind a door cannot be used */
  doorAgent?: DoorAgent;
  /** Largest request body in bytes (long prompts are big); default 32 MiB. */
  bodyLimit?: number;
  /** Warnings and errors (retries, cut answers, ejections), and the access log; each line carries the request id. */
  log?: GatewayLog;
  /** How long to wait on a replica; default server.yaml's defaults (gateway.timeouts). */
  timeouts?: GatewayTimeouts;
  /** One `request` line per request through `log`. */
  accessLog?: boolean;
  /** Browser origins answered cross-origin (CORS); default none: preflights refused. */
  corsOrigins?: string[];
  /** Per-model request counts and TTFT for the cluster page; none = nothing counted. */
  stats?: ModelStats;
  /** The bounded queue in front of full replicas; default server.yaml's defaults (gateway.admission). */
  admission?: Omit<AdmissionOptions, 'onReject'>;
  /** The gateway's metrics (served on their own listener by server.ts); none: nothing is measured. */
  metrics?: GatewayMetrics;
}

/** One inference request, whichever way it arrived (a fastify route, or the fast path). */
export interface Exchange extends WaitingExchange {
  readonly id: string;
  readonly req: IncomingMessage;
  /** The stored key the request came with (null: a static key, or no key checking) */
  readonly apiKey: KeyRecord | null;
  /** performance.now() when its headers were read (with metrics on) */
  readonly arrivedAt: number;
  /** The access log's record, when the access log is on. */
  readonly note: AccessNote | undefined;
  /** The model the body names, once read ('' before): the metrics label of the gateway's own answers. */
  model: string;
}

/** Once an answer ended: the tokens it reported (or, for a stream without usage, its events) settle the quota. */
function settleUsage(
  quota: QuotaKeeper,
  key: KeyRecord,
  model: string,
  minute: number,
  estimate: number,
  res: ServerResponse,
  meter: UsageMeter,
  bodyBytes: number,
): void {
  if (res.statusCode !== 200) return quota.settle(key, model, minute, estimate, 0, 0);
  const reported = meter.reported();
  if (reported) return quota.settle(key, model, minute, estimate, reported.prompt, reported.completion, true);
  const sse = String(res.getHeader('content-type')).startsWith('text/event-stream');
  // Without a usage object: a stream is counted by its events, anything else is taken to have used its estimate.
  if (sse) return quota.settle(key, model, minute, estimate, Math.ceil(bodyBytes / 4), meter.eventCount());
  quota.settle(key, model, minute, estimate, estimate, 0);
}

/** The state the inference routes share: the upstream pool, admission, keys, quotas, metrics. */
export class Inference {
  readonly routing: RoutingTable;
  readonly admission: Admission;
  readonly metrics: GatewayMetrics | undefined;
  readonly log: GatewayLog;
  readonly bodyLimit: number;
  readonly accessLog: boolean;
  readonly origins: ReadonlySet<string>;
  readonly keys: KeyTable | undefined;
  private readonly quota: QuotaKeeper | undefined;
  private readonly deps: ProxyDeps;
  private readonly timeouts: GatewayTimeouts;
  private readonly authorized: Set<string>;
  private readonly ownDispatcher: boolean;

  constructor(opts: InferenceOptions) {
    this.routing = opts.routing;
    this.log = opts.log ?? silentLog;
    this.timeouts = opts.timeouts ?? DEFAULT_CONFIG.gateway.timeouts;
    this.bodyLimit = opts.bodyLimit ?? 32 * 1024 * 1024;
    this.accessLog = opts.accessLog ?? false;
    this.origins = new Set(opts.corsOrigins ?? []);
    this.keys = opts.keys;
    this.quota = opts.quota;
    this.metrics = opts.metrics;
    this.ownDispatcher = !opts.dispatcher;
    const dispatcher = opts.dispatcher ?? upstreamDispatcher(this.timeouts.connectMs, opts.doorAgent);
    const { metrics } = opts;
    this.deps = {
      routing: opts.routing,
      dispatcher,
      doorAgent: opts.doorAgent,
      log: this.log,
      timeouts: this.timeouts,
      stats: opts.stats,
      metrics,
    };
    this.authorized = new Set(opts.apiKeys.map((k) => `Bearer ${k}`));
    this.admission = new Admission(opts.routing, {
      ...(opts.admission ?? DEFAULT_CONFIG.gateway.admission),
      onReject: metrics ? (model, why): void => metrics.rejectedBy(model, why) : undefined,
    });
    if (metrics) metrics.watchQueue(() => this.admission.queuedByModel());
  }

  /** Destroys the upstream pool when it is the gateway's own. */
  close(): void {
    if (this.ownDispatcher) void this.deps.dispatcher.destroy().catch(() => undefined);
  }

  /**
   * Who sent a request with this Authorization header to a route that needs a key: a stored key, a static key (or
   * no key checking at all), or why not (the 401's message).
   */
  authenticate(h: string | undefined): AuthResult {
    if (this.keys) return this.keys.authenticate(h);
    if (this.authorized.size > 0 && (!h || !this.authorized.has(h)))
      return {
        kind: 'refused',
        message: h ? 'invalid API key' : 'missing API key: send "Authorization: Bearer <key>"',
      };
    return STATIC;
  }

  /** The `key` label of a request's own answer with `status` (401: `unauthorized`). */
  keyLabel(status: number, apiKey: KeyRecord | null, authorization: string | undefined): string {
    if (status === 401) return 'unauthorized';
    return apiKey?.name ?? (this.metrics as GatewayMetrics).keyIdOf(authorization);
  }

  /** Counts the gateway's own answer to an inference request (a model the table does not know is no label). */
  answered(model: string, apiKey: KeyRecord | null, authorization: string | undefined, status: number): void {
    const { metrics } = this;
    if (!metrics) return;
    metrics.answered(model && metrics.knows(model) ? model : '', this.keyLabel(status, apiKey, authorization), status);
  }

  /**
   * Serves one inference request whose body is read: answers it (an error) or hands it to the proxy, maybe after a
   * wait on a quota lease or in admission's queue. Settles once the request is answered or handed over.
   */
  serve(x: Exchange, path: ProxiedPath, body: Buffer): Promise<void> | void {
    const checked = checkRequest(path, body);
    if (checked.kind === 'error') return x.fail('LLMGW_BAD_REQUEST', checked.message);
    const { model } = checked;
    x.model = model;
    if (x.note) x.note.model = model;
    const { routing } = this;
    const key = x.apiKey;
    if (key && key.models !== null && !key.models.includes(model))
      return x.fail('LLMGW_MODEL_NOT_ALLOWED', scopeRefusal(key, model, (m) => routing.models().includes(m)) as string);
    // An engine that cannot embed answers 404 or 501 in its own words; the gateway knows it from the catalog.
    const refusal = path === '/v1/embeddings' ? routing.embeddingRefusal(model) : null;
    if (refusal)
      return x.fail('LLMGW_ENDPOINT_UNSUPPORTED', `model ${quoteInput(model)} cannot serve /v1/embeddings: ${refusal}`);
    // A keyed policy's key: a hash of the session id or of the prompt's first bytes (bounded), nothing more read.
    const how = routing.routingOf(model);
    const affinity =
      how && byKey(how.policy)
        ? affinityKey(how, { body, prompt: checked.prompt, user: checked.user, headers: x.req.headers })
        : null;
    const picked = this.admission.pick(model, affinity);
    // The key's quota, once the model is served here (an unknown model costs none) and before any wait in the
    // queue (a request over its quota never holds a place there).
    const { quota } = this;
    if (key && quota && (picked.kind === 'ok' || picked.kind === 'busy')) {
      const estimate =
        key.tpm === null
          ? 0
          : quota.estimate(key, estimateTokens(body.length, checked.maxTokens, path === '/v1/embeddings'));
      const minute = quota.minute();
      const taken = quota.take(key, estimate);
      if (taken === null) return this.admit(x, model, path, body, affinity, picked, key, quota, minute, estimate);
      if (!('then' in taken)) return this.refuseQuota(x, quota, key, model, taken);
      // After a wait on a lease, the replicas may have changed: pick again.
      return taken.then((refused) =>
        refused
          ? this.refuseQuota(x, quota, key, model, refused)
          : this.admit(x, model, path, body, affinity, null, key, quota, minute, estimate),
      );
    }
    return this.route(x, model, path, body, affinity, picked, undefined);
  }

  /** Answers a quota refusal: 429, Retry-After, OpenAI's rate_limit_exceeded; counted in the key's usage. */
  private refuseQuota(
    x: Exchange,
    quota: QuotaKeeper,
    key: KeyRecord,
    model: string,
    r: { code: ErrorCode; message: string; retryAfterS: number },
  ): void {
    quota.refused(key, model);
    x.fail(r.code, r.message, r.retryAfterS);
  }

  /** A request within its quota: metered, settled when its answer ends, then routed. */
  private admit(
    x: Exchange,
    model: string,
    path: ProxiedPath,
    body: Buffer,
    affinity: number | null,
    picked: PickResult | null,
    key: KeyRecord,
    quota: QuotaKeeper,
    minute: number,
    estimate: number,
  ): Promise<void> | void {
    const { res } = x;
    // A client that left while its request waited on a lease: give the estimate back, send nothing.
    if (res.destroyed) {
      quota.settle(key, model, minute, estimate, 0, 0);
      return x.hijack();
    }
    const meter = new UsageMeter();
    res.on('close', () => settleUsage(quota, key, model, minute, estimate, res, meter, body.length));
    return this.route(x, model, path, body, affinity, picked ?? this.admission.pick(model, affinity), meter);
  }

  private route(
    x: Exchange,
    model: string,
    path: ProxiedPath,
    body: Buffer,
    affinity: number | null,
    picked: PickResult,
    meter: UsageMeter | undefined,
  ): Promise<void> | void {
    switch (picked.kind) {
      case 'unknown-model': {
        const key = x.apiKey;
        const known = this.routing.models();
        const scoped = key?.models ? `; key ${key.name} may use ${key.models.join(', ')}` : '';
        return x.fail(
          'LLMGW_UNKNOWN_MODEL',
          key?.models
            ? `model ${quoteInput(model)} no longer exists (it was removed from the catalog)${scoped}; available models: ${known.filter((m) => key.models?.includes(m)).join(', ') || 'none of them'}`
            : `model ${quoteInput(model)} does not exist; available models: ${known.length ? known.join(', ') : 'none'}`,
        );
      }
      case 'none-ready':
        return x.fail('LLMGW_NO_READY_REPLICA', picked.reason);
      case 'ok':
        return this.forward(x, model, path, body, picked.replica, picked.firstByteMs, 0, meter);
      case 'busy': {
        const since = performance.now();
        return this.admission.wait(
          model,
          admissionKeyOf(x.apiKey, x.req.headers.authorization),
          x,
          (replica, firstByteMs) =>
            this.forward(x, model, path, body, replica, firstByteMs, performance.now() - since, meter),
        );
      }
      default: {
        const never: never = picked;
        throw new Error(`unhandled pick ${JSON.stringify(never)}`);
      }
    }
  }

  private forward(
    x: Exchange,
    model: string,
    path: ProxiedPath,
    body: Buffer,
    replica: RoutableReplica,
    firstByteMs: number | undefined,
    queuedMs: number,
    meter: UsageMeter | undefined,
  ): void {
    x.hijack();
    const { metrics } = this;
    const times = metrics?.times(x.arrivedAt);
    if (times) times.queuedMs = queuedMs;
    proxyRequest(this.deps, {
      model,
      path,
      body,
      first: replica,
      firstByteMs: firstByteMs ?? this.timeouts.firstByteMs,
      reqId: x.id,
      req: x.req,
      res: x.res,
      note: x.note,
      // The key label: a stored key's name; a static key (or none) by a short hash of its header.
      key: metrics ? (x.apiKey?.name ?? metrics.keyIdOf(x.req.headers.authorization)) : undefined,
      times,
      meter,
    });
  }
}

/** A static key's (or no checking's) answer, shared. */
const STATIC: AuthResult = { kind: 'static' };
