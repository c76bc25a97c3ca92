'use strict';
// The explorer's map pane (Leaflet): the selected unit, its children's boundaries and points, and every point below
// it (Location/[id]/$geojson?positioned=true: one streamed request, however many), drawn in clusters (cluster.js);
// for a facility, the other units of its parent. Labels on the areas (those that would overlap hidden), a legend, a
// note that says what is drawn, and a list of what the map shows for the keyboard and screen readers (the shapes
// take no tab stop). One state: cleared before each unit, and an error replaces all of it.
(function () {
  const O = window.Orgunit;
  const { el } = O;
  const LABELLED_AREAS = 60;
  const READ_AREAS = 200; // children without a point read for their boundary
  const LISTED = 300; // points listed per kind in the map's list
  const POINT_PROPERTIES = 'name,closed,parent'; // what the map draws and lists

  O.createMap = function createMap({ pick, read, tiles }) {
    const $ = (id) => document.getElementById(id);
    let map = null;
    let areas = null; // boundaries (SVG, labelled)
    let marks = null; // the selected unit's own shapes
    const layers = {}; // kind -> Clusters
    let drawn = { unit: null, children: [], kinds: {} };
    let pending = null; // the points being fetched

    function ensure() {
      if (map) return true;
      if (!window.L) { $('map-note').textContent = 'The map library did not load.'; return false; }
      // no fading: a removed label leaves at once (else it would still crowd out the new ones)
      map = L.map('map', { attributionControl: Boolean(tiles), zoomSnap: 0.25, fadeAnimation: false }).setView([0, 0], 2);
      if (tiles) L.tileLayer(tiles, { maxZoom: 19 }).addTo(map);
      areas = L.featureGroup().addTo(map);
      for (const kind of ['sibling', 'descendant', 'child']) layers[kind] = new O.Clusters(map, L.layerGroup().addTo(map), (p, label) => point(p, kind, label), kind);
      marks = L.featureGroup().addTo(map);
      map.on('zoomend moveend', () => { redrawPoints(); declutter(); });
      return true;
    }

    function boundary(unit) {
      const found = (unit.extension || []).find((e) => e.url === O.BOUNDARY);
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

    const hasPoint = (unit) => unit.position && Number.isFinite(unit.position.latitude) && Number.isFinite(unit.position.longitude);

    function point(p, kind, labelled) {
      const marker = L.circleMarker([p.lat, p.lon], { className: `point ${kind}-point${p.closed ? ' closed-point' : ''}`,
        radius: kind === 'child' ? 6 : 5, weight: 2, fillOpacity: 0.85 });
      marker.bindTooltip(el('span', { text: p.name }), labelled ? { permanent: true, direction: 'right', className: 'map-label' } : {});
      marker.on('click', () => pick(p.id));
      return marker;
    }

    function area(unit, kind, labelled) {
      const shapes = boundary(unit);
      for (const shape of shapes) {
        const polygon = L.polygon(shape, { className: `boundary ${kind}-boundary`, weight: kind === 'selected' ? 3 : 1,
          fillOpacity: kind === 'selected' ? 0.05 : 0.2 });
        if (kind !== 'selected') {
          polygon.bindTooltip(el('span', { text: unit.name || unit.id }),
            labelled ? { permanent: true, direction: 'center', className: 'map-label area-label' } : {});
          polygon.on('click', () => pick(unit.id));
        }
        (kind === 'selected' ? marks : areas).addLayer(polygon);
      }
      return shapes.length ? 1 : 0;
    }

    // labels that would overlap an earlier one are hidden (the largest areas are labelled first)
    function declutter() {
      const placed = [];
      for (const label of document.querySelectorAll('#map .map-label')) {
        label.classList.remove('crowded');
        const box = label.getBoundingClientRect();
        const overlaps = placed.some((b) => box.left < b.right && box.right > b.left && box.top < b.bottom && box.bottom > b.top);
        if (overlaps) label.classList.add('crowded'); else placed.push(box);
      }
    }

    function redrawPoints() {
      let clusters = 0;
      for (const layer of Object.values(layers)) clusters += layer.redraw().clusters;
      marks.eachLayer((layer) => layer.bringToFront && layer.bringToFront());
      const pane = $('map-pane');
      pane.dataset.clusters = String(clusters);
      pane.dataset.zoom = String(map.getZoom());
      pane.dataset.points = String(Object.values(layers).reduce((sum, layer) => sum + layer.points.length, 0));
    }

    function fit() {
      const bounds = L.latLngBounds([]);
      for (const group of [marks, areas]) if (group.getLayers().length) bounds.extend(group.getBounds());
      for (const layer of Object.values(layers)) { const b = layer.bounds(); if (b) bounds.extend(b); }
      if (!bounds.isValid()) return;
      map.invalidateSize();
      // at once, not animated: the map is in its final state (its clusters drawn) when it says it is complete
      if (bounds.getNorthEast().equals(bounds.getSouthWest())) map.setView(bounds.getCenter(), 12, { animate: false });
      else map.fitBounds(bounds, { padding: [24, 24], maxZoom: 13, animate: false });
    }

    function legend(counts) {
      const item = (kind, text, n) => (n ? el('li', {}, el('span', { class: `swatch ${kind}`, 'aria-hidden': 'true' }),
        n === true ? text : `${text} (${O.n(n)})`) : null);
      $('legend').replaceChildren(el('ul', { 'aria-label': 'Legend' },
        item('selected', 'selected unit', counts.selected),
        item('child-boundary', 'areas of its children', counts.childAreas),
        item('child-point', 'its children (points)', counts.child),
        item('descendant-point', counts.child ? 'further below it (points)' : 'units below it (points)', counts.descendant),
        item('sibling-point', 'the other units of its parent (points)', counts.sibling),
        item('cluster', 'a cluster: several points, numbered (click to zoom in)', counts.clusters > 0),
        item('closed-point', 'closed (ringed red)', counts.closed)));
    }

    // the keyboard's and screen readers' view of the map: what it shows, each unit a link that opens it
    function list() {
      const details = $('map-list');
      const body = details.querySelector('.map-list-body');
      if (!details.open) { body.replaceChildren(); return; }
      const { unit, children, kinds } = drawn;
      if (!unit) { body.replaceChildren(el('p', { class: 'note', text: 'Nothing is drawn.' })); return; }
      const link = (id, name, extra) => el('li', {}, el('a', { href: `#unit=${encodeURIComponent(id)}`, text: name,
        onclick: (event) => { if (!event.ctrlKey && !event.metaKey) { event.preventDefault(); pick(id); } } }), extra ? ` ${extra}` : '');
      const section = (title, items, total) => (total ? [el('h3', { text: `${title} (${O.n(total)})` }),
        el('ul', {}, ...items.slice(0, LISTED)),
        total > LISTED ? el('p', { class: 'note', text: `and ${O.n(total - LISTED)} more: export them (CSV or GeoJSON) from the unit's detail.` }) : null] : []);
      const areaChildren = children.filter((c) => drawn.bounded.has(c.id));
      body.replaceChildren(
        el('p', { text: `Selected: ${unit.name}` }),
        ...section('Areas of its children', areaChildren.map((c) => link(c.id, c.name)), areaChildren.length),
        ...['child', 'descendant', 'sibling'].flatMap((kind) => section({ child: 'Its children (points)',
          descendant: 'Units below its children (points)', sibling: 'The other units of its parent (points)' }[kind],
        (kinds[kind] || []).slice(0, LISTED).map((p) => link(p.id, p.name, p.closed ? '(closed)' : '')), (kinds[kind] || []).length)));
    }

    // every point of a $geojson answer (`progress(bytes)` as it comes, then parsed whole: a single JSON.parse is
    // many times faster than one per feature); an answer cut short does not parse: refused, never drawn incomplete
    async function points(path, params, signal, progress) {
      const response = await O.request(path, [...params, ['positioned', 'true'], ['properties', POINT_PROPERTIES]],
        { signal, accept: 'application/geo+json', raw: true });
      const parts = [];
      let bytes = 0;
      let body;
      try {
        const reader = response.body.getReader();
        for (let next = await reader.read(); !next.done; next = await reader.read()) {
          parts.push(next.value);
          bytes += next.value.length;
          if (progress) progress(bytes);
        }
        body = JSON.parse(await new Blob(parts).text());
      } catch (error) {
        if (error.name === 'AbortError') throw error;
        throw new O.ApiError('The points were cut short (the connection or the server broke off): the map is not drawn rather than drawn incomplete.', 0, null);
      }
      return (body.features || []).filter((f) => f.geometry && f.geometry.type === 'Point').map((f) => {
        const props = f.properties || {};
        return { id: f.id, name: props.name || f.id, lon: f.geometry.coordinates[0], lat: f.geometry.coordinates[1],
          closed: Boolean(props.closed), parent: O.refId({ reference: props.parent }) };
      });
    }

    async function paint(target, current) {
      clear();
      if (!ensure()) return;
      const { unit, children, facility, query } = target;
      const pane = $('map-pane');
      pane.dataset.unit = unit ? unit.id : `group:${target.id}`;
      drawn = { unit: unit || { id: target.id, name: target.name }, children, kinds: {}, bounded: new Set(), group: !unit };
      const counts = { selected: 0, childAreas: 0, child: 0, descendant: 0, sibling: 0, clusters: 0, closed: 0 };
      if (unit) {
        counts.selected = area(unit, 'selected', false);
        if (hasPoint(unit)) {
          marks.addLayer(L.circleMarker([unit.position.latitude, unit.position.longitude],
            { className: 'point selected-point', radius: 9, weight: 3, fillOpacity: 0.9 }));
          counts.selected = 1;
        }
      }
      $('map-note').textContent = `${target.name}: drawing…`;
      fit();
      const controller = new AbortController();
      pending = controller;
      const labels = children.length <= LABELLED_AREAS;
      const unbounded = children.filter((child) => !hasPoint(child)).slice(0, READ_AREAS);
      const reader = async () => { // boundaries are in reads only: six at a time
        for (let child = unbounded.shift(); child; child = unbounded.shift()) {
          const whole = await read(child.id).catch(() => null);
          if (!current()) return;
          if (whole && area(whole, 'child', labels)) { counts.childAreas += 1; drawn.bounded.add(child.id); }
        }
      };
      const progress = (bytes) => { if (current()) $('map-note').textContent = `${target.name}: reading the points (${O.n(Math.round(bytes / 1048576 * 10) / 10)} MB)…`; };
      const [all] = await Promise.all([points(query[0], query[1], controller.signal, progress), ...[1, 2, 3, 4, 5, 6].map(reader)]);
      if (!current()) return;
      const own = unit ? unit.id : null;
      const others = all.filter((p) => p.id !== own);
      const kindOf = (p) => (facility ? 'sibling' : unit && p.parent === unit.id ? 'child' : 'descendant');
      for (const kind of ['child', 'descendant', 'sibling']) {
        drawn.kinds[kind] = others.filter((p) => kindOf(p) === kind);
        layers[kind].set(drawn.kinds[kind]);
        counts[kind] = drawn.kinds[kind].length;
      }
      counts.closed = others.filter((p) => p.closed).length;
      counts.clusters = others.length > 1 ? 1 : 0; // shown in the legend when some may be (the zoom decides)
      legend(counts);
      const below = counts.child + counts.descendant;
      const extra = facility ? `${O.n(counts.sibling)} other units of its parent drawn`
        : `every unit below it with a position: ${O.n(below)} point${below === 1 ? '' : 's'}`;
      const clustered = (n) => ` Several points lie close: ${O.n(n)} clusters at this zoom (zoom in, or click one).`;
      const skipped = children.filter((c) => !hasPoint(c)).length > READ_AREAS ? `; the boundaries of the first ${READ_AREAS} of its children` : '';
      $('map-note').textContent = `${target.name}: ${extra}${skipped}.`;
      fit(); // with the legend and the note in place: the map's own size
      redrawPoints();
      declutter();
      if (Number(pane.dataset.clusters)) $('map-note').append(clustered(Number(pane.dataset.clusters)));
      pane.dataset.complete = 'true';
      list();
    }

    function clear() {
      if (pending) pending.abort();
      pending = null;
      drawn = { unit: null, children: [], kinds: {}, bounded: new Set() };
      if (map) {
        for (const group of [areas, marks]) { group.eachLayer((layer) => layer.unbindTooltip()); group.clearLayers(); }
        for (const layer of Object.values(layers)) layer.clear();
      }
      $('legend').replaceChildren();
      $('map-note').replaceChildren();
      const pane = $('map-pane');
      for (const key of ['points', 'clusters', 'complete', 'unit', 'zoom']) delete pane.dataset[key];
      list();
    }

    return {
      clear,
      // one state: an error replaces whatever the map showed
      error(error, retry) {
        clear();
        $('map-note').replaceChildren(O.errorBox(error, retry, 'The map could not be drawn'));
      },

      // `children`: the unit's children as found (the first pages); `current()`: still the unit selected
      async draw(unit, children, current) {
        const parentId = O.refId(unit.partOf);
        const facility = hasPoint(unit) && !children.length && Boolean(parentId);
        const query = facility ? ['/Location/$geojson', [['partof', parentId]]] : [`/Location/${encodeURIComponent(unit.id)}/$geojson`, []];
        return paint({ unit, children, facility, query, name: unit.name }, current);
      },

      // a parent the token cannot open (its units' group): every point below it, nothing of its own
      async drawGroup(group, current) {
        return paint({ unit: null, children: [], facility: false, name: group.name, id: group.id,
          query: ['/Location/$geojson', [['partof:below', group.id]]] }, current);
      },

      resize() { if (map) { map.invalidateSize(); fit(); } },
      wire() { $('map-list').addEventListener('toggle', list); },
    };
  };
})();
