'use strict';
// The explorer: the pyramid as a tree ($children, level by level, from the roots the token sees), find by name,
// code or id, a detail pane and a map. The selected unit and the search are in the URL (#unit=..&q=..): reload,
// Back and a shared link restore them. Every cache and screen is cleared when the token changes. Every value from
// the data goes into the page through textContent (never innerHTML); it calls only the FHIR API.
(function () {
  const T = window.OrgunitToken;
  const API = document.body.dataset.api;
  const TILES = document.body.dataset.tiles || '';
  const BOUNDARY = 'http://hl7.org/fhir/StructureDefinition/location-boundary-geojson';
  const PAGE = 20; // search results per page
  const MAX_POINTS = 1000; // descendants drawn on a map
  const $ = (id) => document.getElementById(id);
  const units = new Map(); // id -> Location, as found by a search (no boundary: searches leave it out)
  const full = new Map(); // id -> Location (or a 404's error), as read (with its boundary)
  let generation = 0; // bumped when the token changes: answers to an older one are dropped
  let selection = 0;
  let current = null; // the id shown in the detail

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'text') node.textContent = String(value);
      else if (key === 'class') node.className = value;
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  class Refused extends Error {} // 401, or an answer to a previous token: nothing to show
  class Missing extends Error {} // 404: unknown, or outside the token's scope

  async function fhir(path, params, signal) {
    const mine = generation;
    const url = new URL(API + path, location.href);
    for (const [name, value] of params || []) url.searchParams.append(name, value);
    // no-store: the server's ETag names the version, not the format; a revalidated cached HTML page would come back
    const response = await fetch(url, { headers: T.headers('application/fhir+json'), signal, cache: 'no-store' });
    if (mine !== generation) throw new Refused('stale');
    if (response.status === 401) {
      T.forget();
      reset();
      showLogin('The server refused this token (401): it may have expired. Paste a valid one.');
      throw new Refused('401');
    }
    const body = await response.json();
    if (mine !== generation) throw new Refused('stale');
    if (!response.ok) {
      const issue = (body.issue || [])[0] || {};
      const Kind = response.status === 404 ? Missing : Error;
      throw new Kind(`HTTP ${response.status}: ${issue.diagnostics || issue.code || 'error'}`);
    }
    return body;
  }

  function entries(bundle, mode) {
    const found = (bundle.entry || []).filter((e) => !mode || (e.search || {}).mode === mode)
      .map((entry) => entry.resource).filter((r) => r && r.resourceType === 'Location');
    for (const unit of found) units.set(unit.id, unit);
    return found;
  }

  function nextPage(bundle, path) {
    const next = (bundle.link || []).find((link) => link.relation === 'next');
    return next ? [path, [...new URL(next.url).searchParams]] : null;
  }

  async function read(id) {
    if (!full.has(id)) full.set(id, fhir(`/Location/${encodeURIComponent(id)}`));
    try { return await full.get(id); } catch (error) { if (!(error instanceof Missing)) full.delete(id); throw error; }
  }

  const typeText = (unit) => ((unit.type || [])[0] || {}).text || (((unit.type || [])[0] || {}).coding || [{}])[0].display || '';
  const ext = (unit, suffix) => (unit.extension || []).find((e) => e.url === suffix || e.url.endsWith('/' + suffix));
  const refId = (ref) => (ref && ref.reference && /^Location\/[^/]+$/.test(ref.reference) ? ref.reference.slice(9) : null);
  const fhirHref = (reference) => `${API}/${reference}`;
  const closed = (unit) => ((unit.operationalStatus || {}).code === 'C');
  const flags = (unit) => [unit.status && unit.status !== 'active' ? unit.status : null, closed(unit) ? 'closed' : null].filter(Boolean);
  const dateFormat = new Intl.DateTimeFormat('en-GB', { dateStyle: 'medium', timeZone: 'UTC' });
  const instantFormat = new Intl.DateTimeFormat('en-GB', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' });
  const formatDate = (text) => (text && !Number.isNaN(Date.parse(text)) ? dateFormat.format(new Date(text)) : text);
  const formatInstant = (text) => (text && !Number.isNaN(Date.parse(text)) ? `${instantFormat.format(new Date(text))} UTC` : text);

  // the map pane (map.js): drawn from the same API helpers
  const mapView = window.OrgunitMap({ fhir, read, nextPage, el, pick, MAX_POINTS, BOUNDARY, TILES });

  // ------------------------------------------------------------------ the URL: #unit=..&q=..&type=..&status=..

  const hashState = () => new URLSearchParams(location.hash.slice(1));

  function setHash(changes, push) {
    const state = hashState();
    for (const [key, value] of Object.entries(changes)) { if (value) state.set(key, value); else state.delete(key); }
    const hash = state.toString() ? `#${state}` : '';
    if (hash === location.hash || (!hash && !location.hash)) return;
    history[push ? 'pushState' : 'replaceState'](null, '', hash || location.pathname + location.search);
  }

  function applyHash() {
    const state = hashState();
    search.value = state.get('q') || '';
    $('type-filter').dataset.wanted = state.get('type') || '';
    $('type-filter').value = state.get('type') || '';
    $('status-filter').value = state.get('status') || '';
    find(false);
    const id = state.get('unit');
    if (id && id !== current) { select(id, false); reveal(id); } else if (!id && current) clearDetail();
  }

  window.addEventListener('popstate', () => { if (T.get()) applyHash(); });

  // ------------------------------------------------------------------ login, token change

  function showLogin(message) {
    $('login').hidden = false;
    $('app').hidden = true;
    T.showState();
    T.showError(message || '');
    $('token-input').focus();
  }

  function clearDetail() {
    current = null;
    selection += 1;
    $('detail').replaceChildren(el('p', { class: 'note', text: 'Select a unit in the tree or find it by name.' }));
    mapView.clear();
  }

  // everything the previous token saw leaves the page: caches, tree, results, detail, map
  function reset() {
    generation += 1;
    if (pending) pending.abort();
    units.clear();
    full.clear();
    tree.replaceChildren();
    results.replaceChildren();
    $('results-note').textContent = '';
    $('more-results').hidden = true;
    $('type-filter').replaceChildren(el('option', { value: '', text: 'any' }));
    clearDetail();
  }

  function start() {
    reset();
    $('login').hidden = true;
    $('app').hidden = false;
    T.showState();
    loadTypes();
    loadRoots().then(applyHash, () => {});
  }

  // ------------------------------------------------------------------ tree

  const tree = $('tree');

  function treeItem(unit, level) {
    const twisty = el('span', { class: 'twisty', 'aria-hidden': 'true' });
    const link = el('a', { href: `#unit=${encodeURIComponent(unit.id)}`, tabindex: '-1', class: 'label', text: unit.name || unit.id });
    const code = (((unit.type || [])[0] || {}).coding || [{}])[0].code; // the type's short name, its name as title
    const row = el('div', { class: 'row' }, twisty, link, el('span', { class: 'meta', title: typeText(unit) || null, text: code || typeText(unit) }),
      ...flags(unit).map((flag) => el('span', { class: `flag ${flag}`, text: flag })));
    const gone = closed(unit) || unit.status === 'inactive';
    const item = el('li', { role: 'treeitem', 'aria-level': level, 'aria-expanded': 'false', 'aria-selected': 'false',
      tabindex: '-1', 'data-id': unit.id, class: `unknown${gone ? ' gone' : ''}` }, row); // unknown: children not known yet
    row.addEventListener('click', (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button) return; // a new tab: the link's own
      event.preventDefault();
      focusItem(item);
      if (event.target === twisty) toggle(item);
      else { choose(item); expand(item); }
    });
    return item;
  }

  function moreItem(group, page, level) {
    const item = el('li', { role: 'treeitem', class: 'more', 'aria-level': level, tabindex: '-1' },
      el('div', { class: 'row' }, el('span', { class: 'label', text: 'more…' })));
    item.loadMore = () => item.loading || (item.loading = loadPage(group, page, level, item));
    item.addEventListener('click', () => item.loadMore());
    return item;
  }

  async function loadPage(group, page, level, placeholder) {
    const bundle = await fhir(page[0], page[1]);
    const found = entries(bundle);
    const items = found.map((unit) => treeItem(unit, level));
    const next = nextPage(bundle, page[0]);
    if (next) items.push(moreItem(group, next, level));
    if (placeholder) placeholder.replaceWith(...items); else group.append(...items);
    markLeaves(items.filter((item) => item.dataset.id)).catch(() => {}); // their arrows, once known
    return found.length;
  }

  // the units of a page without children: no expand arrow (one search for the page: who is someone's parent); the
  // arrows show once it answers (none before: an arrow on a facility would come and go)
  async function markLeaves(items) {
    if (!items.length) return;
    const bundle = await fhir('/Location', [['_id', items.map((item) => item.dataset.id).join(',')],
      ['_has:Location:partof:partof:missing', 'false'], ['_elements', 'id'], ['_count', String(items.length)]]);
    const parents = new Set((bundle.entry || []).map((entry) => entry.resource && entry.resource.id));
    for (const item of items) {
      item.classList.remove('unknown');
      if (!parents.has(item.dataset.id) && item.getAttribute('aria-expanded') === 'false') {
        item.removeAttribute('aria-expanded');
        item.classList.add('leaf');
      }
    }
  }

  async function loadRoots() {
    tree.replaceChildren();
    // partof:missing=true: the pyramid's roots, or the subtree roots of a token limited to subtrees
    await loadPage(tree, ['/Location', [['partof:missing', 'true'], ['_sort', 'name'], ['_count', '100']]], 1, null);
    const first = tree.querySelector('[role=treeitem]');
    if (first) first.tabIndex = 0;
    else tree.append(el('li', { class: 'note', text: 'No unit is visible with this token.' }));
  }

  function expand(item) {
    if (item.getAttribute('aria-expanded') !== 'false') return item.loading || Promise.resolve();
    item.setAttribute('aria-expanded', 'true');
    let group = item.querySelector(':scope > [role=group]');
    if (group) { group.hidden = false; return Promise.resolve(); }
    group = el('ul', { role: 'group' });
    item.append(group);
    item.classList.add('loading');
    const level = Number(item.getAttribute('aria-level')) + 1;
    const path = `/Location/${encodeURIComponent(item.dataset.id)}/$children`;
    item.loading = loadPage(group, [path, [['_sort', 'name'], ['_count', '100']]], level, null).then((count) => {
      if (!count) { item.removeAttribute('aria-expanded'); item.classList.add('leaf'); group.remove(); }
    }).catch(() => {}).finally(() => item.classList.remove('loading'));
    return item.loading;
  }

  function collapse(item) {
    if (item.getAttribute('aria-expanded') !== 'true') return false;
    item.setAttribute('aria-expanded', 'false');
    item.querySelector(':scope > [role=group]').hidden = true;
    return true;
  }

  function toggle(item) {
    if (!collapse(item)) expand(item);
  }

  function visible() {
    return [...tree.querySelectorAll('[role=treeitem]')].filter((item) => !item.parentElement.closest('[hidden]'));
  }

  function focusItem(item, scroll) {
    for (const other of tree.querySelectorAll('[role=treeitem][tabindex="0"]')) other.tabIndex = -1;
    item.tabIndex = 0;
    item.focus({ preventScroll: !scroll });
    if (scroll) item.scrollIntoView({ block: 'nearest' });
  }

  function markSelected(id) {
    for (const other of tree.querySelectorAll('[aria-selected=true]')) other.setAttribute('aria-selected', 'false');
    const item = id && tree.querySelector(`[role=treeitem][data-id="${CSS.escape(id)}"]`);
    if (item) item.setAttribute('aria-selected', 'true');
    return item;
  }

  function choose(item) {
    if (item.classList.contains('more')) { item.loadMore(); return; }
    select(item.dataset.id, true);
  }

  // the unit's visible ancestors, outermost first, then the unit (a hidden or unknown parent ends the walk)
  async function lineage(id) {
    const found = [];
    let step = id;
    while (step && found.length < 30) {
      let unit;
      try { unit = await read(step); } catch (error) { if (error instanceof Missing) break; throw error; }
      found.unshift(unit);
      step = refId(unit.partOf);
    }
    return found;
  }

  // the unit opened in the tree: its ancestors expanded level by level (their "more…" pages loaded as needed)
  async function reveal(id) {
    const mine = generation;
    const chain = await lineage(id).catch(() => []);
    let group = tree;
    for (const unit of chain) {
      let item = null;
      for (let pages = 0; !item && pages < 50 && mine === generation; pages += 1) {
        item = group.querySelector(`:scope > [role=treeitem][data-id="${CSS.escape(unit.id)}"]`);
        const more = group.querySelector(':scope > .more');
        if (!item && more) await more.loadMore(); else if (!item) break;
      }
      if (!item || mine !== generation) return;
      if (unit.id === id) { if (current === id) markSelected(id); focusItem(item, true); return; }
      await expand(item);
      group = item.querySelector(':scope > [role=group]');
      if (!group) return;
    }
  }

  tree.addEventListener('keydown', (event) => {
    const item = event.target.closest('[role=treeitem]');
    if (!item) return;
    const items = visible();
    const index = items.indexOf(item);
    const parent = item.parentElement.closest('[role=treeitem]');
    const moves = {
      ArrowDown: () => items[index + 1] && focusItem(items[index + 1], true),
      ArrowUp: () => items[index - 1] && focusItem(items[index - 1], true),
      Home: () => focusItem(items[0], true),
      End: () => focusItem(items[items.length - 1], true),
      ArrowRight: () => (item.getAttribute('aria-expanded') === 'true'
        ? items[index + 1] && focusItem(items[index + 1], true) : item.hasAttribute('aria-expanded') && expand(item)),
      ArrowLeft: () => (collapse(item) || (parent && focusItem(parent, true))),
      Enter: () => { choose(item); if (item.dataset.id) expand(item); },
      ' ': () => choose(item),
    };
    if (moves[event.key]) { event.preventDefault(); moves[event.key](); }
  });

  // ------------------------------------------------------------------ find by name, code or id; filters

  const search = $('search');
  const results = $('results');
  let pending = null;
  let timer = 0;
  let morePage = null;

  async function loadTypes() {
    try {
      const system = await fhir('/CodeSystem/org-unit-type');
      for (const concept of system.concept || []) {
        $('type-filter').append(el('option', { value: concept.code, text: `${concept.display || concept.code} (${concept.code})` }));
      }
      $('type-filter').value = $('type-filter').dataset.wanted || '';
    } catch (error) { /* no type list: the filter offers "any" only */ }
  }

  // each result's path: its ancestors among the included ones (as far as the token sees)
  function pathOf(unit, included) {
    const names = [];
    for (let parent = refId(unit.partOf); parent && included.has(parent) && names.length < 30;) {
      const up = included.get(parent);
      names.unshift(up.name || up.id);
      parent = refId(up.partOf);
    }
    return names.join(' › ');
  }

  async function find(more) {
    const name = search.value.trim();
    const type = $('type-filter').value;
    const status = $('status-filter').value;
    if (!more) setHash({ q: name, type, status }, false);
    if (pending) pending.abort();
    if (!name && !type && !status) { showResults([], new Map(), '', false); return; }
    pending = new AbortController();
    const filters = [...(type ? [['type', type]] : []), ...(status ? [['status', status]] : [])];
    const paths = ['_include:iterate', 'Location:partof'];
    const byName = more ? morePage : ['/Location', [...(name ? [['name:contains', name]] : []), ...filters,
      ['_sort', 'name'], ['_count', String(PAGE)], paths]];
    // a single word may also be a code, an identifier or an id: looked up beside the names, shown first
    const word = !more && /^[A-Za-z0-9\-.]{1,64}$/.test(name);
    const exact = word ? [
      fhir('/Location', [['identifier', name], ...filters, ['_count', String(PAGE)], paths], pending.signal),
      fhir('/Location', [['_id', name], ...filters, paths], pending.signal).catch(() => ({})),
    ] : [];
    try {
      const [bundle, ...codes] = await Promise.all([fhir(byName[0], byName[1], pending.signal), ...exact]);
      const included = new Map();
      for (const b of [bundle, ...codes]) for (const unit of entries(b, 'include')) included.set(unit.id, unit);
      const first = codes.flatMap((b) => entries(b, 'match'));
      const named = entries(bundle, 'match');
      for (const unit of [...first, ...named]) included.set(unit.id, unit);
      const seen = new Set(more ? [...results.children].map((o) => o.dataset.id) : []);
      const found = [...first, ...named].filter((unit) => !seen.has(unit.id) && seen.add(unit.id));
      morePage = nextPage(bundle, '/Location');
      const shown = seen.size;
      const total = bundle.total ?? named.length;
      const codeNote = first.length ? `${first.length} by code or id; ` : '';
      showResults(found, included, `${codeNote}${total} by name${name ? ' (sorted by name)' : ''}; ${shown} shown`, more);
    } catch (error) {
      if (error.name !== 'AbortError' && !(error instanceof Refused)) showResults([], new Map(), error.message, false);
    }
  }

  function showResults(found, included, note, append) {
    const start = append ? results.children.length : 0;
    const options = found.map((unit, i) => {
      const index = start + i;
      const option = el('li', { role: 'option', id: `result-${index}`, 'data-id': unit.id, 'aria-selected': 'false' },
        el('span', { class: 'label', text: unit.name || unit.id }),
        el('span', { class: 'meta', text: [typeText(unit), ...flags(unit)].filter(Boolean).join(' · ') }),
        el('span', { class: 'path', text: pathOf(unit, included) }));
      option.addEventListener('mousedown', (event) => { event.preventDefault(); pick(unit.id); activate(index); });
      return option;
    });
    if (append) results.append(...options); else results.replaceChildren(...options);
    $('results-note').textContent = note;
    $('more-results').hidden = !morePage;
    search.setAttribute('aria-expanded', results.children.length ? 'true' : 'false');
    if (!append) search.removeAttribute('aria-activedescendant');
  }

  function pick(id) {
    select(id, true);
    reveal(id);
  }

  function activate(index) {
    const options = [...results.children];
    options.forEach((option, i) => option.setAttribute('aria-selected', i === index ? 'true' : 'false'));
    if (options[index]) { search.setAttribute('aria-activedescendant', options[index].id); options[index].scrollIntoView({ block: 'nearest' }); }
  }

  search.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => find(false), 200); });
  $('type-filter').addEventListener('change', () => find(false));
  $('status-filter').addEventListener('change', () => find(false));
  $('more-results').addEventListener('click', () => find(true));
  search.addEventListener('keydown', (event) => {
    const options = [...results.children];
    const at = options.findIndex((option) => option.getAttribute('aria-selected') === 'true');
    if (event.key === 'ArrowDown' && options.length) { event.preventDefault(); activate(Math.min(at + 1, options.length - 1)); }
    else if (event.key === 'ArrowUp' && options.length) { event.preventDefault(); activate(Math.max(at - 1, 0)); }
    else if (event.key === 'Enter' && options.length) { event.preventDefault(); pick(options[Math.max(at, 0)].dataset.id); }
    else if (event.key === 'Escape') { search.value = ''; find(false); }
  });

  // ------------------------------------------------------------------ detail

  function row(term, ...values) {
    const shown = values.filter((value) => value !== null && value !== undefined && value !== '');
    return shown.length ? [el('dt', { text: term }), ...shown.map((value) => el('dd', {}, value))] : [];
  }

  // an identifier labelled by its system's last segment (…/sid/demo: "demo"); the whole system as its title
  function identifier(id) {
    const system = id.system || '';
    const label = system === 'urn:ietf:rfc:3986' ? 'UUID' : system.split(/[/:]/).filter(Boolean).pop() || 'no system';
    return el('span', { class: 'identifier' }, el('span', { class: 'system', title: system || null, text: label }), ' ',
      el('code', { text: id.value || '' }), id.use ? el('span', { class: 'meta', text: ` (${id.use})` }) : null);
  }

  function fhirLinks(reference) {
    return el('p', { class: 'links' },
      el('a', { href: fhirHref(reference), class: 'fhir-html', text: 'FHIR (HTML)' }), ' · ',
      el('a', { href: `${fhirHref(reference)}?_format=json`, class: 'fhir-json', text: 'raw JSON', onclick: rawJson }), ' · ',
      el('a', { href: `${fhirHref(reference)}/_history`, text: '_history' }));
  }

  async function rawJson(event) {
    event.preventDefault();
    const response = await fetch(event.currentTarget.href + '&_pretty=true', { headers: T.headers('application/fhir+json'), cache: 'no-store' });
    location.assign(URL.createObjectURL(new Blob([await response.arrayBuffer()], { type: 'application/json' })));
  }

  async function children(unit) {
    const found = [];
    let total = 0;
    let page = [`/Location/${encodeURIComponent(unit.id)}/$children`, [['_count', '100']]];
    while (page && found.length < MAX_POINTS) {
      const bundle = await fhir(page[0], page[1]);
      found.push(...entries(bundle));
      total = bundle.total ?? found.length;
      page = nextPage(bundle, page[0]);
    }
    return { found, total };
  }

  function summary(kids) {
    if (!kids.total) return 'none';
    const byType = new Map();
    for (const child of kids.found) byType.set(typeText(child) || 'no type', (byType.get(typeText(child) || 'no type') || 0) + 1);
    const parts = [...byType].sort((a, b) => b[1] - a[1]).map(([type, n]) => `${n} ${type}`);
    return `${kids.total}: ${parts.join(', ')}${kids.total > kids.found.length ? ` (types of the first ${kids.found.length})` : ''}`;
  }

  async function select(id, push) {
    const mine = ++selection;
    current = id;
    if (push !== false) setHash({ unit: id }, push);
    markSelected(id);
    const detail = $('detail');
    detail.replaceChildren(el('p', { class: 'note', text: 'Loading…' }));
    let unit;
    try { unit = await read(id); } catch (error) {
      const text = error instanceof Missing ? `Location/${id} is unknown or not visible with this token.` : error.message;
      if (!(error instanceof Refused) && mine === selection) detail.replaceChildren(el('p', { class: 'error', text }));
      return;
    }
    if (mine !== selection) return;
    const validation = ext(unit, 'org-unit-validation-status');
    const opening = ext(unit, 'opening-date');
    const closing = ext(unit, 'closing-date');
    const position = unit.position && `${unit.position.latitude}, ${unit.position.longitude}`;
    const org = unit.managingOrganization;
    const chain = el('ol', { class: 'chain', 'aria-label': 'Parent chain' });
    const history = el('section', { class: 'history' }, el('h3', { text: 'History' }));
    const kidsRow = el('dd', { class: 'children', text: '…' });
    detail.replaceChildren(
      el('h2', { id: 'unit-name', text: unit.name || unit.id }),
      el('p', { class: `status-badge ${unit.status || ''}${closed(unit) ? ' closed' : ''}`,
        text: [unit.status, closed(unit) ? 'closed' : null, validation && validation.valueCode].filter(Boolean).join(' · ') }),
      fhirLinks(`Location/${unit.id}`),
      chain,
      el('dl', {},
        ...row('Id', unit.id),
        ...row('Type', typeText(unit)),
        el('dt', { text: 'Children' }), kidsRow,
        ...row('Aliases', ...(unit.alias || [])),
        ...row('Identifiers', ...(unit.identifier || []).map(identifier)),
        ...row('Opening date', opening && formatDate(opening.valueDate)),
        ...row('Closing date', closing && formatDate(closing.valueDate)),
        ...row('Position', position),
        ...row('Managing organization', org && (org.reference
          ? el('a', { href: fhirHref(org.reference), text: org.display || org.reference }) : org.display)),
        ...row('Version', unit.meta && `${unit.meta.versionId} (${formatInstant(unit.meta.lastUpdated)})`)),
      history);
    parents(unit, chain, mine);
    loadHistory(unit, history).catch(() => {});
    const kids = await children(unit).catch(() => null);
    if (mine !== selection) return;
    kidsRow.textContent = kids ? summary(kids) : 'unknown';
    if (kids) mapView.draw(unit, kids.found, () => mine === selection).catch(() => {});
  }

  async function parents(unit, chain, mine) {
    const found = await lineage(refId(unit.partOf)).catch(() => []);
    if (mine !== selection) return;
    const hidden = found.length ? refId(found[0].partOf) : refId(unit.partOf);
    chain.replaceChildren(
      ...(hidden ? [el('li', { class: 'hidden-parent', title: 'not visible with this token', text: '…' })] : []),
      ...[...found, unit].map((step) => el('li', {}, step === unit
        ? el('span', { text: step.name })
        : el('a', { href: `#unit=${encodeURIComponent(step.id)}`, text: step.name,
          onclick: (event) => { if (!event.ctrlKey && !event.metaKey) { event.preventDefault(); pick(step.id); } } }))));
  }

  async function loadHistory(unit, section) {
    const bundle = await fhir(`/Location/${encodeURIComponent(unit.id)}/_history`, [['_count', '50']]);
    const rows = (bundle.entry || []).map((entry) => {
      const version = entry.resource || {};
      const meta = version.meta || {};
      return el('tr', {},
        el('td', {}, el('a', { href: fhirHref(`Location/${unit.id}/_history/${meta.versionId}`), text: `v${meta.versionId}` })),
        el('td', { text: formatInstant(meta.lastUpdated) || '' }), el('td', { text: version.name || '' }), el('td', { text: version.status || '' }));
    });
    section.append(el('table', { class: 'versions' },
      el('thead', {}, el('tr', {}, ...['version', 'updated', 'name', 'status'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows)));
  }

  // ------------------------------------------------------------------ start

  T.onForget = () => { reset(); showLogin(''); };
  T.wireForm(start);
  if (T.get()) start(); else showLogin('');
})();
