'use strict';
// The explorer's finder: one box for a part of a name (name:contains, accents and case ignored, spaces folded), a
// code (identifier:text: the start of a source reference, any case), a uuid (bare or urn:uuid:) or an id; filters
// on type, level, status, closed units and "changed since" (_lastUpdated); every count exact (_total=accurate);
// each result with its path (its parent's name when the token sees none of its ancestors); the results exported as
// CSV or GeoJSON ($csv, $geojson: the same search, streamed, the token's scope applied).
(function () {
  const O = window.Orgunit;
  const { el } = O;
  const PAGE = 20;
  const UUID = /^(?:urn:uuid:)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i;
  const WORD = /^[\p{L}\p{N}_.-]{2,64}$/u;
  const ID = /^[A-Za-z0-9\-.]{1,64}$/;

  O.createFinder = function createFinder({ pick, setHash }) {
    const $ = (id) => document.getElementById(id);
    const search = $('search');
    const results = $('results');
    const filters = { type: $('type-filter'), level: $('level-filter'), status: $('status-filter'),
      closed: $('closed-filter'), since: $('since-filter') };
    let pending = null;
    let timer = 0;
    let morePage = null;
    let exported = null; // the search the export buttons export
    let shownFor = null; // the name and filters the results shown are for
    let types = []; // { code, display, level, count } the token sees
    let ready = Promise.resolve(); // the types loaded (or failed)

    const fold = (text) => text.replace(/\s+/g, ' ').trim();

    function loadTypes() {
      ready = fetchTypes();
      return ready;
    }

    async function fetchTypes() {
      const holder = $('types-error');
      holder.replaceChildren();
      try {
        const counted = O.counts(await O.fhir('/Location/$counts', [['by', 'type']]));
        types = counted.groups.map((g) => ({ code: g.type.code, display: g.type.display || g.type.code, level: g.level, count: g.count }));
      } catch (error) {
        if (!O.quiet(error)) holder.replaceChildren(O.errorBox(error, () => loadTypes().then(() => find(false)), 'The types could not be loaded'));
        return;
      }
      fillTypes();
      const levels = [...new Set(types.map((t) => t.level).filter((l) => l !== undefined))].sort((a, b) => a - b);
      filters.level.replaceChildren(el('option', { value: '', text: 'any' }), ...levels.map((level) => {
        const named = types.filter((t) => t.level === level);
        const count = named.reduce((sum, t) => sum + t.count, 0);
        const label = named.length === 1 ? named[0].display : `${named.length} types`;
        return el('option', { value: String(level), text: `${level}: ${label} (${O.n(count)})` });
      }));
      filters.level.value = filters.level.dataset.wanted || '';
      fillTypes();
    }

    function fillTypes() {
      const level = filters.level.value;
      const shown = types.filter((t) => !level || String(t.level) === level);
      filters.type.replaceChildren(el('option', { value: '', text: 'any' }),
        ...shown.map((t) => el('option', { value: t.code, text: `${t.display} (${t.code}, ${O.n(t.count)})` })));
      const wanted = filters.type.dataset.wanted || '';
      // a type of the URL the token sees none of stays asked for (no result), never silently dropped
      if (wanted && !shown.some((t) => t.code === wanted)) filters.type.append(el('option', { value: wanted, text: `${wanted} (none visible)` }));
      filters.type.value = wanted;
    }

    // the filters as search parameters (the level: the types at that depth)
    function filterParams() {
      const params = [];
      const type = filters.type.value;
      const level = filters.level.value;
      if (type) params.push(['type', type]);
      else if (level) params.push(['type', types.filter((t) => String(t.level) === level).map((t) => t.code).join(',')]);
      if (filters.status.value) params.push(['status', filters.status.value]);
      if (filters.closed.value === 'closed') params.push(['operational-status', 'C']);
      if (filters.closed.value === 'open') params.push(['operational-status:missing', 'true']);
      if (filters.since.value) params.push(['_lastUpdated', `ge${filters.since.value}`]);
      return params;
    }

    function hashState() {
      return { q: fold(search.value), type: filters.type.value, level: filters.level.value, status: filters.status.value,
        closed: filters.closed.value, since: filters.since.value };
    }

    // each result's path: its ancestors among the included ones (as far as the token sees), else its parent's name
    function pathOf(unit, included) {
      const names = [];
      for (let parent = O.refId(unit.partOf); parent && included.has(parent) && names.length < 30;) {
        const up = included.get(parent);
        names.unshift(up.name || up.id);
        parent = O.refId(up.partOf);
      }
      if (!names.length && unit.partOf && unit.partOf.display) return `in ${unit.partOf.display}`;
      return names.join(' › ');
    }

    const asked = () => JSON.stringify([fold(search.value), filterParams()]);

    async function find(more) {
      const name = fold(search.value);
      const selection = filterParams();
      const key = asked();
      if (!more) setHash(hashState());
      if (pending) pending.abort();
      clearTimeout(timer);
      if (!name && !selection.length) { show([], new Map(), '', false); exported = null; shownFor = key; return; }
      pending = new AbortController();
      const { signal } = pending;
      // a new search: the results shown are the former filters' until it answers, so they are not offered for export
      if (!more) { exported = null; $('export-results').hidden = true; }
      const paths = ['_include:iterate', 'Location:partof'];
      const recent = Boolean(filters.since.value) && !name;
      const named = [...(name ? [['name:contains', name]] : []), ...selection];
      const byName = more ? morePage : ['/Location', [...named, ['_sort', recent ? '-_lastUpdated' : 'name'],
        ['_count', String(PAGE)], ['_total', 'accurate'], paths]];
      const uuid = !more && UUID.exec(name);
      const codes = [];
      if (uuid) codes.push(O.fhir('/Location', [['identifier', `urn:uuid:${uuid[1].toLowerCase()}`], ...selection, paths], signal));
      if (!more && !uuid && WORD.test(name)) {
        // the start of a code, any case: its aliases too match :text, which name search already finds: only the units
        // whose code (a non-alias identifier) starts so are kept
        const start = name.toLowerCase();
        codes.push(O.fhir('/Location', [['identifier:text', name], ...selection, ['_count', '50'], paths], signal).then((bundle) => ({
          ...bundle, entry: (bundle.entry || []).filter((e) => (e.search || {}).mode !== 'match' || (e.resource.identifier || [])
            .some((i) => !/\/sid\/alias$/.test(i.system || '') && (i.value || '').toLowerCase().startsWith(start))) })));
      }
      if (!more && !uuid && ID.test(name)) {
        codes.push(O.fhir('/Location', [['_id', name], ...selection, paths], signal).catch((e) => { if (e instanceof O.Missing || e.status === 400) return {}; throw e; }));
      }
      try {
        const [bundle, ...found] = await Promise.all([O.fhir(byName[0], byName[1], signal), ...codes]);
        const included = new Map();
        for (const b of [bundle, ...found]) for (const unit of O.entries(b, 'include')) included.set(unit.id, unit);
        const first = found.flatMap((b) => O.entries(b, 'match'));
        const matches = O.entries(bundle, 'match');
        for (const unit of [...first, ...matches]) included.set(unit.id, unit);
        const seen = new Set(more ? [...results.children].map((o) => o.dataset.id) : []);
        const shownBefore = seen.size;
        const fresh = [...first, ...matches].filter((unit) => !seen.has(unit.id) && seen.add(unit.id));
        morePage = O.nextPage(bundle, '/Location');
        const total = bundle.total;
        const counted = total === undefined ? `more than ${O.n(shownBefore + matches.length)}` : O.n(total);
        const codeNote = first.length ? `${O.n(first.length)} by code, uuid or id; ` : '';
        const what = name ? `by name${recent ? '' : ' (sorted by name)'}` : recent ? 'changed since ' + O.formatDate(filters.since.value) + ' (newest first)' : 'matching the filters (sorted by name)';
        show(fresh, included, `${codeNote}${counted} ${what}; ${O.n(seen.size)} shown`, more, recent);
        shownFor = key;
        exported = total ? named : null;
        $('export-results').hidden = !exported;
        if (exported) $('export-results-count').textContent = `${O.n(total)} result${total === 1 ? '' : 's'}`;
        O.announce(`${codeNote}${counted} ${name ? 'by name' : 'found'}`);
      } catch (error) {
        if (O.quiet(error)) return;
        show([], new Map(), '', false);
        $('results-note').replaceChildren(O.errorBox(error, () => find(more), 'The search failed'));
      }
    }

    function show(found, included, note, append, recent) {
      const start = append ? results.children.length : 0;
      const options = found.map((unit, i) => {
        const index = start + i;
        const updated = recent && unit.meta ? `changed ${O.formatInstant(unit.meta.lastUpdated)}` : null;
        const option = el('li', { role: 'option', id: `result-${index}`, 'data-id': unit.id, 'aria-selected': 'false' },
          el('span', { class: 'label', text: unit.name || unit.id }),
          el('span', { class: 'meta', text: [O.typeText(unit), ...O.flags(unit), updated].filter(Boolean).join(' · ') }),
          el('span', { class: 'path', text: pathOf(unit, included) }));
        if (O.closed(unit) || unit.status === 'inactive') option.classList.add('gone');
        option.addEventListener('mousedown', (event) => { event.preventDefault(); pick(unit.id); activate(index); });
        return option;
      });
      if (append) results.append(...options); else results.replaceChildren(...options);
      $('results-note').textContent = note;
      $('more-results').hidden = !morePage;
      if (!append) $('export-results').hidden = true;
      search.setAttribute('aria-expanded', results.children.length ? 'true' : 'false');
      if (!append) search.removeAttribute('aria-activedescendant');
    }

    function activate(index) {
      const options = [...results.children];
      options.forEach((option, i) => option.setAttribute('aria-selected', i === index ? 'true' : 'false'));
      if (options[index]) { search.setAttribute('aria-activedescendant', options[index].id); options[index].scrollIntoView({ block: 'nearest' }); }
    }

    // Enter: a result of what is typed, never of the results still shown for an earlier search (typed fast, Enter
    // comes before the finder's 200 ms pause has searched it)
    async function pickTyped(at) {
      if (shownFor !== asked()) {
        await find(false);
        if (shownFor !== asked()) return; // typed on, or the search failed: its own message says so
        at = 0;
      }
      const options = [...results.children];
      if (options.length) pick(options[Math.max(at, 0)].dataset.id);
    }

    async function exportAs(kind) {
      if (!exported) return;
      const note = $('export-note');
      note.textContent = 'Exporting…';
      try {
        const size = await O.download(`/Location/$${kind}`, exported, kind === 'csv' ? 'text/csv' : 'application/geo+json', `locations-search.${kind}`);
        note.textContent = `Saved locations-search.${kind} (${O.n(Math.round(size / 1024))} KB).`;
      } catch (error) {
        note.replaceChildren(O.quiet(error) ? '' : O.errorBox(error, () => exportAs(kind), 'The export failed'));
      }
    }

    if (window.matchMedia('(max-width: 800px)').matches) $('filters').open = false; // the results first on a phone
    search.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => find(false), 200); });
    filters.level.addEventListener('change', () => {
      const level = filters.level.value;
      const kept = types.some((t) => t.code === filters.type.value && (!level || String(t.level) === level));
      filters.type.dataset.wanted = kept ? filters.type.value : '';
      fillTypes();
      find(false);
    });
    filters.type.addEventListener('change', () => { filters.type.dataset.wanted = filters.type.value; find(false); });
    for (const key of ['status', 'closed', 'since']) filters[key].addEventListener('change', () => find(false));
    $('more-results').addEventListener('click', () => find(true));
    $('export-results-csv').addEventListener('click', () => exportAs('csv'));
    $('export-results-geojson').addEventListener('click', () => exportAs('geojson'));
    search.addEventListener('keydown', (event) => {
      const options = [...results.children];
      const at = options.findIndex((option) => option.getAttribute('aria-selected') === 'true');
      if (event.key === 'ArrowDown' && options.length) { event.preventDefault(); activate(Math.min(at + 1, options.length - 1)); }
      else if (event.key === 'ArrowUp' && options.length) { event.preventDefault(); activate(Math.max(at - 1, 0)); }
      else if (event.key === 'Enter') { event.preventDefault(); pickTyped(at); }
      else if (event.key === 'Escape') { search.value = ''; find(false); }
    });

    return {
      find,
      loadTypes,
      // the form as the URL says (a new token: the same search)
      async apply(state) {
        search.value = state.get('q') || '';
        filters.type.dataset.wanted = state.get('type') || '';
        filters.level.dataset.wanted = state.get('level') || '';
        if (state.get('type') || state.get('level')) await ready; // the filters need the types first
        if (state.get('level') && ![...filters.level.options].some((o) => o.value === state.get('level'))) {
          filters.level.append(el('option', { value: state.get('level'), text: `${state.get('level')} (none visible)` }));
        }
        filters.level.value = state.get('level') || '';
        fillTypes();
        filters.status.value = state.get('status') || '';
        filters.closed.value = state.get('closed') || '';
        filters.since.value = state.get('since') || '';
        if (['type', 'level', 'status', 'closed', 'since'].some((k) => state.get(k))) $('filters').open = true;
        find(false);
      },
      // everything of the previous token: results, notes, the form and the types
      clear() {
        if (pending) pending.abort();
        clearTimeout(timer);
        search.value = '';
        for (const key of ['status', 'closed', 'since']) filters[key].value = '';
        types = [];
        filters.type.dataset.wanted = '';
        filters.level.dataset.wanted = '';
        filters.type.replaceChildren(el('option', { value: '', text: 'any' }));
        filters.level.replaceChildren(el('option', { value: '', text: 'any' }));
        results.replaceChildren();
        shownFor = null;
        morePage = null;
        exported = null;
        for (const id of ['results-note', 'export-note', 'types-error']) $(id).replaceChildren();
        $('more-results').hidden = true;
        $('export-results').hidden = true;
        search.setAttribute('aria-expanded', 'false');
      },
    };
  };
})();
