'use strict';
// Point clustering for the explorer's map (Leaflet), written for it: every point is kept; at each zoom the points in
// view are binned into a grid of CELL screen pixels anchored to the world (panning never reshuffles them), a cell
// of one point drawn as that point, a cell of several as one cluster at their centre (up to FEW points in view: all
// drawn and labelled), labelled with their number
// (a click zooms to them). Tens of thousands of points re-bin in a few milliseconds; at most a few hundred shapes
// are on the map at once. No shape takes a tab stop: the map pane lists what it shows for the keyboard.
(function () {
  const O = window.Orgunit;
  const CELL = 56; // px
  const FEW = 25; // points in view drawn one by one, labelled
  const WORLD = 256; // Leaflet's world at zoom 0, in px (EPSG:3857)

  const worldX = (lon) => ((lon + 180) / 360) * WORLD;
  const worldY = (lat) => {
    const s = Math.sin((Math.max(-85.0511, Math.min(85.0511, lat)) * Math.PI) / 180);
    return (0.5 - Math.log((1 + s) / (1 - s)) / (4 * Math.PI)) * WORLD;
  };

  O.Clusters = class Clusters {
    // drawPoint(point, labelled) -> layer; every point: { lat, lon, ... }
    constructor(map, group, drawPoint, kind) {
      this.map = map;
      this.group = group;
      this.drawPoint = drawPoint;
      this.kind = kind;
      this.points = [];
      this.x = new Float64Array(0);
      this.y = new Float64Array(0);
      this.shown = { points: 0, clusters: 0, inView: 0 };
      this.redraw = this.redraw.bind(this);
    }

    set(points) {
      this.points = points;
      this.x = new Float64Array(points.length);
      this.y = new Float64Array(points.length);
      points.forEach((p, i) => { this.x[i] = worldX(p.lon); this.y[i] = worldY(p.lat); });
    }

    bounds() {
      if (!this.points.length) return null;
      let [south, west, north, east] = [90, 180, -90, -180];
      for (const p of this.points) {
        if (p.lat < south) south = p.lat;
        if (p.lat > north) north = p.lat;
        if (p.lon < west) west = p.lon;
        if (p.lon > east) east = p.lon;
      }
      return L.latLngBounds([south, west], [north, east]);
    }

    // every shape off the map with its tooltip (a permanent tooltip could outlive its shape)
    empty() {
      this.group.eachLayer((layer) => layer.unbindTooltip());
      this.group.clearLayers();
    }

    clear() {
      this.points = [];
      this.set([]);
      this.empty();
      this.shown = { points: 0, clusters: 0, inView: 0 };
    }

    redraw() {
      this.empty();
      const scale = 2 ** this.map.getZoom();
      const view = this.map.getPixelBounds();
      const [x0, y0, x1, y1] = [view.min.x - CELL, view.min.y - CELL, view.max.x + CELL, view.max.y + CELL];
      const cells = new Map();
      for (let i = 0; i < this.points.length; i += 1) {
        const x = this.x[i] * scale;
        const y = this.y[i] * scale;
        if (x < x0 || x > x1 || y < y0 || y > y1) continue;
        const key = `${Math.floor(x / CELL)}:${Math.floor(y / CELL)}`;
        const cell = cells.get(key);
        if (cell) cell.push(i); else cells.set(key, [i]);
      }
      let inView = 0;
      for (const cell of cells.values()) inView += cell.length;
      const few = inView <= FEW; // few points: each drawn and labelled (the labels that would overlap are hidden)
      let clusters = 0;
      for (const cell of cells.values()) {
        if (few || cell.length === 1) { for (const i of cell) this.group.addLayer(this.drawPoint(this.points[i], few)); continue; }
        clusters += 1;
        this.group.addLayer(this.cluster(cell));
      }
      this.shown = { points: this.points.length, clusters, inView };
      return this.shown;
    }

    cluster(cell) {
      let lat = 0;
      let lon = 0;
      for (const i of cell) { lat += this.points[i].lat; lon += this.points[i].lon; }
      const size = Math.round(22 + 7 * Math.log10(cell.length));
      const label = O.el('span', { text: cell.length >= 10000 ? `${Math.round(cell.length / 1000)}k` : String(cell.length) });
      const marker = L.marker([lat / cell.length, lon / cell.length], {
        keyboard: false, // the map's list serves the keyboard
        icon: L.divIcon({ html: label, className: `cluster ${this.kind}-cluster`, iconSize: [size, size] }),
      });
      marker.bindTooltip(O.el('span', { text: `${O.n(cell.length)} units: zoom in to see them` }));
      marker.on('click', () => {
        const bounds = L.latLngBounds(cell.map((i) => [this.points[i].lat, this.points[i].lon]));
        if (bounds.getNorthEast().equals(bounds.getSouthWest())) this.map.setView(bounds.getCenter(), this.map.getZoom() + 3);
        else this.map.fitBounds(bounds, { padding: [30, 30] });
      });
      return marker;
    }
  };
})();
