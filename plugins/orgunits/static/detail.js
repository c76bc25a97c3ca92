'use strict';
// The explorer's detail of the selected unit: its names, identifiers (each with a copy button), type and level,
// status, dates, parent chain as far as the token sees, its children and the units below it counted by type and
// level ($counts: exact), exports of its subtree (CSV, GeoJSON), a printable sheet and its history. Each part that
// fails says why in place, with a Retry.
(function () {
  const O = window.Orgunit;
  const { el } = O;

  O.createDetail = function createDetail({ pick, lineage, map }) {
    const detail = document.getElementById('detail');

    function row(term, ...values) {
      const shown = values.filter((value) => value !== null && value !== undefined && value !== '');
      return shown.length ? [el('dt', { text: term }), ...shown.map((value) => el('dd', {}, value))] : [];
    }

    function copyButton(what, value) {
      const button = el('button', { type: 'button', class: 'copy', 'aria-label': `Copy ${what} ${value}`, text: `Copy ${what}` });
      button.addEventListener('click', async () => {
        const done = await O.copy(value).catch(() => false);
        button.textContent = done ? 'Copied' : 'Copy failed';
        O.announce(done ? `The ${what} ${value} is copied.` : `The ${what} could not be copied.`);
        setTimeout(() => { if (button.isConnected) button.textContent = `Copy ${what}`; }, 1500);
      });
      return button;
    }

    // an identifier labelled by its system's last segment (…/sid/demo: "demo"); the whole system as its title
    function identifier(id) {
      const system = id.system || '';
      const uuid = system === 'urn:ietf:rfc:3986';
      const label = uuid ? 'UUID' : system.split(/[/:]/).filter(Boolean).pop() || 'no system';
      return el('span', { class: 'identifier' }, el('span', { class: 'system', title: system || null, text: label }), ' ',
        el('code', { text: id.value || '' }), id.use ? el('span', { class: 'meta', text: ` (${id.use})` }) : null);
    }

    function fhirLinks(unit) {
      const reference = `Location/${unit.id}`;
      const print = el('button', { type: 'button', class: 'print', text: 'Print sheet' });
      print.addEventListener('click', () => window.print());
      return el('p', { class: 'links actions' },
        el('a', { href: O.fhirHref(reference), class: 'fhir-html', text: 'FHIR (HTML)' }), ' · ',
        el('a', { href: `${O.fhirHref(reference)}?_format=json`, class: 'fhir-json', text: 'raw JSON', onclick: (event) => rawJson(event, reference) }), ' · ',
        el('a', { href: `${O.fhirHref(reference)}/_history`, text: '_history' }), ' ', print);
    }

    async function rawJson(event, reference) {
      event.preventDefault();
      try {
        const response = await O.request(`/${reference}`, [['_format', 'json'], ['_pretty', 'true']], { raw: true });
        location.assign(URL.createObjectURL(new Blob([await response.arrayBuffer()], { type: 'application/json' })));
      } catch (error) { if (!O.quiet(error)) O.announce(error.message); }
    }

    // "17: 12 CSPS, 3 Dispensaire" (children), "2,760 units: 17 District sanitaire · 295 Aire de santé · 2,448 at
    // level 5 (1,610 CSPS · 390 Dispensaire …) · 87 closed" (below)
    function byType(counted) {
      return counted.groups.sort((a, b) => b.count - a.count).map((g) => `${O.n(g.count)} ${g.type.display || g.type.code}`).join(', ');
    }

    function byLevel(counted) {
      const levels = new Map();
      for (const g of counted.groups) {
        const key = g.level ?? Infinity;
        levels.set(key, [...(levels.get(key) || []), g]);
      }
      const parts = [...levels].sort((a, b) => a[0] - b[0]).map(([level, groups]) => {
        const n = groups.reduce((sum, g) => sum + g.count, 0);
        if (groups.length === 1) return `${O.n(n)} ${groups[0].type.display || groups[0].type.code}`;
        const named = groups.sort((a, b) => b.count - a.count).map((g) => `${O.n(g.count)} ${g.type.code}`).join(' · ');
        return `${O.n(n)} at ${level === Infinity ? 'no level' : `level ${level}`} (${named})`;
      });
      const closed = counted.groups.reduce((sum, g) => sum + (g.closed || 0), 0);
      return `${O.n(counted.total)} unit${counted.total === 1 ? '' : 's'}: ${parts.join(' · ')}${closed ? ` · ${O.n(closed)} closed` : ''}`;
    }

    async function counted(dd, params, format, current) {
      dd.textContent = '…';
      try {
        const found = O.counts(await O.fhir('/Location/$counts', [...params, ['by', 'type']]));
        if (current()) dd.textContent = found.total ? format(found) : 'none';
        return found;
      } catch (error) {
        if (current() && !O.quiet(error)) dd.replaceChildren(O.errorBox(error, () => counted(dd, params, format, current), 'Not counted'));
        return null;
      }
    }

    // `target`: the unit (its own $csv: it and every unit below it), or a group the token cannot open (the search
    // partof:below=its id)
    function exports(target, current, text) {
      const note = el('span', { class: 'note', role: 'status' });
      const button = (kind, label) => el('button', { type: 'button', class: `export-${kind}`, text: label, onclick: async () => {
        note.textContent = 'Exporting…';
        try {
          const name = target.group ? `locations-below-${target.id}.${kind}` : `locations-${target.id}.${kind}`;
          const [path, params] = target.group ? [`/Location/$${kind}`, [['partof:below', target.id]]]
            : [`/Location/${encodeURIComponent(target.id)}/$${kind}`, []];
          const size = await O.download(path, params, kind === 'csv' ? 'text/csv' : 'application/geo+json', name);
          if (current()) note.textContent = `Saved ${name} (${O.n(Math.max(1, Math.round(size / 1024)))} KB).`;
        } catch (error) {
          if (current() && !O.quiet(error)) note.replaceChildren(O.errorBox(error, null, 'The export failed'));
        }
      } });
      return el('p', { class: 'exports actions' }, text, button('csv', 'CSV'), ' ', button('geojson', 'GeoJSON'), ' ', note);
    }

    async function parents(unit, chain, current) {
      const found = await lineage(O.refId(unit.partOf)).catch(() => []);
      if (!current()) return;
      const hidden = found.length ? O.refId(found[0].partOf) : O.refId(unit.partOf);
      chain.replaceChildren(
        ...(hidden ? [el('li', { class: 'hidden-parent', title: 'not visible with this token', text: '…' })] : []),
        ...[...found, unit].map((step) => el('li', {}, step === unit
          ? el('span', { text: step.name })
          : el('a', { href: `#unit=${encodeURIComponent(step.id)}`, text: step.name,
            onclick: (event) => { if (!event.ctrlKey && !event.metaKey) { event.preventDefault(); pick(step.id); } } }))));
    }

    async function history(unit, section, current) {
      section.replaceChildren(el('h3', { text: 'History' }));
      let bundle;
      try { bundle = await O.fhir(`/Location/${encodeURIComponent(unit.id)}/_history`, [['_count', '50']]); } catch (error) {
        if (current() && !O.quiet(error)) section.append(O.errorBox(error, () => history(unit, section, current), 'The history could not be loaded'));
        return;
      }
      if (!current()) return;
      const rows = (bundle.entry || []).map((entry) => {
        const version = entry.resource || {};
        const meta = version.meta || {};
        return el('tr', {},
          el('td', {}, el('a', { href: O.fhirHref(`Location/${unit.id}/_history/${meta.versionId}`), text: `v${meta.versionId}` })),
          el('td', { text: O.formatInstant(meta.lastUpdated) || '' }), el('td', { text: version.name || '' }), el('td', { text: version.status || '' }));
      });
      section.append(el('div', { class: 'table-scroll', tabindex: '0', role: 'region', 'aria-label': 'Versions' },
        el('table', { class: 'versions' },
          el('thead', {}, el('tr', {}, ...['version', 'updated', 'name', 'status'].map((h) => el('th', { scope: 'col', text: h })))),
          el('tbody', {}, ...rows))));
    }

    // the first page of children (the map's areas and their boundaries); a failure is the map's to show
    async function drawMap(unit, current) {
      let bundle;
      try { bundle = await O.fhir(`/Location/${encodeURIComponent(unit.id)}/$children`, [['_count', '100'], ['_sort', 'name']]); } catch (error) {
        if (current() && !O.quiet(error)) map.error(error, () => drawMap(unit, current));
        return;
      }
      if (!current()) return;
      map.draw(unit, O.entries(bundle), current).catch((error) => {
        if (current() && !O.quiet(error)) map.error(error, () => drawMap(unit, current));
      });
    }

    return {
      // a parent the token cannot open, whose units it sees (a scope `partof:below=X`, a list grouped by parent)
      showGroup(group, current) {
        const below = el('dd', { class: 'below', text: '…' });
        detail.replaceChildren(
          el('h2', { id: 'unit-name', text: group.name }),
          el('p', { class: 'note', text: 'This unit is not visible with this token: what follows is what it sees below it.' }),
          el('dl', {}, ...row('Id', group.id), el('dt', { text: 'Below it' }), below),
          exports({ id: group.id, group: true }, current, 'Export every unit below it that this token sees: '));
        O.announce(`${group.name}: selected`);
        counted(below, [['partof:below', group.id]], byLevel, current);
        map.drawGroup(group, current).catch((error) => {
          if (current() && !O.quiet(error)) map.error(error, () => map.drawGroup(group, current));
        });
      },
      loading() { detail.replaceChildren(el('p', { class: 'note', text: 'Loading…' })); },
      empty() { detail.replaceChildren(el('p', { class: 'note', text: 'Select a unit in the tree or find it by name.' })); },
      error(box) { detail.replaceChildren(box); },

      show(unit, current) {
        const validation = O.ext(unit, 'org-unit-validation-status');
        const depth = O.ext(unit, 'org-unit-type-depth');
        const opening = O.ext(unit, 'opening-date');
        const closing = O.ext(unit, 'closing-date');
        const position = unit.position && `${unit.position.latitude}, ${unit.position.longitude}`;
        const org = unit.managingOrganization;
        const ids = unit.identifier || [];
        const official = ids.find((i) => i.use === 'official');
        const uuid = ids.find((i) => i.system === 'urn:ietf:rfc:3986');
        const chain = el('ol', { class: 'chain', 'aria-label': 'Parent chain' });
        const historySection = el('section', { class: 'history', 'aria-label': 'History' });
        const kids = el('dd', { class: 'children', text: '…' });
        const below = el('dd', { class: 'below', text: '…' });
        detail.replaceChildren(
          el('h2', { id: 'unit-name', text: unit.name || unit.id }),
          el('p', { class: `status-badge ${unit.status || ''}${O.closed(unit) ? ' closed' : ''}`,
            text: [unit.status, O.closed(unit) ? 'closed' : null, validation && validation.valueCode].filter(Boolean).join(' · ') }),
          fhirLinks(unit),
          el('p', { class: 'copies actions' }, copyButton('id', unit.id), official ? copyButton('code', official.value) : null,
            uuid ? copyButton('uuid', uuid.value) : null),
          chain,
          el('dl', {},
            ...row('Id', unit.id),
            ...row('Type', O.typeText(unit)),
            ...row('Level', depth && String(depth.valueInteger)),
            el('dt', { text: 'Children' }), kids,
            el('dt', { text: 'Below it' }), below,
            ...row('Aliases', ...(unit.alias || [])),
            ...row('Identifiers', ...ids.map(identifier)),
            ...row('Opening date', opening && O.formatDate(opening.valueDate)),
            ...row('Closing date', closing && O.formatDate(closing.valueDate)),
            ...row('Position', position),
            ...row('Managing organization', org && (org.reference
              ? el('a', { href: O.fhirHref(org.reference), text: org.display || org.reference }) : org.display)),
            ...row('Version', unit.meta && `${unit.meta.versionId} (${O.formatInstant(unit.meta.lastUpdated)})`)),
          exports({ id: unit.id }, current, 'Export this unit and every unit below it: '),
          historySection);
        O.announce(`${unit.name}: selected`);
        parents(unit, chain, current);
        history(unit, historySection, current);
        counted(kids, [['partof', unit.id]], (c) => (c.groups.length > 1 ? `${O.n(c.total)}: ${byType(c)}` : byType(c)), current);
        counted(below, [['partof:below', unit.id]], byLevel, current);
        drawMap(unit, current);
      },
    };
  };
})();
