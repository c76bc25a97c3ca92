'use strict';
// What every part of the explorer shares (window.Orgunit): building elements as text (never innerHTML), the FHIR
// client (the tab's token, every failure a readable ApiError: JSON, HTML or network, with its Retry-After), an error
// box with a Retry button, the short status a screen reader announces, and the formats of dates and numbers.
(function () {
  const T = window.OrgunitToken;
  const API = document.body.dataset.api;
  const O = (window.Orgunit = window.Orgunit || {});
  O.API = API;
  O.BOUNDARY = 'http://hl7.org/fhir/StructureDefinition/location-boundary-geojson';
  O.state = { generation: 0 }; // bumped when the token changes: answers to an older one are dropped

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'text') node.textContent = String(value);
      else if (key === 'class') node.className = value;
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
    return node;
  }
  O.el = el;

  class Refused extends Error {} // 401, or an answer to a previous token: nothing to show
  class ApiError extends Error {
    constructor(message, status, retryAfter) { super(message); this.status = status; this.retryAfter = retryAfter; }
  }
  class Missing extends ApiError {} // 404: unknown, or outside the token's scope
  O.Refused = Refused;
  O.ApiError = ApiError;
  O.Missing = Missing;

  const REASONS = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 408: 'Request Timeout',
    410: 'Gone', 429: 'Too Many Requests', 500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable',
    504: 'Gateway Timeout' };

  // Retry-After: seconds, or an HTTP date; null when absent or unreadable
  function retryAfter(response) {
    const raw = response.headers.get('Retry-After');
    if (!raw) return null;
    if (/^\d+$/.test(raw.trim())) return Number(raw.trim());
    const when = Date.parse(raw);
    return Number.isNaN(when) ? null : Math.max(0, Math.ceil((when - Date.now()) / 1000));
  }

  // why an answer is not the FHIR JSON asked for, as a person reads it
  async function failure(response) {
    const status = response.status;
    const reason = `${status} ${response.statusText || REASONS[status] || ''}`.trim();
    const type = response.headers.get('Content-Type') || '';
    let detail = '';
    if (/json/.test(type)) {
      try {
        const body = await response.json();
        const issue = (body.issue || [])[0] || {};
        detail = issue.diagnostics || (issue.details || {}).text || issue.code || '';
      } catch (error) { detail = 'its answer is not readable JSON'; }
    } else {
      detail = status >= 500 ? 'no FHIR answer: the server or a proxy in front of it is down or overloaded'
        : 'no FHIR answer';
    }
    const wait = retryAfter(response);
    const Kind = status === 404 || status === 410 ? Missing : ApiError;
    return new Kind(`The server answered ${reason}${detail ? `: ${detail}` : ''}.`, status, wait);
  }

  function url(path, params) {
    const target = new URL(API + path, location.href);
    for (const [name, value] of params || []) target.searchParams.append(name, value);
    return target;
  }
  O.url = url;

  // a FHIR request with the tab's token; `accept` for the explorer's own formats (GeoJSON); `raw`: the Response
  async function request(path, params, { signal, accept, raw } = {}) {
    const mine = O.state.generation;
    let response;
    try {
      // no-store: the server's ETag names the version, not the format; a revalidated cached HTML page would come back
      response = await fetch(url(path, params), { headers: T.headers(accept || 'application/fhir+json'), signal,
        cache: 'no-store' });
    } catch (error) {
      if (error.name === 'AbortError') throw error;
      if (mine !== O.state.generation) throw new Refused('stale');
      throw new ApiError('The server could not be reached (no answer: the network or the server is down).', 0, null);
    }
    if (mine !== O.state.generation) throw new Refused('stale');
    if (response.status === 401) {
      if (O.onUnauthorized) O.onUnauthorized();
      throw new Refused('401');
    }
    if (!response.ok) throw await failure(response);
    if (raw) return response;
    let body;
    try { body = await response.json(); } catch (error) {
      if (error.name === 'AbortError') throw error;
      if (mine !== O.state.generation) throw new Refused('stale');
      throw new ApiError('The server sent an answer that is not JSON (cut short, or a proxy\'s page).', response.status, null);
    }
    if (mine !== O.state.generation) throw new Refused('stale');
    return body;
  }
  O.fhir = (path, params, signal) => request(path, params, { signal });
  O.request = request;

  // the searchset's Locations (of a search mode), and its next page as [path, params]
  O.entries = (bundle, mode) => (bundle.entry || []).filter((e) => !mode || (e.search || {}).mode === mode)
    .map((entry) => entry.resource).filter((r) => r && r.resourceType === 'Location');
  O.nextPage = (bundle, path) => {
    const next = (bundle.link || []).find((link) => link.relation === 'next');
    return next ? [path, [...new URL(next.url).searchParams]] : null;
  };

  // a Parameters answer of $counts: total and its groups, each part by name
  O.counts = (parameters) => {
    const found = { total: 0, groups: [], count: 0 };
    for (const p of parameters.parameter || []) {
      if (p.name === 'total') found.total = p.valueInteger;
      else if (p.name === 'groups') found.count = p.valueInteger;
      else if (p.name === 'group') {
        const group = {};
        for (const part of p.part || []) {
          const key = Object.keys(part).find((k) => k.startsWith('value'));
          group[part.name] = part[key];
        }
        found.groups.push(group);
      }
    }
    return found;
  };

  // ------------------------------------------------------------------ what is shown

  // the short status a screen reader announces (the only live region: never a whole panel)
  O.announce = (text) => {
    const status = document.getElementById('status');
    if (status) status.textContent = text;
  };

  // an error as a person reads it, with a Retry button (disabled while the server's Retry-After runs)
  O.errorBox = (error, retry, what) => {
    const text = error instanceof ApiError ? error.message : `Something went wrong: ${error.message}`;
    const box = el('div', { class: 'error-box', role: 'alert' },
      el('p', { class: 'error', text: what ? `${what}: ${text}` : text }));
    if (retry) {
      const button = el('button', { type: 'button', class: 'retry', text: 'Retry' });
      button.addEventListener('click', () => { if (!button.disabled) retry(); });
      let wait = error.retryAfter || 0;
      if (wait > 0) { // not before the server's Retry-After: a countdown, then the button
        button.disabled = true;
        const tick = () => {
          if (wait <= 0) { button.disabled = false; button.textContent = 'Retry'; return; }
          button.textContent = `Retry (in ${wait} s, as the server asked)`;
          wait -= 1;
          setTimeout(tick, 1000);
        };
        tick();
      }
      box.append(button);
    }
    return box;
  };

  O.quiet = (error) => error instanceof Refused || error.name === 'AbortError';

  const numberFormat = new Intl.NumberFormat('en-GB');
  O.n = (value) => numberFormat.format(value);
  const dateFormat = new Intl.DateTimeFormat('en-GB', { dateStyle: 'medium', timeZone: 'UTC' });
  const instantFormat = new Intl.DateTimeFormat('en-GB', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' });
  O.formatDate = (text) => (text && !Number.isNaN(Date.parse(text)) ? dateFormat.format(new Date(text)) : text);
  O.formatInstant = (text) => (text && !Number.isNaN(Date.parse(text)) ? `${instantFormat.format(new Date(text))} UTC` : text);

  // ------------------------------------------------------------------ a Location as the explorer reads it

  O.typeText = (unit) => ((unit.type || [])[0] || {}).text || (((unit.type || [])[0] || {}).coding || [{}])[0].display || '';
  O.typeCode = (unit) => (((unit.type || [])[0] || {}).coding || [{}])[0].code || '';
  O.ext = (unit, suffix) => (unit.extension || []).find((e) => e.url === suffix || e.url.endsWith('/' + suffix));
  O.refId = (ref) => (ref && ref.reference && /^Location\/[^/]+$/.test(ref.reference) ? ref.reference.slice(9) : null);
  O.closed = (unit) => ((unit.operationalStatus || {}).code === 'C');
  O.flags = (unit) => [unit.status && unit.status !== 'active' ? unit.status : null, O.closed(unit) ? 'closed' : null].filter(Boolean);
  O.fhirHref = (reference) => `${API}/${reference}`;

  // a file the server streams (an export), fetched with the token and saved under `name`
  O.download = async (path, params, accept, name) => {
    const response = await request(path, params, { accept, raw: true });
    const blob = await response.blob();
    const link = el('a', { href: URL.createObjectURL(blob), download: name, hidden: 'hidden' });
    document.body.append(link);
    link.click();
    setTimeout(() => { URL.revokeObjectURL(link.href); link.remove(); }, 1000);
    return blob.size;
  };

  // text to the clipboard (an http page on a network address has no navigator.clipboard: the old way then)
  O.copy = async (text) => {
    if (navigator.clipboard && window.isSecureContext) {
      try { await navigator.clipboard.writeText(text); return true; } catch (error) { /* the old way below */ }
    }
    const area = el('textarea', { class: 'visually-hidden', 'aria-hidden': 'true' });
    area.value = text;
    document.body.append(area);
    area.select();
    const done = document.execCommand('copy');
    area.remove();
    return done;
  };
})();
