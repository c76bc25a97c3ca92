'use strict';
// The explorer's map pane (Leaflet): the selected unit, its children's boundaries and points, and, when the unit
// has no point of its own (a region, a district), the points of the units below its children (its facilities);
// for a facility, the other units of its parent; labels on the areas (and on the points when few), and a legend.
(function () {
  const LABELLED_POINTS = 25; // points labelled when no more are drawn
  const LABELLED_AREAS = 60;

  window.OrgunitMap = function create(api) {
    const $ = (id) => document.getElementById(id);
    const { el } = api;
    let map = null;
    let drawn = null;

    function boundary(unit) {
      const found = (unit.extension || []).find((e) => e.url === api.BOUNDARY);
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

    const parentOf = (unit) => (unit.partOf && /^Location\/[^/]+$/.test(unit.partOf.reference || '') ? unit.partOf.reference.slice(9) : null);
    const hasPoint = (unit) => unit.position && Number.isFinite(unit.position.latitude) && Number.isFinite(unit.position.longitude);

    function tip(layer, unit, permanent) {
      layer.bindTooltip(el('span', { text: unit.name || unit.id }),
        permanent ? { permanent: true, direction: 'center', className: 'map-label' } : {});
      layer.on('click', () => api.pick(unit.id));
    }

    // kind: selected, child or descendant; returns [areas, points] drawn
    function draw(unit, kind, labels) {
      let areas = 0;
      for (const shape of boundary(unit)) {
        const polygon = L.polygon(shape, { className: `boundary ${kind}-boundary`, weight: kind === 'selected' ? 3 : 1,
          fillOpacity: kind === 'selected' ? 0.05 : 0.2 });
        tip(polygon, unit, labels && kind !== 'selected');
        drawn.addLayer(polygon);
        areas = 1;
      }
      if (hasPoint(unit)) {
        const marker = L.circleMarker([unit.position.latitude, unit.position.longitude],
          { className: `point ${kind}-point`, radius: kind === 'selected' ? 8 : kind === 'child' ? 5 : 4, weight: 2, fillOpacity: 0.8 });
        tip(marker, unit, labels && !areas);
        drawn.addLayer(marker);
        return [areas, 1];
      }
      return [areas, 0];
    }

    function legend(counts, note) {
      const item = (kind, text, n) => (n ? el('li', {}, el('span', { class: `swatch ${kind}`, 'aria-hidden': 'true' }), `${text} (${n})`) : null);
      $('legend').replaceChildren(el('ul', { 'aria-label': 'Legend' },
        item('selected', 'selected unit', counts.selected),
        item('child-boundary', 'areas of its children', counts.childAreas),
        item('child-point', 'its children (points)', counts.childPoints),
        item('descendant-point', 'facilities below it (points)', counts.descendants),
        item('sibling-point', 'the other units of its parent (points)', counts.siblings)));
      $('map-note').textContent = note;
    }

    function fit() {
      if (!drawn.getLayers().length) return;
      const bounds = drawn.getBounds();
      if (bounds.getNorthEast().equals(bounds.getSouthWest())) map.setView(bounds.getCenter(), 12);
      else map.fitBounds(bounds, { padding: [20, 20], maxZoom: 13 });
    }

    async function descendants(unit, current) {
      const found = [];
      let total = 0;
      let page = ['/Location', [['partof:below', unit.id], ['_elements', 'name,position,partOf,type'], ['_count', '100']]];
      for (let pages = 0; page && pages < 10 && found.length < api.MAX_POINTS && current(); pages += 1) {
        const bundle = await api.fhir(page[0], page[1]);
        found.push(...(bundle.entry || []).map((e) => e.resource).filter((r) => r && hasPoint(r)));
        total = bundle.total ?? total;
        page = api.nextPage(bundle, page[0]);
      }
      return { found: found.slice(0, api.MAX_POINTS), total, partial: Boolean(page) };
    }

    return {
      clear() {
        if (drawn) drawn.clearLayers();
        $('legend').replaceChildren();
        $('map-note').textContent = '';
      },

      async draw(unit, children, current) {
        if (!window.L) { $('map-note').textContent = 'The map library did not load.'; return; }
        if (!map) {
          map = L.map('map', { attributionControl: Boolean(api.TILES), zoomSnap: 0.25 }).setView([0, 0], 2);
          if (api.TILES) L.tileLayer(api.TILES, { maxZoom: 19 }).addTo(map);
          drawn = L.featureGroup().addTo(map);
        }
        drawn.clearLayers();
        const counts = { selected: 0, childAreas: 0, childPoints: 0, descendants: 0, siblings: 0 };
        const [ownArea, ownPoint] = draw(unit, 'selected', false);
        counts.selected = ownArea || ownPoint;
        const labels = children.length <= LABELLED_AREAS;
        for (const child of children) counts.childPoints += draw(child, 'child', children.length <= LABELLED_POINTS)[1];
        const show = (extra) => legend(counts, `${unit.name}: ${children.length} children${extra || ''}`);
        show();
        map.invalidateSize();
        fit();
        // boundaries are in reads only: the children without a point (areas) are read, six at a time
        const areas = children.filter((child) => !hasPoint(child)).slice(0, 200);
        const reader = async () => {
          for (let child = areas.shift(); child; child = areas.shift()) {
            const whole = await api.read(child.id).catch(() => null);
            if (!current()) return;
            if (whole) counts.childAreas += draw({ ...whole, position: undefined }, 'child', labels)[0];
          }
        };
        await Promise.all([1, 2, 3, 4, 5, 6].map(reader));
        if (!current()) return;
        let extra = '';
        if (!ownPoint && children.length) { // a unit above the facilities (an area): the points below it too
          const below = await descendants(unit, current);
          if (!current()) return;
          const shown = new Set(children.map((child) => child.id));
          const points = below.found.filter((point) => !shown.has(point.id));
          for (const point of points) counts.descendants += draw(point, 'descendant', points.length <= LABELLED_POINTS)[1];
          extra = `; ${below.found.length} points of the ${below.total} units below${below.partial ? ' (the first pages)' : ''}`;
        }
        if (ownPoint && !children.length && parentOf(unit)) { // a facility: its neighbours, for context
          const bundle = await api.fhir(`/Location/${encodeURIComponent(parentOf(unit))}/$children`, [['_count', '100']]).catch(() => ({}));
          if (!current()) return;
          const others = (bundle.entry || []).map((e) => e.resource).filter((r) => r && r.id !== unit.id);
          for (const other of others) counts.siblings += draw(other, 'sibling', false)[1];
          drawn.eachLayer((layer) => { if (/selected-/.test(layer.options.className || '')) layer.bringToFront(); });
          extra = counts.siblings ? `; ${counts.siblings} other units of its parent` : '';
        }
        show(extra);
        fit();
      },
    };
  };
})();
