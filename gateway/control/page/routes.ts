/**
 * The cluster page on the control plane's HTTPS listener (docs/cluster-page.md). The shell, script and
 * stylesheet are open (they hold no cluster data); everything under /page/api needs a session, got with a page
 * key or an operator certificate; every action also passes the CSRF checks, and does what the CLI verb does.
 */
import { WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { LlmgwError } from '../../../lib/errors';
import { workflowIds } from '../../../lib/names';
import { ModelStatsStore } from '../../../lib/store/model-stats';
import { PageAuthStore } from '../../../lib/store/page-auth';
import { startDrain, startModelDeployment, workflowLink } from '../../../lib/workflow-starts';
import { scaleUpdate } from '../../../workflows/contracts/model';
import { answerErrors } from '../../errors';
import type { CertificateGate } from '../../mtls';
import { errorSchema } from '../identity';
import { knownNode, revokeNode, setCordon } from '../node-actions';
import type { ControlAppOptions } from '../routes';
import { loadAssets } from './assets';
import { checkCsrf, checkOrigin, requireViewer, sessionCookie, cookieToken } from './auth';
import { LiveSnapshots } from './live';
import { buildSnapshot, type PageSnapshot, type TemporalUi } from './snapshot';
import { RecentTraffic } from './traffic';

/** What the page needs beyond the control routes' options: the gate (certificate sign-in) and Temporal. */
export interface PageOptions extends Pick<
  ControlAppOptions,
  'store' | 'endDrain' | 'onNodesChanged' | 'revoke' | 'beats'
> {
  gate: CertificateGate;
  client: Client;
  ui: TemporalUi;
  log: (msg: string, fields: Record<string, unknown>) => void;
  /** How often the shared snapshot is rebuilt while a page is open, ms (default 1000). */
  liveEveryMs?: number;
  /** How often the gateways' request counts are read for the overview, ms (default 10 000). */
  trafficEveryMs?: number;
}

/** Whether a routed path is the page's (the certificate gate leaves those to the page's own sign-in). */
export function isPageRoute(route: string): boolean {
  return route === '/' || route === '/page' || route.startsWith('/page/');
}

/** Headers on every page answer: nothing from elsewhere runs or frames it, nothing is cached or leaks in a Referer. */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
} as const;

const idParams = {
  type: 'object',
  additionalProperties: false,
  required: ['id'],
  properties: { id: { type: 'string', maxLength: 64 } },
} as const;

/** Registers the page's routes (a plugin of its own: its hooks and error shape stay on its routes). */
export async function pageRoutes(app: FastifyInstance, o: PageOptions): Promise<void> {
  const { store } = o;
  const auth = new PageAuthStore(store.pool);
  const access = { auth, gate: o.gate };
  const assets = loadAssets();
  const traffic = new RecentTraffic(new ModelStatsStore(store.pool), o.trafficEveryMs);
  const live = new LiveSnapshots<PageSnapshot>(
    () => buildSnapshot(store, { client: o.client, ui: o.ui }, traffic, o.beats),
    o.log,
    o.liveEveryMs,
  );
  app.addHook('onClose', async () => live.stop());
  app.addHook('onSend', async (_req, reply, payload) => {
    void reply.headers(SECURITY_HEADERS);
    return payload;
  });
  answerErrors(app, o.log);

  const file = (name: keyof typeof assets) => async (_req: unknown, reply: FastifyReply) =>
    reply.type(assets[name].type).send(assets[name].body);
  app.get('/', async (_req, reply) => reply.redirect('/page/'));
  app.get('/page', async (_req, reply) => reply.redirect('/page/'));
  app.get('/page/', file('index.html'));
  app.get('/page/app.js', file('app.js'));
  app.get('/page/app.css', file('app.css'));

  // Sign-in with a page key: a session cookie and the CSRF token its actions carry.
  app.post<{ Body: { key: string } }>(
    '/page/api/session',
    {
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['key'],
          properties: { key: { type: 'string', maxLength: 200 } },
        },
        response: { 401: errorSchema, 403: errorSchema },
      },
    },
    async (req, reply) => {
      checkOrigin(req);
      const name = await auth.keyName(req.body.key.trim());
      if (!name) {
        o.log('cluster page sign-in refused', { reason: 'not an unrevoked page key', ip: req.ip });
        throw new LlmgwError(
          'LLMGW_PAGE_SIGNIN_REQUIRED',
          'that is not a cluster page key (or it was revoked): create one with llmgw ctl page-key create NAME',
        );
      }
      const s = await auth.createSession({ operator: `key ${name}`, keyName: name });
      o.log('cluster page sign-in', { operator: s.operator });
      void reply.header('set-cookie', sessionCookie(s.token));
      return { operator: s.operator, csrf: s.csrf, expiresAt: s.expiresAt.toISOString() };
    },
  );
  // Who is signed in (an operator certificate signs in here too); 401 shows the sign-in form.
  app.get('/page/api/session', { schema: { response: { 401: errorSchema } } }, async (req, reply) => {
    const v = await requireViewer(req, reply, access);
    return { operator: v.operator, csrf: v.csrf, expiresAt: v.expiresAt.toISOString() };
  });
  app.post('/page/api/signout', async (req, reply) => {
    const token = cookieToken(req);
    const s = token ? await auth.session(token) : null;
    checkCsrf(req, s);
    if (token) {
      await auth.endSession(token);
      live.endSession(token);
    }
    void reply.header('set-cookie', sessionCookie(null));
    return { signedOut: true };
  });
  app.get('/page/api/snapshot', async (req, reply) => {
    await requireViewer(req, reply, access);
    return live.current();
  });
  app.get('/page/api/events', async (req, reply) => {
    const v = await requireViewer(req, reply, access);
    // The stream is ours from here: the security headers go on by hand, as fastify no longer sends this reply.
    for (const [k, val] of Object.entries(SECURITY_HEADERS)) reply.raw.setHeader(k, val);
    const cookie = reply.getHeader('set-cookie');
    if (cookie) reply.raw.setHeader('set-cookie', cookie as string);
    reply.hijack();
    live.subscribe(reply.raw, v.token);
  });

  /** An action: a session, its CSRF token, then what the CLI verb does; logged and in the event log by who. */
  const act = async (req: Parameters<typeof requireViewer>[0], reply: FastifyReply): Promise<{ operator: string }> => {
    const v = await requireViewer(req, reply, access);
    checkCsrf(req, v);
    o.log('cluster page action', { operator: v.operator, url: req.url });
    return v;
  };
  const link = (workflowId: string): string => workflowLink({ temporal: o.ui }, workflowId);

  for (const verb of ['cordon', 'uncordon'] as const)
    app.post<{ Params: { id: string } }>(
      `/page/api/nodes/:id/${verb}`,
      { schema: { params: idParams } },
      async (req, reply) => {
        const v = await act(req, reply);
        const r = await setCordon(o, req.params.id, verb, `${v.operator} (cluster page)`);
        return { ...r, message: `${r.nodeId}: ${r.state}${r.changed ? '' : ' (it already was)'}` };
      },
    );
  app.post<{ Params: { id: string } }>(
    '/page/api/nodes/:id/drain',
    { schema: { params: idParams } },
    async (req, reply) => {
      await act(req, reply);
      const { id } = await knownNode(store, req.params.id);
      const h = await startDrain(o.client, { nodeId: id, timeoutS: null });
      return {
        message: `drain of ${id} started: its replicas move off one at a time`,
        workflowId: h.workflowId,
        link: link(h.workflowId),
      };
    },
  );
  app.post<{ Params: { id: string } }>(
    '/page/api/nodes/:id/revoke',
    { schema: { params: idParams } },
    async (req, reply) => {
      const v = await act(req, reply);
      if (!o.revoke) throw new LlmgwError('LLMGW_NOT_FOUND', 'this control plane does not revoke certificates');
      const r = await revokeNode(store, o.revoke, req.params.id, `revoked by ${v.operator} from the cluster page`);
      return { ...r, message: `${r.nodeId}: ${r.revoked} certificate${r.revoked === 1 ? '' : 's'} revoked` };
    },
  );
  app.post<{ Params: { name: string }; Body: { replicas: number } }>(
    '/page/api/models/:name/scale',
    {
      schema: {
        params: {
          type: 'object',
          required: ['name'],
          properties: { name: { type: 'string', minLength: 1, maxLength: 128 } },
        },
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['replicas'],
          properties: { replicas: { type: 'integer', minimum: 0, maximum: 1000 } },
        },
      },
    },
    async (req, reply) => {
      await act(req, reply);
      const model = req.params.name;
      if (!(await store.getModel(model)))
        throw new LlmgwError('LLMGW_UNKNOWN_MODEL', `model ${model} is not in the cluster's catalog`, { model });
      const h = await startModelDeployment(o.client, model);
      await h.executeUpdate(scaleUpdate, { args: [req.body.replicas] }).catch((err: unknown) => {
        if (err instanceof WorkflowUpdateFailedError)
          throw new LlmgwError(
            'LLMGW_BAD_REQUEST',
            `${h.workflowId} refused the scale: ${err.cause?.message ?? err.message}`,
          );
        throw err;
      });
      return {
        message: `${model}: desired replicas ${req.body.replicas}`,
        workflowId: workflowIds.model(model),
        link: link(workflowIds.model(model)),
      };
    },
  );
}
