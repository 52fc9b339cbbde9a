/**
 * A real headless browser for tests: Debian's `chromium`, driven over the Chrome DevTools Protocol on
 * `--remote-debugging-pipe` (fd 3 in, fd 4 out, one JSON message per NUL) — no WebSocket, no npm dependency.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';

/** The chromium binary (scripts/setup.sh installs it), or null when this machine has none. */
export function chromiumPath(): string | null {
  for (const name of ['chromium', 'chromium-browser']) {
    const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
    if (r.status === 0 && r.stdout.trim()) return r.stdout.trim();
  }
  return null;
}

type Pending = { resolve: (v: Record<string, unknown>) => void; reject: (e: Error) => void; method: string };

/** One page (tab) of the browser: CDP commands in its session, and what the tests need on top. */
export interface BrowserPage {
  send<T = Record<string, unknown>>(method: string, params?: Record<string, unknown>): Promise<T>;
  /** Evaluates an expression in the page (promises awaited) and returns its value; a thrown error fails. */
  eval<T>(expression: string): Promise<T>;
  navigate(url: string): Promise<void>;
  /** Waits until `expression` is truthy in the page, or fails naming `what`. */
  until<T>(expression: string, what: string, timeoutMs?: number): Promise<T>;
  screenshot(): Promise<Buffer>;
  setViewport(width: number, height: number, mobile?: boolean): Promise<void>;
}

/** A running headless chromium. */
export interface Browser {
  newPage(): Promise<BrowserPage>;
  close(): Promise<void>;
}

/** Starts headless chromium (it trusts any server certificate: the test cluster's CA is its own). */
export async function startChromium(): Promise<Browser> {
  const bin = chromiumPath();
  if (!bin) throw new Error('chromium is not installed: run bash scripts/setup.sh (it installs Debian’s chromium)');
  const profile = mkdtempSync(join(tmpdir(), 'llmgw-chromium-'));
  const child: ChildProcess = spawn(
    bin,
    [
      '--headless=new',
      '--no-sandbox',
      '--remote-debugging-pipe',
      '--ignore-certificate-errors',
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--disable-extensions',
      '--disable-background-networking',
      '--disable-component-update',
      '--window-size=1280,800',
      `--user-data-dir=${profile}`,
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (b: Buffer) => void (stderr = (stderr + b.toString()).slice(-4000)));
  const toBrowser = child.stdio[3] as Writable;
  const fromBrowser = child.stdio[4] as Readable;
  const pending = new Map<number, Pending>();
  let nextId = 1;
  let buf = Buffer.alloc(0);
  fromBrowser.on('data', (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    for (let at = buf.indexOf(0); at >= 0; at = buf.indexOf(0)) {
      const msg = JSON.parse(buf.subarray(0, at).toString('utf8')) as {
        id?: number;
        result?: Record<string, unknown>;
        error?: { message: string };
      };
      buf = buf.subarray(at + 1);
      const p = msg.id === undefined ? undefined : pending.get(msg.id);
      if (!p) continue; // an event: these tests poll the page instead
      pending.delete(msg.id as number);
      if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}`));
      else p.resolve(msg.result ?? {});
    }
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  void exited.then(() => {
    for (const p of pending.values()) p.reject(new Error(`chromium exited during ${p.method}: ${stderr}`));
    pending.clear();
  });
  const send = <T>(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve: resolve as Pending['resolve'], reject, method });
      toBrowser.write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`);
    });

  return {
    async newPage(): Promise<BrowserPage> {
      const { targetId } = await send<{ targetId: string }>('Target.createTarget', { url: 'about:blank' });
      const { sessionId } = await send<{ sessionId: string }>('Target.attachToTarget', { targetId, flatten: true });
      const inPage = <T>(method: string, params: Record<string, unknown> = {}): Promise<T> =>
        send<T>(method, params, sessionId);
      await inPage('Page.enable');
      await inPage('Runtime.enable');
      const page: BrowserPage = {
        send: inPage,
        async eval<T>(expression: string): Promise<T> {
          const r = await inPage<{
            result: { value?: T };
            exceptionDetails?: { text: string; exception?: { description?: string } };
          }>('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
          if (r.exceptionDetails) throw new Error(r.exceptionDetails.exception?.description ?? r.exceptionDetails.text);
          return r.result.value as T;
        },
        async navigate(url: string): Promise<void> {
          await inPage('Page.navigate', { url });
          await page.until('document.readyState === "complete"', `${url} to load`);
        },
        async until<T>(expression: string, what: string, timeoutMs = 15_000): Promise<T> {
          const deadline = Date.now() + timeoutMs;
          let last = '';
          for (;;) {
            try {
              const v = await page.eval<T>(expression);
              if (v) return v;
              last = JSON.stringify(v);
            } catch (err) {
              last = (err as Error).message;
            }
            if (Date.now() > deadline)
              throw new Error(`timed out after ${timeoutMs}ms waiting for ${what} in the page; last: ${last}`);
            await new Promise((r) => setTimeout(r, 100));
          }
        },
        async screenshot(): Promise<Buffer> {
          const { data } = await inPage<{ data: string }>('Page.captureScreenshot', {
            format: 'png',
            captureBeyondViewport: true,
          });
          return Buffer.from(data, 'base64');
        },
        async setViewport(width: number, height: number, mobile = false): Promise<void> {
          await inPage('Emulation.setDeviceMetricsOverride', {
            width,
            height,
            deviceScaleFactor: 1,
            mobile,
          });
        },
      };
      return page;
    },
    async close(): Promise<void> {
      await send('Browser.close').catch(() => undefined);
      const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(killer);
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
