'use strict';
// The explorer: the pyramid as a tree ($children, level by level), find by name, a detail pane and a map.
// Every value from the data goes into the page through textContent (never innerHTML); it calls only the FHIR API.
(function () {
  const T = window.OrgunitToken;
  const API = document.body.dataset.api;
  const TILES = document.body.dataset.tiles || '';
  const BOUNDARY = 'http://hl7.org/fhir/StructureDefinition/location-boundary-geojson';
  const $ = (id) => document.getElementById(id);
  const units = new Map(); // id -> Location, as found by a search (no boundary: searches leave it out)
  const full = new Map(); // id -> Location, as read (with its boundary)
  let selection = 0;

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

  class Refused extends Error {}

  async function fhir(path, params, signal) {
    const url = new URL(API + path, location.href);
    for (const [name, value] of params || []) url.searchParams.append(name, value);
    // no-store: the server's ETag names the version, not the format; a revalidated cached HTML page would come back
    const response = await fetch(url, { headers: T.headers('application/fhir+json'), signal, cache: 'no-store' });
    if (response.status === 401) {
      T.forget();
      showLogin('The server refused this token (401): paste a valid one.');
      throw new Refused('401');
    }
    const body = await response.json();
    if (!response.ok) {
      const issue = (body.issue || [])[0] || {};
      throw new Error(`HTTP ${response.status}: ${issue.diagnostics || issue.code || 'error'}`);
    }
    return body;
  }

  function entries(bundle) {
    const found = (bundle.entry || []).map((entry) => entry.resource).filter((r) => r && r.resourceType === 'Location');
    for (const unit of found) units.set(unit.id, unit);
    return found;
  }

  function nextPage(bundle, path) {
    const next = (bundle.link || []).find((link) => link.relation === 'next');
    return next ? [path, [...new URL(next.url).searchParams]] : null;
  }

  async function read(id) {
    if (!full.has(id)) full.set(id, await fhir(`/Location/${encodeURIComponent(id)}`));
    return full.get(id);
  }

  const typeText = (unit) => ((unit.type || [])[0] || {}).text || (((unit.type || [])[0] || {}).coding || [{}])[0].display || '';
  const ext = (unit, suffix) => (unit.extension || []).find((e) => e.url === suffix || e.url.endsWith('/' + suffix));
  const refId = (ref) => (ref && ref.reference && /^Location\/[^/]+$/.test(ref.reference) ? ref.reference.slice(9) : null);
  const fhirHref = (reference) => `${API}/${reference}`;

  // ------------------------------------------------------------------ login

  function showLogin(message) {
    $('login').hidden = false;
    $('app').hidden = true;
    T.showState();
    T.showError(message || '');
    $('token-input').focus();
  }

  function start() {
    $('login').hidden = true;
    $('app').hidden = false;
    T.showState();
    loadTypes();
    loadRoots();
  }

  // ------------------------------------------------------------------ tree

  const tree = $('tree');

  function treeItem(unit, level) {
    const twisty = el('span', { class: 'twisty', 'aria-hidden': 'true' });
    const row = el('div', { class: 'row' }, twisty, el('span', { class: 'label', text: unit.name || unit.id }),
      el('span', { class: 'meta', text: typeText(unit) }));
    const item = el('li', { role: 'treeitem', 'aria-level': level, 'aria-expanded': 'false', 'aria-selected': 'false',
      tabindex: '-1', 'data-id': unit.id }, row);
    row.addEventListener('click', (event) => {
      focusItem(item);
      if (event.target === twisty) toggle(item);
      else { choose(item); expand(item); }
    });
    return item;
  }

  function moreItem(group, page, level) {
    const item = el('li', { role: 'treeitem', class: 'more', 'aria-level': level, tabindex: '-1' },
      el('div', { class: 'row' }, el('span', { class: 'label', text: 'more…' })));
    item.addEventListener('click', () => loadPage(group, page, level, item));
    return item;
  }

  async function loadPage(group, page, level, placeholder) {
    const bundle = await fhir(page[0], page[1]);
    const items = entries(bundle).map((unit) => treeItem(unit, level));
    const next = nextPage(bundle, page[0]);
    if (next) items.push(moreItem(group, next, level));
    if (placeholder) placeholder.replaceWith(...items); else group.append(...items);
    return items.length;
  }

  async function loadRoots() {
    tree.replaceChildren();
    await loadPage(tree, ['/Location', [['partof:missing', 'true'], ['_count', '100']]], 1, null);
    const first = tree.querySelector('[role=treeitem]');
    if (first) first.tabIndex = 0;
    else tree.append(el('li', { class: 'note', text: 'No unit is visible with this token.' }));
  }

  async function expand(item) {
    if (item.getAttribute('aria-expanded') !== 'false') return;
    item.setAttribute('aria-expanded', 'true');
    let group = item.querySelector(':scope > [role=group]');
    if (group) { group.hidden = false; return; }
    group = el('ul', { role: 'group' });
    item.append(group);
    item.classList.add('loading');
    const level = Number(item.getAttribute('aria-level')) + 1;
    const path = `/Location/${encodeURIComponent(item.dataset.id)}/$children`;
    const count = await loadPage(group, [path, [['_count', '100']]], level, null).finally(() => item.classList.remove('loading'));
    if (!count) { item.removeAttribute('aria-expanded'); item.classList.add('leaf'); group.remove(); }
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

  function focusItem(item) {
    for (const other of tree.querySelectorAll('[role=treeitem][tabindex="0"]')) other.tabIndex = -1;
    item.tabIndex = 0;
    item.focus();
  }

  function choose(item) {
    if (item.classList.contains('more')) { item.click(); return; }
    for (const other of tree.querySelectorAll('[aria-selected=true]')) other.setAttribute('aria-selected', 'false');
    item.setAttribute('aria-selected', 'true');
    select(item.dataset.id);
  }

  tree.addEventListener('keydown', (event) => {
    const item = event.target.closest('[role=treeitem]');
    if (!item) return;
    const items = visible();
    const index = items.indexOf(item);
    const parent = item.parentElement.closest('[role=treeitem]');
    const moves = {
      ArrowDown: () => items[index + 1] && focusItem(items[index + 1]),
      ArrowUp: () => items[index - 1] && focusItem(items[index - 1]),
      Home: () => focusItem(items[0]),
      End: () => focusItem(items[items.length - 1]),
      ArrowRight: () => (item.getAttribute('aria-expanded') === 'true'
        ? items[index + 1] && focusItem(items[index + 1]) : item.hasAttribute('aria-expanded') && expand(item)),
      ArrowLeft: () => (collapse(item) || (parent && focusItem(parent))),
      Enter: () => { choose(item); if (item.dataset.id) expand(item); },
      ' ': () => choose(item),
    };
    if (moves[event.key]) { event.preventDefault(); moves[event.key](); }
  });

  // ------------------------------------------------------------------ find by name, filters

  const search = $('search');
  const results = $('results');
  let pending = null;
  let timer = 0;

  async function loadTypes() {
    try {
      const system = await fhir('/CodeSystem/org-unit-type');
      for (const concept of system.concept || []) {
        $('type-filter').append(el('option', { value: concept.code, text: `${concept.display || concept.code} (${concept.code})` }));
      }
    } catch (error) { /* no type list: the filter offers "any" only */ }
  }

  async function find() {
    const name = search.value.trim();
    const type = $('type-filter').value;
    const status = $('status-filter').value;
    if (pending) pending.abort();
    if (!name && !type && !status) { showResults([], ''); return; }
    pending = new AbortController();
    const params = [['_count', '20']];
    if (name) params.push(['name', name]);
    if (type) params.push(['type', type]);
    if (status) params.push(['status', status]);
    try {
      const bundle = await fhir('/Location', params, pending.signal);
      const found = entries(bundle);
      showResults(found, `${bundle.total ?? found.length} found${bundle.total > found.length ? `, first ${found.length} shown` : ''}`);
    } catch (error) {
      if (error.name !== 'AbortError' && !(error instanceof Refused)) showResults([], error.message);
    }
  }

  function showResults(found, note) {
    results.replaceChildren(...found.map((unit, index) => {
      const option = el('li', { role: 'option', id: `result-${index}`, 'data-id': unit.id, 'aria-selected': 'false' },
        el('span', { class: 'label', text: unit.name || unit.id }),
        el('span', { class: 'meta', text: [typeText(unit), unit.status, (unit.partOf || {}).display].filter(Boolean).join(' · ') }));
      option.addEventListener('mousedown', (event) => { event.preventDefault(); select(unit.id); activate(index); });
      return option;
    }));
    $('results-note').textContent = note;
    search.setAttribute('aria-expanded', found.length ? 'true' : 'false');
    search.removeAttribute('aria-activedescendant');
  }

  function activate(index) {
    const options = [...results.children];
    options.forEach((option, i) => option.setAttribute('aria-selected', i === index ? 'true' : 'false'));
    if (options[index]) { search.setAttribute('aria-activedescendant', options[index].id); options[index].scrollIntoView({ block: 'nearest' }); }
  }

  search.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(find, 200); });
  $('type-filter').addEventListener('change', find);
  $('status-filter').addEventListener('change', find);
  search.addEventListener('keydown', (event) => {
    const options = [...results.children];
    const current = options.findIndex((option) => option.getAttribute('aria-selected') === 'true');
    if (event.key === 'ArrowDown' && options.length) { event.preventDefault(); activate(Math.min(current + 1, options.length - 1)); }
    else if (event.key === 'ArrowUp' && options.length) { event.preventDefault(); activate(Math.max(current - 1, 0)); }
    else if (event.key === 'Enter' && options.length) { event.preventDefault(); select(options[Math.max(current, 0)].dataset.id); }
    else if (event.key === 'Escape') { search.value = ''; showResults([], ''); }
  });

  // ------------------------------------------------------------------ detail

  function row(term, ...values) {
    const shown = values.filter((value) => value !== null && value !== undefined && value !== '');
    return shown.length ? [el('dt', { text: term }), ...shown.map((value) => el('dd', {}, value))] : [];
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

  async function select(id) {
    const mine = ++selection;
    const detail = $('detail');
    detail.replaceChildren(el('p', { class: 'note', text: 'Loading…' }));
    let unit;
    try { unit = await read(id); } catch (error) {
      if (!(error instanceof Refused)) detail.replaceChildren(el('p', { class: 'error', text: error.message }));
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
    detail.replaceChildren(
      el('h2', { id: 'unit-name', text: unit.name || unit.id }),
      el('p', { class: `status-badge ${unit.status || ''}`, text: [unit.status, validation && validation.valueCode].filter(Boolean).join(' · ') }),
      fhirLinks(`Location/${unit.id}`),
      chain,
      el('dl', {},
        ...row('Id', unit.id),
        ...row('Type', typeText(unit)),
        ...row('Aliases', ...(unit.alias || [])),
        ...row('Identifiers', ...(unit.identifier || []).map((i) => [i.use, i.system && `${i.system} |`, i.value].filter(Boolean).join(' '))),
        ...row('Opening date', opening && opening.valueDate),
        ...row('Closing date', closing && closing.valueDate),
        ...row('Position', position),
        ...row('Managing organization', org && (org.reference
          ? el('a', { href: fhirHref(org.reference), text: org.display || org.reference }) : org.display)),
        ...row('Version', unit.meta && `${unit.meta.versionId} (${unit.meta.lastUpdated})`)),
      history);
    drawMap(unit, mine);
    parents(unit, chain, mine);
    loadHistory(unit, history);
  }

  async function parents(unit, chain, mine) {
    const found = [];
    let parent = refId(unit.partOf);
    while (parent && found.length < 30) {
      const up = await read(parent);
      found.unshift(up);
      parent = refId(up.partOf);
    }
    if (mine !== selection) return;
    chain.replaceChildren(...[...found, unit].map((step) => el('li', {}, step === unit
      ? el('span', { text: step.name })
      : el('button', { type: 'button', class: 'linkish', text: step.name, onclick: () => select(step.id) }))));
  }

  async function loadHistory(unit, section) {
    const bundle = await fhir(`/Location/${encodeURIComponent(unit.id)}/_history`, [['_count', '50']]);
    const rows = (bundle.entry || []).map((entry) => {
      const version = entry.resource || {};
      const meta = version.meta || {};
      return el('tr', {},
        el('td', {}, el('a', { href: fhirHref(`Location/${unit.id}/_history/${meta.versionId}`), text: `v${meta.versionId}` })),
        el('td', { text: meta.lastUpdated || '' }), el('td', { text: version.name || '' }), el('td', { text: version.status || '' }));
    });
    section.append(el('table', { class: 'versions' },
      el('thead', {}, el('tr', {}, ...['version', 'updated', 'name', 'status'].map((h) => el('th', { text: h })))),
      el('tbody', {}, ...rows)));
  }

  // ------------------------------------------------------------------ map

  let map = null;
  let drawn = null;

  function boundary(unit) {
    const found = (unit.extension || []).find((e) => e.url === BOUNDARY);
    const data = found && found.valueAttachment && found.valueAttachment.data;
    if (!data) return [];
    try {
      const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
      return polygons(JSON.parse(new TextDecoder().decode(bytes)));
    } catch (error) { return []; }
  }

  function polygons(geo) {
    const swap = (ring) => ring.map(([lon, lat]) => [lat, lon]);
    if (!geo) return [];
    if (geo.type === 'FeatureCollection') return (geo.features || []).flatMap(polygons);
    if (geo.type === 'Feature') return polygons(geo.geometry);
    if (geo.type === 'Polygon') return [geo.coordinates.map(swap)];
    if (geo.type === 'MultiPolygon') return geo.coordinates.map((polygon) => polygon.map(swap));
    return [];
  }

  function tip(layer, unit) {
    layer.bindTooltip(el('span', { text: unit.name || unit.id }));
    layer.on('click', () => select(unit.id));
  }

  function draw(unit, kind) {
    let points = 0;
    for (const shape of boundary(unit)) {
      const polygon = L.polygon(shape, { className: `boundary ${kind}-boundary`, weight: kind === 'selected' ? 3 : 1,
        fillOpacity: kind === 'selected' ? 0.05 : 0.2 });
      tip(polygon, unit);
      drawn.addLayer(polygon);
    }
    const position = unit.position;
    if (position && Number.isFinite(position.latitude) && Number.isFinite(position.longitude)) {
      const marker = L.circleMarker([position.latitude, position.longitude],
        { className: `point ${kind}-point`, radius: kind === 'selected' ? 8 : 5, weight: 2, fillOpacity: 0.8 });
      tip(marker, unit);
      drawn.addLayer(marker);
      points = 1;
    }
    return points;
  }

  async function drawMap(unit, mine) {
    if (!window.L) { $('map-note').textContent = 'The map library did not load.'; return; }
    if (!map) {
      map = L.map('map', { attributionControl: Boolean(TILES), zoomSnap: 0.25 }).setView([0, 0], 2);
      if (TILES) L.tileLayer(TILES, { maxZoom: 19 }).addTo(map);
      drawn = L.featureGroup().addTo(map);
    }
    const children = [];
    let page = [`/Location/${encodeURIComponent(unit.id)}/$children`, [['_count', '100']]];
    while (page && children.length < 1000) {
      const bundle = await fhir(page[0], page[1]);
      children.push(...entries(bundle));
      page = nextPage(bundle, page[0]);
    }
    if (mine !== selection) return;
    drawn.clearLayers();
    let points = draw(unit, 'selected');
    for (const child of children) points += draw(child, 'child');
    const note = () => {
      const shapes = drawn.getLayers().length - points;
      $('map-note').textContent = `${unit.name}: ${children.length} children; ${points} points and ${shapes} boundaries drawn`;
    };
    const fit = () => {
      if (!drawn.getLayers().length) return;
      const bounds = drawn.getBounds();
      if (bounds.getNorthEast().equals(bounds.getSouthWest())) map.setView(bounds.getCenter(), 12);
      else map.fitBounds(bounds, { padding: [20, 20], maxZoom: 13 });
    };
    note();
    map.invalidateSize();
    fit();
    // boundaries are in reads only: the children without a point (areas) are read, six at a time
    const areas = children.filter((child) => !child.position).slice(0, 200);
    const reader = async () => {
      for (let child = areas.shift(); child; child = areas.shift()) {
        const whole = await read(child.id);
        if (mine !== selection) return;
        draw({ ...whole, position: undefined }, 'child');
      }
    };
    await Promise.all([1, 2, 3, 4, 5, 6].map(reader));
    if (mine !== selection) return;
    note();
    fit();
  }

  // ------------------------------------------------------------------ start

  T.onForget = () => { units.clear(); showLogin(''); };
  T.wireForm(start);
  if (T.get()) start(); else showLogin('');
})();
