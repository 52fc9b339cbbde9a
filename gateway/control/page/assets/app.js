// The cluster page's script: plain browser JavaScript, no framework, no build step (docs/cluster-page.md).
// Every value from the server goes into the page as text (textContent), never as HTML.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const VIEWS = ['overview', 'nodes', 'fabrics', 'replicas', 'workflows', 'events'];
  let snap = null;
  let csrf = null;
  let events = null;

  /** An element with attributes (on* as listeners) and children (strings become text). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
    return el;
  }
  const state = (s) => h('span', { class: `state s-${s}`, 'data-state': s }, s);
  const counts = (o) =>
    Object.entries(o)
      .map(([k, n]) => `${n} ${k}`)
      .join(', ') || 'none';
  const ago = (iso) => {
    if (!iso) return 'never';
    const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    return s < 120 ? `${s}s ago` : s < 7200 ? `${Math.round(s / 60)}m ago` : `${Math.round(s / 3600)}h ago`;
  };
  function table(headers, rows, id) {
    return h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { id },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            headers.map((x) => (typeof x === 'string' ? h('th', {}, x) : x)),
          ),
        ),
        h('tbody', {}, rows),
      ),
    );
  }

  async function api(method, path, body) {
    const headers = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (method === 'POST' && csrf) headers['x-llmgw-csrf'] = csrf;
    const res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok)
      throw Object.assign(new Error((data.error && data.error.message) || `HTTP ${res.status}`), {
        status: res.status,
      });
    return data;
  }

  function flash(text, link, isError) {
    const f = $('flash');
    f.replaceChildren(
      text,
      link ? h('span', {}, ' — ', h('a', { href: link, target: '_blank', rel: 'noopener' }, 'Temporal UI')) : '',
    );
    f.className = isError ? 'error' : '';
    f.hidden = false;
  }

  /** Asks before an action; `extra` may add an input whose value `confirmValue` reads. */
  function confirmAction(text, extra) {
    return new Promise((resolve) => {
      const d = $('confirm');
      $('confirm-text').textContent = text;
      $('confirm-extra').replaceChildren(...(extra ? [extra] : []));
      d.returnValue = '';
      d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
      d.showModal();
    });
  }

  async function act(text, path, body, extra) {
    if (!(await confirmAction(text, extra))) return;
    try {
      const r = await api('POST', path, typeof body === 'function' ? body() : body);
      flash(r.message || 'done', r.link, false);
    } catch (err) {
      if (err.status === 401) return signedOut();
      flash(err.message, null, true);
    }
  }

  function nodeActions(n) {
    const id = encodeURIComponent(n.id);
    return h(
      'div',
      { class: 'actions' },
      n.state === 'cordoned'
        ? h(
            'button',
            {
              'data-action': 'uncordon',
              onclick: () =>
                act(
                  `Uncordon ${n.id}? It takes new replicas again; a running drain of it ends first.`,
                  `/page/api/nodes/${id}/uncordon`,
                ),
            },
            'Uncordon',
          )
        : h(
            'button',
            {
              'data-action': 'cordon',
              onclick: () =>
                act(
                  `Cordon ${n.id}? It takes no new replicas; those on it keep running.`,
                  `/page/api/nodes/${id}/cordon`,
                ),
            },
            'Cordon',
          ),
      h(
        'button',
        {
          'data-action': 'drain',
          onclick: () =>
            act(
              `Drain ${n.id}? It is cordoned and its replicas move elsewhere, one at a time, each replacement serving before its original stops.`,
              `/page/api/nodes/${id}/drain`,
            ),
        },
        'Drain',
      ),
      h(
        'button',
        {
          'data-action': 'revoke',
          class: 'danger',
          onclick: () =>
            act(
              `Revoke every certificate of ${n.id}? The control plane refuses it at once and it cannot register again until it is onboarded anew.`,
              `/page/api/nodes/${id}/revoke`,
            ),
        },
        'Revoke',
      ),
    );
  }

  const SVG = 'http://www.w3.org/2000/svg';
  /** An SVG element (attributes only: presentation attributes, no style, as the CSP wants). */
  function svg(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    el.append(...children);
    return el;
  }
  const num = (x, unit) => {
    if (x === null || x === undefined) return '—';
    const r = x >= 100 ? Math.round(x) : x >= 10 ? Math.round(x * 10) / 10 : Math.round(x * 100) / 100;
    return `${r}${unit}`;
  };

  /**
   * A sparkline of requests/s per minute, oldest left, scaled to the hour's peak: a line over a faint area on a
   * baseline, a dot on the current minute. Stretched to the cell's width by CSS (preserveAspectRatio none).
   */
  function sparkline(t) {
    const W = 180;
    const H = 32;
    const max = Math.max(...t.rps);
    const step = W / (t.rps.length - 1);
    const xy = t.rps.map((v, i) => [i * step, H - 2 - (max ? (v / max) * (H - 5) : 0)]);
    const pts = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
    const [lx, ly] = xy[xy.length - 1];
    return svg(
      'svg',
      {
        class: 'spark',
        viewBox: `0 0 ${W} ${H}`,
        preserveAspectRatio: 'none',
        role: 'img',
        'aria-label': `requests/s per minute over the last hour, peak ${num(max, '/s')}`,
      },
      svg('title', {}, `requests/s per minute since ${new Date(t.since).toLocaleTimeString()}; peak ${num(max, '/s')}`),
      svg('line', { class: 'spark-base', x1: 0, y1: H - 1.5, x2: W, y2: H - 1.5 }),
      svg('polygon', { class: 'spark-area', points: `0,${H - 2} ${pts} ${W},${H - 2}` }),
      svg('polyline', { class: 'spark-line', points: pts }),
      svg('circle', { class: 'spark-now', cx: lx.toFixed(1), cy: ly.toFixed(1), r: 2 }),
    );
  }

  /** The overview's traffic table: each model's hour, or why there is none. */
  function traffic(list) {
    if (!Array.isArray(list)) return h('p', { class: 'warn', id: 'traffic' }, list.error);
    if (!list.length) return h('p', { class: 'muted', id: 'traffic' }, 'no models');
    return table(
      [
        'MODEL',
        'REQUESTS/S, LAST HOUR',
        h('th', { class: 'hide-narrow' }, 'NOW'),
        'TTFT P50',
        'TTFT P99',
        h('th', { class: 'hide-narrow' }, 'REQUESTS'),
      ],
      list.map((t) =>
        h(
          'tr',
          { 'data-traffic': t.model },
          h('td', {}, t.model),
          t.requests
            ? [
                h(
                  'td',
                  { class: 'spark-cell' },
                  sparkline(t),
                  h('div', { class: 'muted spark-peak' }, `peak ${num(Math.max(...t.rps), '/s')}`),
                ),
                h('td', { class: 'num hide-narrow' }, num(t.rps[t.rps.length - 1], '/s')),
                h('td', { class: 'num', 'data-p50': t.ttftP50Ms }, num(t.ttftP50Ms, ' ms')),
                h('td', { class: 'num', 'data-p99': t.ttftP99Ms }, num(t.ttftP99Ms, ' ms')),
                h(
                  'td',
                  { class: 'num hide-narrow' },
                  t.requests,
                  t.errors5xx || t.errors4xx
                    ? h('div', { class: 'muted' }, `${t.errors5xx} 5xx, ${t.errors4xx} 4xx`)
                    : null,
                ),
              ]
            : h('td', { class: 'muted', colspan: 5 }, 'no requests in the last hour'),
        ),
      ),
      'traffic',
    );
  }

  const RENDER = {
    overview(s) {
      const o = s.overview;
      const ready = o.models.reduce((a, m) => a + m.ready, 0);
      const desired = o.models.reduce((a, m) => a + m.desired, 0);
      const nodeTotal = Object.values(o.nodes).reduce((a, b) => a + b, 0);
      return [
        h(
          'div',
          { class: 'cards' },
          h(
            'div',
            { class: 'card', id: 'card-nodes' },
            h('div', { class: 'big' }, nodeTotal),
            'nodes',
            h('div', { class: 'sub' }, counts(o.nodes)),
          ),
          h(
            'div',
            { class: 'card', id: 'card-gpus' },
            h('div', { class: 'big' }, `${o.gpus.used}/${o.gpus.total}`),
            'GPUs used',
          ),
          h(
            'div',
            { class: 'card', id: 'card-replicas' },
            h(
              'div',
              { class: 'big' },
              Object.values(o.replicas).reduce((a, b) => a + b, 0),
            ),
            'replicas',
            h('div', { class: 'sub' }, counts(o.replicas)),
          ),
          h(
            'div',
            { class: 'card', id: 'card-models' },
            h('div', { class: 'big' }, `${ready}/${desired}`),
            'model replicas ready of desired',
          ),
        ),
        h('h2', {}, 'Warnings'),
        o.warnings.length
          ? h(
              'ul',
              { class: 'warnings', id: 'warnings' },
              o.warnings.map((w) => h('li', { class: 'warn' }, w)),
            )
          : h('p', { class: 'muted', id: 'warnings' }, 'none'),
        h('h2', {}, 'Models'),
        table(
          ['MODEL', 'DESIRED', 'READY', 'OTHERS', ''],
          o.models.map((m) =>
            h(
              'tr',
              { 'data-model': m.name },
              h('td', {}, m.name),
              h('td', {}, m.desired),
              h('td', {}, m.ready),
              h('td', {}, counts(m.others)),
              h(
                'td',
                {},
                h(
                  'button',
                  {
                    'data-action': 'scale',
                    onclick: () => {
                      const input = h('input', {
                        type: 'number',
                        min: 0,
                        max: 1000,
                        value: m.desired,
                        'aria-label': 'replicas',
                      });
                      act(
                        `Scale ${m.name} from ${m.desired} replicas to:`,
                        `/page/api/models/${encodeURIComponent(m.name)}/scale`,
                        () => ({ replicas: Number(input.value) }),
                        input,
                      );
                    },
                  },
                  'Scale…',
                ),
              ),
            ),
          ),
          'models',
        ),
        h('h2', {}, 'Requests/s and TTFT p50/p99 per model, last hour'),
        traffic(o.traffic),
      ];
    },
    nodes(s) {
      return table(
        [
          'NODE',
          'STATE',
          'GPUS (held by replica#rank)',
          'FABRIC',
          'ENGINES',
          h('th', { class: 'hide-narrow' }, 'CHECKS'),
          'CERT',
          h('th', { class: 'hide-narrow' }, 'LAST SEEN'),
          '',
        ],
        s.nodes.map((n) =>
          h(
            'tr',
            { 'data-node': n.id },
            h('td', {}, h('strong', {}, n.id), h('div', { class: 'muted' }, n.host)),
            h('td', {}, state(n.state)),
            h(
              'td',
              {},
              h('div', {}, `${n.gpusUsed}/${n.gpus.length}`),
              h(
                'div',
                { class: 'gpus' },
                n.gpus.map((g) =>
                  h(
                    'span',
                    { class: g.held ? 'gpu held' : 'gpu', title: `${g.name}, ${g.memoryMiB} MiB` },
                    `${g.index}${g.held ? `: ${g.held}` : ''}`,
                  ),
                ),
              ),
            ),
            h('td', { class: 'mono' }, n.fabric),
            h(
              'td',
              {},
              n.engines,
              n.engineProblems.map((p) => h('div', { class: 'error' }, p)),
            ),
            h('td', { class: 'hide-narrow' }, n.checks),
            h('td', { class: n.certWarning ? 'error' : '' }, n.cert),
            h('td', { class: 'hide-narrow' }, ago(n.lastSeen)),
            h('td', {}, nodeActions(n)),
          ),
        ),
        'nodes',
      );
    },
    fabrics(s) {
      const f = s.fabrics;
      return [
        table(
          ['FABRIC', 'SUBNET MANAGER', 'NODES (adapters)', 'WARNINGS'],
          f.fabrics.map((x) =>
            h(
              'tr',
              { 'data-fabric': x.key },
              h('td', {}, x.fabric, x.key !== x.fabric ? h('div', { class: 'muted' }, x.key) : null),
              h('td', { class: 'mono' }, x.smGuid || 'unknown'),
              h(
                'td',
                {},
                x.nodes.map((n) =>
                  h(
                    'div',
                    {},
                    state(n.state),
                    ' ',
                    n.id,
                    ` (${n.adapters.join(', ')})`,
                    n.strength !== 'sm-guid' ? h('span', { class: 'muted' }, ` ${n.strength}`) : null,
                  ),
                ),
              ),
              h(
                'td',
                {},
                x.warnings.map((w) => h('div', { class: 'warn' }, w)),
              ),
            ),
          ),
          'fabrics',
        ),
        h('h2', {}, 'Islands (no fabric: single-node replicas only)'),
        h('p', {}, f.islands.join(', ') || 'none'),
      ];
    },
    replicas(s) {
      return table(
        [
          'REPLICA',
          'MODEL / PROFILE',
          'STATE',
          'NODES[GPUS]',
          h('th', { class: 'hide-narrow' }, 'ENDPOINT'),
          'HISTORY',
        ],
        s.replicas.map((r) =>
          h(
            'tr',
            { 'data-replica': r.id, 'data-nodes': r.nodes.join(' ') },
            h('td', {}, r.id),
            h('td', {}, r.model, h('div', { class: 'muted' }, r.profile)),
            h('td', {}, state(r.state), r.reason ? h('div', { class: 'muted' }, r.reason) : null),
            h('td', { class: 'mono' }, r.shards.join(', ') || '-'),
            h('td', { class: 'mono hide-narrow' }, r.endpoint || '-'),
            h(
              'td',
              {},
              r.history.length
                ? h(
                    'details',
                    {},
                    h('summary', {}, `${r.history.length} event${r.history.length === 1 ? '' : 's'}`),
                    r.history.map((e) => h('div', { class: 'muted' }, `${ago(e.at)} ${e.kind}: ${e.message}`)),
                  )
                : '-',
            ),
          ),
        ),
        'replicas',
      );
    },
    workflows(s) {
      if (!Array.isArray(s.workflows)) return h('p', { class: 'error' }, s.workflows.error);
      return [
        h(
          'p',
          {},
          h('a', { href: s.temporalUi, target: '_blank', rel: 'noopener' }, 'All workflows in the Temporal UI'),
        ),
        table(
          ['WORKFLOW', 'TYPE', 'STARTED', 'PROGRESS'],
          s.workflows.map((w) =>
            h(
              'tr',
              { 'data-workflow': w.id },
              h('td', { class: 'mono' }, h('a', { href: w.link, target: '_blank', rel: 'noopener' }, w.id)),
              h('td', {}, w.type),
              h('td', {}, ago(w.startedAt)),
              h('td', {}, w.progress || ''),
            ),
          ),
          'workflows',
        ),
      ];
    },
    events(s) {
      return table(
        ['WHEN', 'KIND', 'WHAT'],
        s.events.map((e) =>
          h('tr', {}, h('td', { title: e.at }, ago(e.at)), h('td', { class: 'mono' }, e.kind), h('td', {}, e.message)),
        ),
        'events',
      );
    },
  };

  function currentView() {
    const v = location.hash.slice(1);
    return VIEWS.includes(v) ? v : 'overview';
  }
  function render() {
    const v = currentView();
    for (const a of document.querySelectorAll('nav a'))
      a.classList.toggle('active', a.getAttribute('href') === `#${v}`);
    if (!snap) return;
    const view = $('view');
    view.dataset.view = v;
    view.replaceChildren(...[RENDER[v](snap)].flat());
  }

  function setStatus(text, live) {
    $('status').textContent = text;
    $('status').className = live ? 'live' : 'stale';
  }

  function connect() {
    if (events) events.close();
    events = new EventSource('/page/api/events');
    events.addEventListener('snapshot', (e) => {
      snap = JSON.parse(e.data);
      setStatus(`live · ${new Date().toLocaleTimeString()}`, true);
      // Leave an open dialog's page alone: its numbers must not jump under the operator's finger.
      if (!$('confirm').open) render();
    });
    events.onopen = () => setStatus('live', true);
    events.onerror = async () => {
      setStatus('reconnecting…', false);
      try {
        await api('GET', '/page/api/session');
      } catch (err) {
        if (err.status === 401) signedOut();
      }
    };
  }

  function signedIn(session) {
    csrf = session.csrf;
    $('signin').hidden = true;
    $('tabs').hidden = false;
    $('signout').hidden = false;
    $('signout').title = `signed in as ${session.operator}`;
    connect();
    render();
  }
  function signedOut() {
    if (events) events.close();
    events = null;
    snap = null;
    csrf = null;
    $('view').replaceChildren();
    $('tabs').hidden = true;
    $('signout').hidden = true;
    $('signin').hidden = false;
    setStatus('signed out', false);
  }

  $('signin').addEventListener('submit', async (e) => {
    e.preventDefault();
    $('signin-error').textContent = '';
    try {
      const s = await api('POST', '/page/api/session', { key: $('key').value });
      $('key').value = '';
      signedIn(s);
    } catch (err) {
      $('signin-error').textContent = err.message;
    }
  });
  $('signout').addEventListener('click', async () => {
    await api('POST', '/page/api/signout').catch(() => undefined);
    signedOut();
  });
  $('confirm-cancel').addEventListener('click', () => ($('confirm').returnValue = 'cancel'));
  window.addEventListener('hashchange', render);
  api('GET', '/page/api/session').then(signedIn, signedOut);
})();
