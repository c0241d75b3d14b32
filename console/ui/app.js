// peerlimit console: polls this node's /v1/cluster once a second and renders
// the answer with DOM APIs only. Keys are user data, so they reach the page
// only through text nodes and attributes set by the DOM, never through an
// HTML parser (ui_test.go greps for the sinks).
//
// The charts are hand-made SVG: a few polylines and areas need no library,
// and the page may fetch nothing at run time (no CDN; the node's
// Content-Security-Policy allows only its own origin).
'use strict';

const POLL_MS = 1000;
const WINDOW_MS = 5 * 60 * 1000; // what the charts show, and the samples kept
const MAX_SAMPLES = 300; // per member: 5 minutes at one sample a second
const STALE_MS = 5000; // a member's newest sample older than this is not "current"
const SKEW_MS = 10000; // how far behind the newest sample a member's may lag and still be waited for
const FETCH_TIMEOUT_MS = 5000;
const TOKEN_KEY = 'peerlimit.console.token';
// Relative to /ui/: works on any host, over TLS, and behind a path prefix.
const API = '../v1/';
const STATES = new Set(['alive', 'failed', 'left']);
const MEMBER_COLOURS = 8;

const state = {
  samples: new Map(), // member id -> samples, oldest first
  colours: new Map(), // member id -> palette index, stable across polls
  since: 0, // the next poll's since_ms (see nextSince)
  serverNow: 0, // the answering node's clock at its last answer
  skew: 0, // serverNow - Date.now() at that answer
  paused: false, // waiting for a token
  token: '', // the token, where sessionStorage is refused
  polling: false,
  timer: 0,
  topSig: '',
  inspectSeq: 0,
};

const $ = (id) => document.getElementById(id);
const SVG_NS = 'http://www.w3.org/2000/svg';

// el builds an element; children that are not nodes become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) {
    if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---- API ----------------------------------------------------------------

class APIError extends Error {
  constructor(status, body, network) {
    const e = (body && body.error) || {};
    super(e.message || (network ? 'the node cannot be reached' : `HTTP ${status}`));
    this.status = status;
    this.code = e.code || '';
    this.field = e.field || '';
    this.network = network;
  }
}

// The token lives in sessionStorage (gone with the tab), or in memory only
// where storage is refused.
function getToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || state.token; } catch { return state.token; }
}

function setToken(t) {
  state.token = t;
  try { sessionStorage.setItem(TOKEN_KEY, t); } catch { /* kept in memory */ }
}

// api GETs path under /v1/ with the session's token, if any. It throws an
// APIError for a non-2xx answer (and asks for a token on 401) or when the
// node cannot be reached.
async function api(path) {
  const headers = { Accept: 'application/json' };
  const token = getToken();
  if (token) headers.Authorization = 'Bearer ' + token;
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  let resp;
  let body = null;
  try {
    resp = await fetch(API + path, { headers, signal: ctl.signal, cache: 'no-store' });
    body = await resp.json().catch(() => null);
  } catch {
    throw new APIError(0, null, true);
  } finally {
    clearTimeout(timer);
  }
  if (resp.status === 401) askToken(token !== '');
  if (!resp.ok) throw new APIError(resp.status, body, false);
  return body;
}

function describeError(err) {
  if (err.network) return 'The node cannot be reached.';
  let s = `${err.status}${err.code ? ' ' + err.code : ''}`;
  if (err.field) s += ` (${err.field})`;
  return `${s}: ${err.message}`;
}

// ---- token ----------------------------------------------------------------

// askToken stops polling and shows the one token form until a token is given.
function askToken(refused) {
  state.paused = true;
  clearTimeout(state.timer);
  $('token-form').hidden = false;
  $('token-msg').textContent = refused ? 'That token was refused; try another.' : '';
  setHealth('bad', 'token required');
  $('token-input').focus();
}

function onTokenSubmit(ev) {
  ev.preventDefault();
  const t = $('token-input').value.trim();
  if (!t) return;
  setToken(t);
  $('token-input').value = '';
  $('token-form').hidden = true;
  state.paused = false;
  poll();
}

// ---- polling --------------------------------------------------------------

async function poll() {
  if (state.paused || state.polling) return;
  state.polling = true;
  try {
    const data = await api(`cluster?since_ms=${state.since}&top=10`);
    setBanner('');
    render(data);
  } catch (err) {
    if (err.status !== 401) showPollError(err);
  } finally {
    state.polling = false;
    clearTimeout(state.timer);
    if (!state.paused) state.timer = setTimeout(poll, POLL_MS);
  }
}

function showPollError(err) {
  if (!(err instanceof APIError)) {
    setBanner(`Could not show the node's answer (${err.message}); retrying…`);
    return;
  }
  if (err.network) {
    setBanner('Disconnected from the node, retrying every second…');
    setHealth('bad', 'node unreachable');
    return;
  }
  setBanner(`The node answered ${describeError(err)} Retrying…`);
  setHealth('bad', `error ${err.status}`);
}

function setBanner(text) {
  const b = $('banner');
  b.textContent = text;
  b.hidden = text === '';
}

function setHealth(level, text) {
  const h = $('health');
  h.className = 'pill pill-' + level;
  h.textContent = text;
}

function render(d) {
  if (!d || !Array.isArray(d.members)) throw new Error('not a /v1/cluster answer');
  state.serverNow = d.time_ms;
  state.skew = d.time_ms - Date.now();
  const members = d.members || [];
  mergeSamples(members);
  renderHeader(d, members);
  renderMembers(members, d.self);
  renderCharts(members);
  renderTop(d.top);
}

// mergeSamples adds each member's new samples to those kept, drops members
// gone from the list, and keeps only the last WINDOW_MS (MAX_SAMPLES).
function mergeSamples(members) {
  const ids = new Set(members.map((m) => m.id));
  for (const id of [...state.samples.keys()]) {
    if (!ids.has(id)) state.samples.delete(id);
  }
  const cutoff = state.serverNow - WINDOW_MS;
  for (const m of members) {
    if (!state.colours.has(m.id)) state.colours.set(m.id, state.colours.size % MEMBER_COLOURS);
    const kept = state.samples.get(m.id) || [];
    let last = kept.length ? kept[kept.length - 1].time_ms : -Infinity;
    for (const s of m.samples || []) {
      if (s.time_ms > last) { kept.push(s); last = s.time_ms; }
    }
    let drop = 0;
    while (drop < kept.length && kept[drop].time_ms <= cutoff) drop++;
    kept.splice(0, Math.max(drop, kept.length - MAX_SAMPLES));
    state.samples.set(m.id, kept);
  }
  state.since = nextSince(members);
}

// nextSince is the oldest of the answering members' newest samples: each
// member stamps its samples with its own clock, and asking from the newest
// of all would skip the samples of a member whose clock runs a little
// behind. Repeats are dropped on merging. A member lagging over SKEW_MS is
// not waited for, lest a stalled one make every poll fetch 5 minutes.
function nextSince(members) {
  let oldest = Infinity;
  let newest = state.since;
  for (const m of members) {
    const kept = state.samples.get(m.id) || [];
    if (m.error || !kept.length) continue;
    const t = kept[kept.length - 1].time_ms;
    oldest = Math.min(oldest, t);
    newest = Math.max(newest, t);
  }
  return oldest === Infinity ? newest : Math.max(oldest, newest - SKEW_MS);
}

// ---- header and members ---------------------------------------------------

function renderHeader(d, members) {
  $('self').textContent = d.self || '?';
  $('clock').textContent = 'at ' + new Date(d.time_ms).toLocaleTimeString([], { hour12: false });
  const count = (st) => members.filter((m) => m.state === st).length;
  const alive = count('alive');
  const failed = count('failed');
  const left = count('left');
  // A failed member is not asked; an alive one that did not answer is news.
  const silent = members.filter((m) => m.error && m.state === 'alive').length;
  // Alive members serving other policies or Envoy rules than this node
  // decide the same request differently: news, like a failed one.
  const differ = members.filter((m) => m.state === 'alive' && configDiffers(m).length).length;
  // A member with a fault injected on purpose (a wrong clock, an open
  // peer port) must not serve real traffic: news as well.
  const faulty = members.filter((m) => m.state === 'alive' && m.fault_injection === true).length;
  let text = `${alive} of ${members.length} members alive`;
  if (failed) text += ` · ${failed} failed`;
  if (left) text += ` · ${left} left`;
  if (silent) text += ` · ${silent} not answering`;
  if (differ) text += ` · ${differ} on another config`;
  if (faulty) text += ` · ${faulty} with fault injection`;
  let level = 'ok';
  if (alive * 2 <= members.length) level = 'bad';
  else if (failed || silent || differ || faulty) level = 'warn';
  setHealth(level, text);
}

const configDiffers = (m) => (Array.isArray(m.config_differs) ? m.config_differs : []);

// configCell shows the digests a member advertises, by source (the first
// 12 hex digits of each configuration's SHA-256), marking with ≠ those
// that differ from this node's. — when it advertises none (not alive, or
// a version before digests): unknown, not different.
function configCell(m) {
  if (!m.config || typeof m.config !== 'object') {
    return el('td', { class: 'config muted', title: 'advertises no configuration digests' }, '—');
  }
  const differs = new Set(configDiffers(m));
  const sources = [...new Set([...Object.keys(m.config), ...differs])].sort();
  if (!sources.length) return el('td', { class: 'config muted', title: 'serves no policies nor Envoy rules' }, 'none');
  const chips = sources.map((src) => {
    const d = typeof m.config[src] === 'string' ? m.config[src] : '';
    const bad = differs.has(src);
    const title = `${src}: ${d ? 'sha256:' + d + '…' : 'not served'}` + (bad ? ', differs from this node\'s' : '');
    return el('span', { class: 'digest' + (bad ? ' differs' : ''), 'data-source': src, title },
      (bad ? '≠ ' : '') + src + ' ', el('span', { class: 'mono' }, d ? d.slice(0, 7) : 'none'));
  });
  return el('td', { class: 'config' }, ...chips);
}

const num = (x) => (typeof x === 'number' && isFinite(x) ? x : 0);

// rates sums one sample's per-second counts the way the table and charts
// show them: checks are every check clients sent to the member, by route.
function rates(s) {
  const local = num(s.local_allowed) + num(s.local_denied);
  const fwd = num(s.forwarded_allowed) + num(s.forwarded_denied);
  const fallback = num(s.fallback_allowed) + num(s.fallback_denied);
  const checks = local + fwd + fallback;
  return {
    local, fwd, fallback, checks,
    allowed: num(s.local_allowed) + num(s.forwarded_allowed) + num(s.fallback_allowed),
    denied: num(s.local_denied) + num(s.forwarded_denied) + num(s.fallback_denied),
    fwdShare: checks > 0 ? fwd / checks : null,
    degraded: num(s.degraded),
    handoff: num(s.handoff_keys),
  };
}

// RATE_WINDOW_MS is what a member's rates in the table average over: a
// second's rate alone reads 0 the moment traffic pauses, and jumps with
// every burst.
const RATE_WINDOW_MS = 10000;

// recentRates averages rates() over a member's samples of the last
// RATE_WINDOW_MS before its newest (one a second, so up to ten; fewer
// for a member that has just started); null without a current sample.
function recentRates(id) {
  const list = state.samples.get(id) || [];
  const newest = list[list.length - 1];
  if (!newest || state.serverNow - newest.time_ms > STALE_MS) return null;
  const recent = list.filter((s) => s.time_ms > newest.time_ms - RATE_WINDOW_MS);
  const sum = { local: 0, fwd: 0, fallback: 0, checks: 0, allowed: 0, denied: 0, degraded: 0, handoff: 0 };
  for (const s of recent) {
    const r = rates(s);
    for (const k of Object.keys(sum)) sum[k] += r[k];
  }
  for (const k of Object.keys(sum)) sum[k] /= recent.length;
  sum.fwdShare = sum.checks > 0 ? sum.fwd / sum.checks : null;
  return sum;
}

function newestSample(id) {
  const list = state.samples.get(id) || [];
  const s = list[list.length - 1];
  return s && state.serverNow - s.time_ms <= STALE_MS ? s : null;
}

function renderMembers(members, self) {
  const rows = members.map((m) => memberRow(m, m.id === self));
  if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: '14', class: 'muted' }, 'no members')));
  document.querySelector('#members tbody').replaceChildren(...rows);
}

function memberRow(m, isSelf) {
  const st = STATES.has(m.state) ? m.state : 'unknown';
  // A member that could not be asked has no current rates, only old ones.
  const s = m.error ? null : newestSample(m.id);
  const r = s ? recentRates(m.id) : null;
  const cell = (v, cls) => el('td', { class: 'num' + (cls ? ' ' + cls : '') }, v);
  const dash = '—';
  const ring = el('td', { class: 'num', title: `${num(m.partitions)} partitions` }, fmtPct(num(m.share)));
  const config = !m.config ? 'unknown' : configDiffers(m).length ? 'differs' : 'same';
  return el('tr', { 'data-member': m.id, 'data-state': m.state, 'data-config': config, class: 'row-' + st },
    el('td', { class: 'mid' }, m.id, isSelf ? el('span', { class: 'badge' }, 'this node') : null,
      m.fault_injection === true
        ? el('span', { class: 'badge badge-fault', title: 'runs with a fault injected on purpose (--fault-clock-*, --insecure-open-peers): never for real traffic' }, 'fault injection')
        : null),
    el('td', {}, el('span', { class: 'state state-' + st }, m.state)),
    el('td', { class: 'mono' }, m.grpc_addr || ''),
    ring,
    cell(r ? fmtRate(r.checks) : dash, 'strong'),
    cell(r ? fmtRate(r.denied) : dash, r && r.denied > 0 ? 'denied' : ''),
    cell(r && r.fwdShare !== null ? fmtPct(r.fwdShare) : dash),
    cell(r ? fmtRate(r.fallback) : dash, r && r.fallback > 0 ? 'warn' : ''),
    cell(r ? fmtRate(r.degraded) : dash, r && r.degraded > 0 ? 'warn' : ''),
    cell(s ? fmtMsOrDash(s.forward_p99_ms) : dash),
    cell(s ? fmtMsOrDash(s.replication_lag_p99_ms) : dash),
    cell(r ? fmtRate(r.handoff) : dash),
    el('td', { class: 'error' }, m.error || ''),
    configCell(m));
}

// ---- charts ---------------------------------------------------------------

// Each chart is drawn at its element's own pixel width (the viewBox follows
// it), so that its labels keep their size whatever the layout.
const CHART = { h: 170, left: 42, right: 10, top: 10, bottom: 22 };
const GAP_MS = 3500; // a line breaks where samples are missing for longer
const sec = (ms) => Math.floor(ms / 1000) * 1000;

// sumOverMembers sums pick(sample) over members, per whole second. Members
// sample at their own moments: each counts once a second (its last sample
// in it), and the seconds past the newest one that every member reporting
// now has reached are left out, lest a half-counted second look like a drop.
function sumOverMembers(pick) {
  const buckets = new Map();
  let complete = Infinity;
  for (const list of state.samples.values()) {
    if (!list.length) continue;
    const own = new Map();
    for (const s of list) own.set(sec(s.time_ms), pick(s));
    for (const [b, v] of own) buckets.set(b, (buckets.get(b) || 0) + v);
    const last = list[list.length - 1].time_ms;
    if (state.serverNow - last <= STALE_MS) complete = Math.min(complete, sec(last));
  }
  // The oldest second is cut by the window's edge: some members' samples in
  // it are already dropped.
  const oldest = sec(state.serverNow - WINDOW_MS);
  return [...buckets.entries()].filter(([b]) => b > oldest && b <= complete).sort((a, b) => a[0] - b[0]);
}

function renderCharts(members) {
  drawChart('route', [
    { name: 'local', cls: 'c-local', pts: sumOverMembers((s) => rates(s).local) },
    { name: 'forwarded', cls: 'c-fwd', pts: sumOverMembers((s) => rates(s).fwd) },
    { name: 'fallback', cls: 'c-fallback', pts: sumOverMembers((s) => rates(s).fallback) },
  ], true);
  drawChart('outcome', [
    { name: 'allowed', cls: 'c-allowed', pts: sumOverMembers((s) => rates(s).allowed) },
    { name: 'denied', cls: 'c-denied', pts: sumOverMembers((s) => rates(s).denied) },
  ], false);
  drawChart('p99', members.map((m) => ({
    name: m.id,
    cls: 'm' + state.colours.get(m.id),
    pts: (state.samples.get(m.id) || []).map((s) => [s.time_ms, s.forward_p99_ms]),
  })), false);
  drawChart('degraded', [
    { name: 'degraded', cls: 'c-degraded', pts: sumOverMembers((s) => num(s.degraded)) },
  ], false);
}

// drawChart replaces the SVG #chart-<id> with the series over the last
// WINDOW_MS: stacked areas or lines, a y axis from 0 and time labels.
function drawChart(id, series, stacked) {
  const svg = $('chart-' + id);
  const w = Math.max(240, Math.round(svg.getBoundingClientRect().width) || 480);
  svg.setAttribute('viewBox', `0 0 ${w} ${CHART.h}`);
  const t0 = state.serverNow - WINDOW_MS;
  const data = stacked ? stack(series) : series;
  const yMax = niceMax(Math.max(0, ...data.flatMap((s) => s.pts.map((p) => num(p[1])))));
  const x = (t) => CHART.left + ((t - t0) / WINDOW_MS) * (w - CHART.left - CHART.right);
  const y = (v) => CHART.h - CHART.bottom - (v / yMax) * (CHART.h - CHART.top - CHART.bottom);
  const nodes = axes(w, x, y, yMax, t0);
  for (const s of data) {
    if (stacked) nodes.push(area(s, x, y));
    // A stacked layer's edge is drawn only where the layer has a thickness,
    // so that an idle route does not outline the layers under it.
    const line = stacked ? s.pts.map(([t, v, own]) => [t, own > 0 ? v : null]) : s.pts;
    for (const seg of segments(line, t0)) {
      nodes.push(svgEl('polyline', { class: 'line ' + s.cls, points: seg.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ') }));
    }
  }
  if (!data.some((s) => s.pts.some((p) => p[0] > t0 && p[1] !== null))) {
    nodes.push(svgEl('text', { class: 'nodata', x: w / 2, y: CHART.h / 2, 'text-anchor': 'middle' }, 'no data yet'));
  }
  svg.replaceChildren(...nodes);
  $('legend-' + id).replaceChildren(...series.map((s) =>
    el('span', { class: 'key ' + s.cls }, el('i', { class: 'swatch' }), s.name)));
}

// stack turns series over the same seconds into cumulative ones: points
// [t, top, own value], with the layer below as base.
function stack(series) {
  let base = new Map();
  return series.map((s) => {
    const next = new Map();
    const pts = s.pts.map(([t, v]) => {
      const top = (base.get(t) || 0) + num(v);
      next.set(t, top);
      return [t, top, num(v)];
    });
    const lower = base;
    base = next;
    return { ...s, pts, base: lower };
  });
}

function area(s, x, y) {
  const pts = s.pts.filter((p) => p[0] >= state.serverNow - WINDOW_MS);
  if (!pts.length) return svgEl('g');
  const upper = pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
  const lower = pts.slice().reverse().map(([t]) => `${x(t).toFixed(1)},${y(s.base.get(t) || 0).toFixed(1)}`);
  return svgEl('polygon', { class: 'area ' + s.cls, points: upper.concat(lower).join(' ') });
}

// segments splits points into runs without nulls or gaps of over GAP_MS.
function segments(pts, t0) {
  const out = [];
  let cur = [];
  let prev = -Infinity;
  for (const [t, v] of pts) {
    if (t < t0) continue;
    if (v === null || v === undefined || t - prev > GAP_MS) {
      if (cur.length) out.push(cur);
      cur = [];
    }
    if (v !== null && v !== undefined) cur.push([t, v]);
    prev = t;
  }
  if (cur.length) out.push(cur);
  // A lone point is still worth seeing: draw it as a short flat stroke.
  return out.map((seg) => (seg.length === 1 ? [seg[0], [seg[0][0] + 500, seg[0][1]]] : seg));
}

function axes(w, x, y, yMax, t0) {
  const nodes = [];
  for (let i = 0; i <= 4; i++) {
    const v = (yMax * i) / 4;
    const yy = y(v).toFixed(1);
    nodes.push(svgEl('line', { class: i ? 'grid' : 'axis', x1: CHART.left, x2: w - CHART.right, y1: yy, y2: yy }));
    nodes.push(svgEl('text', { class: 'tick', x: CHART.left - 6, y: yy, 'text-anchor': 'end', 'dominant-baseline': 'middle' }, fmtTick(v)));
  }
  for (let m = 0; m <= 5; m++) {
    const t = t0 + m * 60000;
    const label = m === 5 ? 'now' : `−${5 - m}m`;
    const anchor = m === 0 ? 'start' : m === 5 ? 'end' : 'middle';
    nodes.push(svgEl('text', { class: 'tick', x: x(t).toFixed(1), y: CHART.h - 6, 'text-anchor': anchor }, label));
  }
  return nodes;
}

// niceMax rounds v up to 1, 2, 4, 6 or 8 times a power of ten, so that the
// axis's quarters read as round numbers.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 4, 6, 8, 10]) if (v <= m * p * 1.0000001) return m * p;
  return 10 * p;
}

// ---- top keys -------------------------------------------------------------

function renderTop(top) {
  if (!top) return;
  const secs = Math.max(0, Math.round((state.serverNow - top.since_ms) / 1000));
  let span = `last ${secs} s`;
  if (top.members_answered < top.members_asked) {
    span += ` · only ${top.members_answered} of ${top.members_asked} members answered`;
  }
  $('top-span').textContent = span;
  // Rebuilt only when changed, so that a click is never lost to a rebuild.
  const sig = JSON.stringify([top.checks, top.denials]);
  if (sig === state.topSig) return;
  state.topSig = sig;
  $('top-checks').replaceChildren(...topItems(top.checks || [], 'no checks in this span'));
  $('top-denials').replaceChildren(...topItems(top.denials || [], 'no denials in this span'));
}

function topItems(items, empty) {
  if (!items.length) return [el('li', { class: 'empty muted' }, empty)];
  const max = Math.max(1, ...items.map((it) => num(it.count)));
  return items.map((it) => {
    const bar = el('span', { class: 'bar' });
    bar.style.width = ((100 * num(it.count)) / max).toFixed(1) + '%';
    return el('li', { 'data-key': it.key },
      bar,
      el('button', { type: 'button', class: 'keybtn', title: 'inspect this key' }, it.key),
      el('span', { class: 'n' }, fmtCount(it.count),
        num(it.error) > 0 ? el('span', { class: 'pm' }, ' ±' + fmtCount(it.error)) : null));
  });
}

function onTopClick(ev) {
  const li = ev.target.closest('[data-key]');
  if (!li) return;
  $('inspect-key').value = li.getAttribute('data-key');
  inspect();
}

// ---- inspect --------------------------------------------------------------

async function inspect() {
  const key = $('inspect-key').value;
  if (key === '') return;
  const limit = $('inspect-limit').value.trim();
  let q = 'inspect?key=' + encodeURIComponent(key);
  if (limit) q += '&limit=' + encodeURIComponent(limit);
  const seq = ++state.inspectSeq;
  const box = $('inspect-result');
  box.replaceChildren(el('p', { class: 'muted' }, 'inspecting…'));
  try {
    const r = await api(q);
    if (seq === state.inspectSeq) box.replaceChildren(...inspectView(r));
  } catch (err) {
    if (seq === state.inspectSeq) box.replaceChildren(el('p', { class: 'errbox' }, describeError(err)));
  }
}

function inspectView(r) {
  const head = el('dl', { class: 'facts' },
    el('dt', {}, 'key'), el('dd', { class: 'mono' }, r.key),
    el('dt', {}, 'owner'), el('dd', {}, r.owner || '—'),
    el('dt', {}, 'replica'), el('dd', {}, r.replica || 'none'),
    el('dt', {}, 'partition'), el('dd', {}, String(r.partition)),
    el('dt', {}, 'leases'), el('dd', { class: 'leases' }, leasesText(r.leases || [])),
    el('dt', {}, 'reservations'), el('dd', { class: 'reservations' }, reservationsText(r.reservations || [])));
  const limits = r.limits || [];
  if (!limits.length) return [head, el('p', { class: 'muted' }, 'The owner holds no state for this key.')];
  return [head, ...limits.map(limitView)];
}

// algorithmNames are the API's algorithm names as the page says them; an
// algorithm a newer owner knows and this page does not shows as it came.
const algorithmNames = {
  SLIDING_WINDOW_COUNTER: 'sliding window counter',
  SLIDING_WINDOW_LOG: 'sliding window log',
  GCRA: 'GCRA token bucket',
  CONCURRENCY: 'concurrency slots',
};

function limitView(l) {
  const algo = algorithmNames[l.algorithm] || l.algorithm;
  const rows = [];
  const row = (k, v) => rows.push(el('dt', {}, k), el('dd', {}, v));
  if (l.counter && l.calendar) {
    row('this period', `${fmtCount(l.counter.current)} (began ${fmtMs(Date.now() + state.skew - l.counter.window_start_ms)} ago)`);
  } else if (l.counter) {
    row('previous window', fmtCount(l.counter.previous));
    row('current window', `${fmtCount(l.counter.current)} (began ${fmtMs(Date.now() + state.skew - l.counter.window_start_ms)} ago)`);
  }
  if (l.log) row('entries', logAges(l.log.entries_age_ms || []));
  row('reset after', fmtMs(l.reset_after_ms));
  if (l.next_allow_ms !== undefined && l.next_allow_ms !== null) {
    row('next allowed', l.next_allow_ms > 0 ? 'in ' + fmtMs(l.next_allow_ms) : 'now');
  }
  return el('div', { class: 'limit' },
    el('div', { class: 'limit-head' },
      el('span', { class: 'algo' }, `${algo} · ${fmtLimitWindow(l)}`),
      el('span', { class: 'count' }, fmtCount(l.count)),
      el('span', { class: 'muted' }, ' counted now')),
    el('dl', { class: 'facts' }, ...rows));
}

// leasesText says which members hold budget leases on the key: hits of its
// limit the owner lent them, to admit without asking it.
function leasesText(leases) {
  if (!leases.length) return 'none';
  return leases.map((l) => `${fmtCount(l.hits)} lent to ${l.holder} (${fmtMs(l.expires_in_ms)} left)`).join('; ');
}

// reservationsText lists the reservations open on the key: hits counted
// until settled, or until they expire (as used; a hold: released).
function reservationsText(rs) {
  if (!rs.length) return 'none';
  const total = rs.reduce((n, r) => n + r.hits, 0);
  const shown = rs.slice(0, 5).map((r) => `${fmtCount(r.hits)}${r.hold ? ' held' : ''} (${fmtLimitWindow(r)} window, ${fmtMs(r.expires_in_ms)} left)`);
  const more = rs.length > 5 ? `; ${rs.length - 5} more` : '';
  return `${rs.length} open, ${fmtCount(total)} hits: ${shown.join('; ')}${more}`;
}

function logAges(ages) {
  const shown = ages.slice(0, 24).map((a) => fmtMs(a));
  if (!ages.length) return 'none';
  let s = `${ages.length}, aged ${shown.join(', ')}`;
  if (ages.length > shown.length) s += `, … ${ages.length - shown.length} more`;
  return s;
}

// ---- formatting -----------------------------------------------------------

function fmtRate(v) {
  v = num(v);
  if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
  if (v >= 1e3) return (v / 1e3).toFixed(1) + 'k';
  if (v >= 10 || Number.isInteger(v)) return Math.round(v).toString();
  return v.toFixed(1);
}

// fmtTick keeps an axis's quarters exact (0.25, not 0.3).
const fmtTick = (v) => (v >= 1000 ? fmtRate(v) : String(Number(v.toFixed(2))));
const fmtCount = (v) => num(v).toLocaleString('en-US');
const fmtPct = (f) => (100 * f).toFixed(f > 0 && f < 0.1 ? 1 : 0) + '%';

function fmtMsOrDash(v) {
  return typeof v === 'number' ? (v < 10 ? v.toFixed(2) : v.toFixed(0)) + ' ms' : '—';
}

function fmtMs(ms) {
  ms = Math.max(0, num(ms));
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return fmtWindow(Math.round(ms / 1000) * 1000);
}

// fmtWindow writes a duration as Go does (1m, 1h30m, 10s), as the policies
// file and the CLI do.
// fmtLimitWindow names a limit's window: its length, or a calendar
// quota's period ("calendar month in Europe/Paris").
function fmtLimitWindow(l) {
  if (l.calendar) return `calendar ${String(l.calendar).toLowerCase()} in ${l.time_zone || 'UTC'}`;
  return fmtWindow(l.window_ms);
}

function fmtWindow(ms) {
  ms = num(ms);
  if (ms % 1000) return ms + 'ms';
  let s = ms / 1000;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return (h ? h + 'h' : '') + (m ? m + 'm' : '') + (s || (!h && !m) ? s + 's' : '');
}

// ---- start ----------------------------------------------------------------

function start() {
  $('token-form').addEventListener('submit', onTokenSubmit);
  $('inspect-form').addEventListener('submit', (ev) => { ev.preventDefault(); inspect(); });
  $('top-checks').addEventListener('click', onTopClick);
  $('top-denials').addEventListener('click', onTopClick);
  poll();
}

start();
