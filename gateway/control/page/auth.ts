/**
 * Who is looking at the cluster page: a session cookie (HttpOnly, Secure, SameSite=Strict, `__Host-` so no
 * subdomain or plain-HTTP page can set it) given for a page key or an operator certificate; and the CSRF checks
 * every action passes (the session's token in a header, and an Origin, when sent, of this very host).
 */
import { timingSafeEqual } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { LlmgwError } from '../../../lib/errors';
import { PAGE_SESSION_MS, type PageAuthStore, type PageSession } from '../../../lib/store/page-auth';
import type { CertificateGate } from '../../mtls';

/** The session cookie's name (the `__Host-` prefix makes browsers insist on Secure, Path=/ and no Domain). */
export const SESSION_COOKIE = '__Host-llmgw-page';
/** The header an action carries the session's CSRF token in. */
export const CSRF_HEADER = 'x-llmgw-csrf';

/** The Set-Cookie value for a session (or, with null, the one that clears it). */
export function sessionCookie(token: string | null): string {
  const base = `${SESSION_COOKIE}=${token ?? ''}; Path=/; HttpOnly; Secure; SameSite=Strict`;
  return `${base}; Max-Age=${token ? Math.floor(PAGE_SESSION_MS / 1000) : 0}`;
}

/** The session cookie's value on a request, or null. */
export function cookieToken(req: FastifyRequest): string | null {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === SESSION_COOKIE && v.length) return v.join('=') || null;
  }
  return null;
}

/** A signed-in request's session and its cookie value. */
export interface Viewer extends PageSession {
  token: string;
}

/**
 * The request's session: its cookie's, or — for a browser presenting an operator certificate and no live
 * session — a new one, whose cookie is set on the reply. Null: neither (the caller answers 401).
 */
export async function viewer(
  req: FastifyRequest,
  reply: FastifyReply,
  o: { auth: PageAuthStore; gate: CertificateGate },
): Promise<Viewer | null> {
  const token = cookieToken(req);
  const s = token ? await o.auth.session(token) : null;
  if (s && token) return { ...s, token };
  const v = await o.gate.verify(req.raw.socket as TLSSocket);
  if (v.kind !== 'ok' || v.role !== 'operator') return null;
  const created = await o.auth.createSession({ operator: v.cn, keyName: null });
  void reply.header('set-cookie', sessionCookie(created.token));
  return { ...created };
}

/** Refuses (401) a request with no session; else its viewer. */
export async function requireViewer(
  req: FastifyRequest,
  reply: FastifyReply,
  o: { auth: PageAuthStore; gate: CertificateGate },
): Promise<Viewer> {
  const v = await viewer(req, reply, o);
  if (!v)
    throw new LlmgwError(
      'LLMGW_PAGE_SIGNIN_REQUIRED',
      'sign in with a cluster page key (llmgw ctl page-key create NAME) or an operator certificate',
    );
  return v;
}

const same = (a: string, b: string): boolean => {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
};

/**
 * An action's CSRF checks: SameSite=Strict keeps the cookie off other sites' requests already; the token header
 * (which no other origin can read or set without a CORS preflight we never answer) and the Origin make sure.
 */
export function checkCsrf(req: FastifyRequest, session: Pick<PageSession, 'csrf'> | null): void {
  checkOrigin(req);
  const sent = req.headers[CSRF_HEADER];
  if (session && (typeof sent !== 'string' || !same(sent, session.csrf)))
    throw new LlmgwError('LLMGW_PAGE_CSRF_REFUSED', `an action needs the session's token in ${CSRF_HEADER}`);
}

/** A POST whose Origin (when the browser sent one) is not this host's own is refused. */
export function checkOrigin(req: FastifyRequest): void {
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== `https://${req.headers.host ?? ''}`)
    throw new LlmgwError('LLMGW_PAGE_CSRF_REFUSED', `a request from ${origin.slice(0, 100)} may not act here`);
}
