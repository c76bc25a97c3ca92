'use strict';
// The explorer: the pyramid as a tree (tree.js), the finder (finder.js), the detail (detail.js) and the map (map.js)
// of one selected unit. The selected unit and the search are in the URL (#unit=..&q=..): reload, Back and a shared
// link restore them. A shared desk: "Forget token" clears every cache, screen and form field, the URL, and every
// history entry of the forgotten token as it is visited again (each entry is tagged with this desk's session, which
// the forgetting renews); a new token starts clean. Every value from the data goes into the page as text.
(function () {
  const T = window.OrgunitToken;
  const O = window.Orgunit;
  const { el } = O;
  const TILES = document.body.dataset.tiles || '';
  const DESK = 'orgunit-fhir.desk';
  const $ = (id) => document.getElementById(id);
  const full = new Map(); // id -> Location (or a 404's error), as read (with its boundary)
  let selection = 0;
  let current = null; // the id shown in the detail

  // ------------------------------------------------------------------ reads

  async function read(id) {
    if (!full.has(id)) full.set(id, O.fhir(`/Location/${encodeURIComponent(id)}`));
    try { return await full.get(id); } catch (error) { if (!(error instanceof O.Missing)) full.delete(id); throw error; }
  }

  // the unit's visible ancestors, outermost first, then the unit (a hidden or unknown parent ends the walk)
  async function lineage(id) {
    const found = [];
    let step = id;
    while (step && found.length < 30) {
      let unit;
      try { unit = await read(step); } catch (error) { if (error instanceof O.Missing) break; throw error; }
      found.unshift(unit);
      step = O.refId(unit.partOf);
    }
    return found;
  }

  // ------------------------------------------------------------------ the URL: #unit=..&q=..&type=..; this desk

  // this tab's desk session: the history entries it made carry it; "Forget token" starts another
  function desk() {
    let id = sessionStorage.getItem(DESK);
    if (!id) { id = Math.random().toString(36).slice(2) + Date.now().toString(36); sessionStorage.setItem(DESK, id); }
    return id;
  }
  const clean = () => location.pathname + location.search;
  const hashState = () => new URLSearchParams(location.hash.slice(1));

  function setHash(changes, push) {
    const state = hashState();
    for (const [key, value] of Object.entries(changes)) { if (value) state.set(key, value); else state.delete(key); }
    const hash = state.toString() ? `#${state}` : '';
    if (hash === location.hash || (!hash && !location.hash)) return;
    history[push ? 'pushState' : 'replaceState']({ desk: desk() }, '', hash || clean());
  }

  // an entry of a forgotten desk shows nothing of it: replaced by a clean one of this desk
  function ownEntry() {
    const state = history.state;
    if (state && state.desk && state.desk !== desk()) { history.replaceState({ desk: desk() }, '', clean()); return false; }
    if (!state || !state.desk) history.replaceState({ desk: desk() }, '', location.href); // a link opened: this desk's now
    return true;
  }

  function applyHash() {
    const state = hashState();
    finder.apply(state);
    const id = state.get('unit');
    const group = state.get('group');
    if (id && id !== current) { select(id, false); revealUnit(id); }
    else if (!id && group && `group:${group}` !== current) selectGroup(group, null, false);
    else if (!id && !group && current) clearDetail();
  }

  window.addEventListener('popstate', () => {
    const own = ownEntry(); // an entry of a forgotten desk is cleaned at once, token or not (the address bar shows it)
    if (!T.get()) return;
    if (!own) { finder.clear(); finder.loadTypes(); clearDetail(); return; }
    applyHash();
  });

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
    detail.empty();
    map.clear();
    tree.markSelected(null);
  }

  // everything the previous token saw leaves the page: caches, tree, results, form, detail, map
  function reset() {
    O.state.generation += 1;
    full.clear();
    tree.clear();
    finder.clear();
    clearDetail();
    O.announce('');
  }

  function start() {
    reset();
    $('login').hidden = true;
    $('app').hidden = false;
    T.showState();
    ownEntry();
    finder.loadTypes();
    tree.loadRoots().then(() => {
      const state = hashState();
      const sole = tree.soleGroup();
      if (sole && !state.get('unit') && !state.get('group')) setHash({ group: sole.id }, false); // its own root
      applyHash();
    }, () => {});
  }

  O.onUnauthorized = () => { // an expired token: the same person pastes a new one, the URL and this desk kept
    T.forget();
    reset();
    showLogin('The server refused this token (401): it may have expired. Paste a valid one.');
  };

  // ------------------------------------------------------------------ the selected unit: one state

  // a parent the token cannot open, as its units name it: what the token sees below it
  function selectGroup(id, name, push) {
    const mine = ++selection;
    current = `group:${id}`;
    if (push !== false) setHash({ unit: '', group: id }, push);
    tree.markSelected(null, id);
    map.clear();
    detail.showGroup({ id, name: name || tree.groupName(id) || `Location/${id}` }, () => mine === selection);
  }

  async function select(id, push) {
    const mine = ++selection;
    const still = () => mine === selection;
    current = id;
    if (push !== false) setHash({ unit: id, group: '' }, push);
    tree.markSelected(id);
    map.clear(); // nothing of the previous unit stays, whatever comes
    detail.loading();
    let unit;
    try { unit = await read(id); } catch (error) {
      if (O.quiet(error) || !still()) return;
      const missing = error instanceof O.Missing;
      const text = missing ? `Location/${id} is unknown or not visible with this token.` : null;
      detail.error(missing ? el('p', { class: 'error', role: 'alert', text })
        : O.errorBox(error, () => select(id, false), `Location/${id} could not be opened`));
      $('map-note').textContent = 'No map: the unit could not be opened.';
      O.announce(missing ? text : 'The unit could not be opened.');
      return;
    }
    if (!still()) return;
    detail.show(unit, still);
  }

  function pick(id) {
    select(id, true);
    revealUnit(id);
  }

  async function revealUnit(id) {
    const mine = O.state.generation;
    const chain = await lineage(id).catch(() => []);
    if (chain.length) await tree.reveal(chain, id, () => mine === O.state.generation);
  }

  const tree = O.createTree({ select, selectGroup, current: () => current });
  const map = O.createMap({ pick, read, tiles: TILES });
  const detail = O.createDetail({ pick, lineage, map });
  const finder = O.createFinder({ pick, setHash: (state) => setHash(state, false) });
  map.wire();
  window.addEventListener('beforeprint', () => map.resize());
  window.addEventListener('afterprint', () => map.resize());

  // ------------------------------------------------------------------ start

  T.onForget = () => { // the next person at this desk sees nothing of it: not in the page, the URL or the history
    reset(); // the token and this desk's session are gone from sessionStorage (token.js); its entries are foreign now
    history.replaceState(null, '', clean());
    showLogin('');
  };
  T.wireForm(start);
  if (T.get()) start(); else showLogin('');
})();
