// memreplay HTML report: draws the charts of the page from the JSON in
// #memreplay-data. Hand-written, no dependencies, no network: the page must
// open from disk years from now. See profiler/report/html.go for the data.
//
// Every chart is an inline SVG element with data-chart="name", its drawn
// series as elements with class "series" (paths for lines, groups of rects
// for bars), so that the self-check (and `memreplay report --svg`) can read
// what was actually drawn. Sizes print as PyTorch's format_size does.
(function () {
  'use strict';

  // Errors are collected before anything else runs, so that the self-check
  // sees a failure anywhere on the page.
  var errors = [];
  window.addEventListener('error', function (e) {
    errors.push(String(e && e.message ? e.message : e));
  });
  var consoleError = console.error;
  console.error = function () {
    errors.push(Array.prototype.map.call(arguments, String).join(' '));
    return consoleError.apply(console, arguments);
  };

  var SVGNS = 'http://www.w3.org/2000/svg';
  var FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif';
  // Colours: the three timeline series and the segment map's states.
  var C = {
    live: '#1f77b4', requested: '#2ca02c', reserved: '#d62728',
    oom: '#b00020', retry: '#ff7f0e', peak: '#111111', marker: '#6b6b6b',
    allocated: '#4e79a7', pending: '#9467bd', stranded: '#e15759', cached: '#d9d9d9',
    grid: '#e6e6e6', axis: '#555555', text: '#222222', capacity: '#6a3d9a'
  };
  // One colour per run in comparisons; site colours in the segment map
  // (without the blue of plain allocated blocks or the states' colours).
  var PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#edc948', '#b07aa1', '#76b7b2', '#ff9da7', '#9c755f', '#bab0ac', '#86bcb6'];
  var SITES = ['#f28e2b', '#59a14f', '#edc948', '#17becf', '#9c755f', '#76b7b2', '#bcbd22', '#8c564b'];

  // formatSize is PyTorch's format_size: "n bytes" up to 1024, then KiB,
  // MiB, GiB with two decimals, bounds inclusive. The two decimals are
  // computed in integers with ties to even, as C++'s fixed formatting and
  // Go's strconv do (toFixed rounds ties up), so that the page prints the
  // same digits as the terminal table.
  function formatSize(n) {
    n = Math.round(n);
    if (n <= 1024) return n + ' bytes';
    var unit, name;
    if (n <= 1048576) { unit = 1024; name = ' KiB'; }
    else if (n <= 1073741824) { unit = 1048576; name = ' MiB'; }
    else { unit = 1073741824; name = ' GiB'; }
    var hundredths = fixed2(n, unit);
    var whole = Math.floor(hundredths / 100), frac = hundredths % 100;
    return whole + '.' + (frac < 10 ? '0' : '') + frac + name;
  }
  // fixed2 is round(n*100/unit) with ties to even, exact for the sizes a
  // GPU has (n*100 stays below 2^53 up to 90 TB).
  function fixed2(n, unit) {
    var num = n * 100;
    var q = Math.floor(num / unit), r = num - q * unit;
    if (2 * r > unit || (2 * r === unit && q % 2 === 1)) q++;
    return q;
  }
  function percent(f) { return (100 * f).toFixed(1) + '%'; }
  function hex(n) { return '0x' + n.toString(16); }

  function el(name, attrs, parent) {
    var e = document.createElementNS(SVGNS, name);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var a = { x: x, y: y, 'font-family': FONT, 'font-size': 11, fill: C.text };
    for (var k in attrs) a[k] = attrs[k];
    var t = el('text', a, parent);
    t.textContent = s;
    return t;
  }
  function title(parent, s) { el('title', {}, parent).textContent = s; }
  function h(tag, attrs, kids) {
    var e = document.createElement(tag);
    for (var k in attrs) {
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'class') e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (kids || []).forEach(function (c) { if (c) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return e;
  }
  function newSVG(name, w, hgt) {
    var s = document.createElementNS(SVGNS, 'svg');
    s.setAttribute('data-chart', name);
    s.setAttribute('width', w);
    s.setAttribute('height', hgt);
    s.setAttribute('viewBox', '0 0 ' + w + ' ' + hgt);
    s.setAttribute('font-family', FONT);
    el('rect', { x: 0, y: 0, width: w, height: hgt, fill: '#ffffff' }, s);
    return s;
  }

  // Nice ticks: steps of 1, 2 or 5 times a power of ten, in units of
  // `unit` (bytes: KiB, MiB or GiB so that the labels read naturally).
  function ticks(lo, hi, count, unit) {
    unit = unit || 1;
    var span = (hi - lo) / unit;
    if (!(span > 0)) return [lo];
    var raw = span / count, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = p;
    [1, 2, 5, 10].some(function (m) { step = m * p; return m * p >= raw; });
    step *= unit;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }
  function byteUnit(max) {
    if (max >= 2 * 1073741824) return [1073741824, 'GiB'];
    if (max >= 2 * 1048576) return [1048576, 'MiB'];
    if (max >= 2 * 1024) return [1024, 'KiB'];
    return [1, 'bytes'];
  }
  function tickLabel(v, u) {
    var x = v / u[0];
    return (Math.abs(x - Math.round(x)) < 1e-9 ? String(Math.round(x)) : x.toFixed(2).replace(/0+$/, '').replace(/\.$/, '')) + ' ' + u[1];
  }
  function numLabel(v) {
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + 'M';
    if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + 'k';
    return String(Math.round(v * 1000) / 1000);
  }

  // legendRows lays legend items (name, colour) out left to right from x,
  // wrapping at width; it returns the rows, each a list of [x, item].
  function legendRows(items, x, width) {
    var rows = [[]], lx = x;
    items.forEach(function (it) {
      var w = 30 + 6.2 * it.name.length;
      if (lx + w > width && rows[rows.length - 1].length) { rows.push([]); lx = x; }
      rows[rows.length - 1].push([lx, it]);
      lx += w;
    });
    return rows;
  }
  // drawLegend draws legendRows' rows from y, 18 px apart; swatch draws
  // one item's mark. An item shortened for the legend keeps its full name
  // as the label's hover text.
  function drawLegend(svg, rows, y, swatch) {
    rows.forEach(function (row, ri) {
      row.forEach(function (cell) {
        swatch(cell[0], y + 18 * ri, cell[1]);
        var t = text(svg, cell[0] + 22, y + 18 * ri + 4, cell[1].name, { 'class': 'legend' });
        if (cell[1].full && cell[1].full !== cell[1].name) title(t, cell[1].full);
      });
    });
  }

  // shortLabels cuts each label longer than n characters in the middle,
  // keeping its start and its end: site names that share a long start
  // differ at the end (the file and line, the "[stack N]" the tables add).
  // Labels that would still read the same stay whole.
  function shortLabels(labels, n) {
    var cut = labels.map(function (s) {
      if (s.length <= n) return s;
      var tail = Math.ceil((n - 1) * 0.6), head = n - 1 - tail;
      return s.slice(0, head) + '\u2026' + s.slice(s.length - tail);
    });
    var count = {};
    cut.forEach(function (s) { count[s] = (count[s] || 0) + 1; });
    return cut.map(function (s, i) { return count[s] > 1 ? labels[i] : s; });
  }

  // lineChart draws series of [x, y] points with axes and a legend.
  // spec: {name, width, height, x: [lo, hi], y: [lo, hi], xLabel, yFormat
  // ('bytes' | 'percent' | 'number'), series: [{name, color, points, dash,
  // width, opacity}] drawn in order (the last on top),
  // markers: [{x, color, label, kind: 'line' | 'tick' | 'annotation'}], dots: [{x, y, label}],
  // hlines: [{y, color, label}] (a device's capacity)}
  function lineChart(spec) {
    var W = spec.width || 960;
    var m = { l: 78, r: 16, t: 28, b: 40 };
    var legend = legendRows(spec.series, m.l, W - m.r);
    m.t += 18 * (legend.length - 1);
    var H = (spec.height || 300) + 18 * (legend.length - 1);
    var svg = newSVG(spec.name, W, H);
    var pw = W - m.l - m.r, ph = H - m.t - m.b;
    var x0 = spec.x[0], x1 = spec.x[1] > spec.x[0] ? spec.x[1] : spec.x[0] + 1;
    var y0 = spec.y[0], y1 = spec.y[1] > spec.y[0] ? spec.y[1] : spec.y[0] + 1;
    var sx = function (v) { return m.l + (v - x0) / (x1 - x0) * pw; };
    var sy = function (v) { return m.t + ph - (v - y0) / (y1 - y0) * ph; };
    var u = spec.yFormat === 'bytes' ? byteUnit(y1) : null;
    var yt = ticks(y0, y1, 5, u ? u[0] : 1);
    yt.forEach(function (v) {
      el('line', { x1: m.l, x2: m.l + pw, y1: sy(v), y2: sy(v), stroke: C.grid }, svg);
      var s = u ? tickLabel(v, u) : spec.yFormat === 'percent' ? Math.round(v * 100) + '%' : numLabel(v);
      text(svg, m.l - 6, sy(v) + 4, s, { 'text-anchor': 'end' });
    });
    ticks(x0, x1, 8).forEach(function (v) {
      el('line', { x1: sx(v), x2: sx(v), y1: m.t + ph, y2: m.t + ph + 4, stroke: C.axis }, svg);
      text(svg, sx(v), m.t + ph + 16, spec.xFormat ? spec.xFormat(v) : numLabel(v), { 'text-anchor': 'middle' });
    });
    el('line', { x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph, stroke: C.axis }, svg);
    el('line', { x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph, stroke: C.axis }, svg);
    if (spec.xLabel) text(svg, m.l + pw / 2, H - 6, spec.xLabel, { 'text-anchor': 'middle', fill: C.axis });
    var clipId = 'clip-' + spec.name;
    var defs = el('defs', {}, svg);
    var cp = el('clipPath', { id: clipId }, defs);
    el('rect', { x: m.l, y: m.t - 2, width: pw, height: ph + 4 }, cp);
    var plot = el('g', { 'clip-path': 'url(#' + clipId + ')' }, svg);
    (spec.hlines || []).forEach(function (hl) {
      var g = el('g', { 'class': 'hline' }, plot);
      el('line', { x1: m.l, x2: m.l + pw, y1: sy(hl.y), y2: sy(hl.y), stroke: hl.color, 'stroke-width': 1.2, 'stroke-dasharray': '6 4' }, g);
      text(g, m.l + pw - 4, sy(hl.y) - 4, hl.label, { 'text-anchor': 'end', fill: hl.color });
      title(g, hl.label);
    });
    var labelRows = []; // right end of the last annotation label in each row
    (spec.markers || []).forEach(function (mk) {
      if (mk.x < x0 || mk.x > x1) return;
      var g = el('g', { 'class': 'marker ' + (mk.kind || 'line') }, plot);
      if (mk.kind === 'tick') {
        el('rect', { x: sx(mk.x) - 1.5, y: m.t + ph - 10, width: 3, height: 10, fill: mk.color }, g);
      } else if (mk.kind === 'annotation') {
        // A thin dotted line, under the OOMs' dashed ones, with its label.
        el('line', { x1: sx(mk.x), x2: sx(mk.x), y1: m.t, y2: m.t + ph, stroke: mk.color, 'stroke-width': 1, 'stroke-dasharray': '1 3' }, g);
        if (mk.named) {
          // Labels that would overlap go on the next row down.
          var name = mk.label.split(' at event ')[0], px = sx(mk.x) + 3, row = 0;
          while (row < labelRows.length && labelRows[row] > px) row++;
          if (row < 6) {
            labelRows[row] = px + 5.6 * name.length + 6;
            text(g, px, m.t + 10 + 11 * row, name, { fill: mk.color, 'font-size': 10 });
          }
        }
      } else {
        el('line', { x1: sx(mk.x), x2: sx(mk.x), y1: m.t, y2: m.t + ph, stroke: mk.color, 'stroke-width': 1.2, 'stroke-dasharray': '4 3' }, g);
        el('path', { d: 'M' + (sx(mk.x) - 5) + ' ' + m.t + 'l10 0l-5 8z', fill: mk.color }, g);
      }
      title(g, mk.label);
    });
    spec.series.forEach(function (s) {
      var d = [];
      s.points.forEach(function (p, i) {
        d.push((i ? 'L' : 'M') + sx(p[0]).toFixed(1) + ' ' + sy(p[1]).toFixed(1));
      });
      var attrs = { 'class': 'series', 'data-series': s.name, d: d.join(''), fill: 'none', stroke: s.color, 'stroke-width': s.width || 1.6, 'stroke-linejoin': 'round' };
      if (s.dash) attrs['stroke-dasharray'] = s.dash;
      if (s.opacity) attrs['stroke-opacity'] = s.opacity;
      var p = el('path', attrs, plot);
      title(p, s.name);
      if (s.dots) s.points.forEach(function (pt) {
        el('circle', { cx: sx(pt[0]), cy: sy(pt[1]), r: 3, fill: s.color }, plot);
      });
    });
    (spec.dots || []).forEach(function (dt) {
      if (dt.x < x0 || dt.x > x1) return;
      var c = el('circle', { cx: sx(dt.x), cy: sy(dt.y), r: 4, fill: 'none', stroke: C.peak, 'stroke-width': 1.5 }, plot);
      title(c, dt.label);
    });
    // Legend, left to right above the plot.
    drawLegend(svg, legend, 12, function (x, y, s) {
      el('line', { x1: x, x2: x + 18, y1: y, y2: y, stroke: s.color, 'stroke-width': Math.max(2.5, s.width || 0),
        'stroke-opacity': s.opacity || 1, 'stroke-dasharray': s.dash || '' }, svg);
    });
    svg.plotArea = { l: m.l, t: m.t, w: pw, h: ph, x0: x0, x1: x1, sx: sx, sy: sy };
    return svg;
  }

  // downsample keeps at most two points (the minimum and the maximum, in
  // the order they occur) per pixel column of the visible range, so that
  // a long timeline draws in time proportional to the chart's width while
  // every peak and trough stays visible.
  function downsample(xs, ys, i0, i1, x0, x1, columns) {
    var out = [];
    if (i1 - i0 <= 2 * columns) {
      for (var i = i0; i < i1; i++) out.push([xs[i], ys[i]]);
      return out;
    }
    var col = -1, lo = -1, hi = -1;
    var flush = function () {
      if (lo < 0) return;
      if (lo === hi) out.push([xs[lo], ys[lo]]);
      else if (lo < hi) { out.push([xs[lo], ys[lo]]); out.push([xs[hi], ys[hi]]); }
      else { out.push([xs[hi], ys[hi]]); out.push([xs[lo], ys[lo]]); }
    };
    for (var j = i0; j < i1; j++) {
      var c = Math.min(columns - 1, Math.floor((xs[j] - x0) / (x1 - x0) * columns));
      if (c !== col) { flush(); col = c; lo = hi = j; continue; }
      if (ys[j] < ys[lo]) lo = j;
      if (ys[j] > ys[hi]) hi = j;
    }
    flush();
    return out;
  }

  function lowerBound(a, v) {
    var lo = 0, hi = a.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (a[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // ---- the timeline ---------------------------------------------------

  // Timeline samples arrive as columns (see html.go's htmlTimeline).
  var zoom = { mode: 'event', range: null };
  var timelines = []; // {run, host}

  function timeAxis(run) {
    var t = run.timeline;
    var t0 = 0;
    for (var i = 0; i < t.time_us.length; i++) if (t.time_us[i] > 0) { t0 = t.time_us[i]; break; }
    return t0;
  }
  function anyTime() {
    return data.runs.some(function (r) { return r.timeline.time_us.some(function (v) { return v > 0; }); });
  }

  function xsOf(run) {
    var t = run.timeline;
    if (zoom.mode === 'event') return t.event;
    var t0 = timeAxis(run);
    return t.time_us.map(function (v) { return v > 0 ? (v - t0) / 1e6 : 0; });
  }
  // xOfEvent maps an event index to the x axis (time: the time of the
  // first sample at or after it).
  function xOfEvent(run, xs, ev) {
    if (zoom.mode === 'event') return ev;
    var i = lowerBound(run.timeline.event, ev);
    return i < xs.length ? xs[i] : xs[xs.length - 1];
  }

  // fullRange is the x range that shows all of run: shared by all runs
  // when they replay the same events (one trace under several settings),
  // so that their charts line up; the run's own otherwise.
  function fullRange(run) {
    var lo = Infinity, hi = -Infinity;
    var same = data.runs.every(function (r) { return r.report.events === data.runs[0].report.events; });
    (same || !run ? data.runs : [run]).forEach(function (r) {
      var xs = xsOf(r);
      if (!xs.length) return;
      var first = 0;
      if (zoom.mode === 'time') while (first < xs.length - 1 && r.timeline.time_us[first] === 0) first++;
      lo = Math.min(lo, zoom.mode === 'event' ? 0 : xs[first]);
      hi = Math.max(hi, xs[xs.length - 1]);
    });
    if (!isFinite(lo)) return [0, 1];
    // A little room on the right, so that a marker at the last event
    // (an OOM that ended the replay) is not drawn on the frame.
    return [lo, hi + Math.max(zoom.mode === 'event' ? 1 : 0, (hi - lo) * 0.01)];
  }

  // devInfo is the JSON report's entry of device index in run.
  function devInfo(run, index) {
    return run.report.devices.filter(function (d) { return d.index === index; })[0];
  }
  // capacityText says a device's capacity as the figures table does.
  function capacityText(d) {
    if (!d) return 'unknown';
    if (d.capacity_source === 'unknown') return 'not limited';
    return formatSize(d.capacity) + (d.capacity_source ? ' (' + d.capacity_source + ')' : '');
  }

  // drawTimeline draws item's chart: the run's timeline, or with item.dev
  // one device's columns, its OOMs, retries and peak, and its capacity as
  // a dashed line when the trace gives one near the drawn range.
  function drawTimeline(item) {
    var run = item.run, t = item.dev || run.timeline;
    var range = zoom.range || fullRange(run);
    var xs = xsOf(run);
    var i0 = 0, i1 = xs.length;
    if (zoom.mode === 'time') while (i0 < i1 && t.time_us[i0] === 0) i0++;
    // One sample either side of the visible range, so that lines reach
    // the edges.
    var a = Math.max(i0, lowerBound(xs, range[0]) - 1), b = Math.min(i1, lowerBound(xs, range[1]) + 1);
    var width = Math.max(480, Math.min(1100, item.host.clientWidth || 960));
    var columns = width - 94;
    var ymax = 0;
    for (var i = a; i < b; i++) ymax = Math.max(ymax, t.max_reserved[i], t.max_live[i]);
    ymax = Math.max(ymax, 1) * 1.05;
    var dev = item.dev ? item.dev.index : null;
    var mine = function (d) { return dev === null || d === dev; };
    var hlines = [];
    var info = dev === null ? null : devInfo(run, dev);
    if (info && info.capacity_source !== 'unknown' && info.capacity > 0 && info.capacity <= 2 * ymax) {
      ymax = Math.max(ymax, info.capacity * 1.05);
      hlines.push({ y: info.capacity, color: C.capacity, label: 'capacity ' + formatSize(info.capacity) });
    }
    var markers = [];
    run.ooms.forEach(function (o) {
      if (!mine(o.device)) return;
      markers.push({ x: xOfEvent(run, xs, o.event), color: C.oom, label: 'OOM at event ' + o.event + ': ' + formatSize(o.size) + ' requested' + (o.message ? '\n' + o.message : '') });
    });
    // The trace's record_function annotations: each range's START and END.
    // Their names are written beside them when they are few.
    var marks = run.report.markers || [];
    marks.forEach(function (mk) {
      if (!mine(mk.device)) return;
      markers.push({ x: xOfEvent(run, xs, mk.event), color: C.marker, kind: 'annotation', named: marks.length <= 24, label: mk.label + ' ' + mk.stage + ' at event ' + mk.event +
        (mk.time_us ? ' (' + ((mk.time_us - timeAxis(run)) / 1e6).toFixed(6) + ' s)' : '') });
    });
    run.report.retries.forEach(function (r) {
      if (!mine(r.device)) return;
      markers.push({ x: xOfEvent(run, xs, r.event), color: C.retry, kind: 'tick', label: r.count + ' alloc retr' + (r.count > 1 ? 'ies' : 'y') + ' at event ' + r.event + ' (cache released, cudaMalloc retried)' });
    });
    var dots = [];
    var pe = run.peak_event, pl = run.peak_live;
    if (info) {
      pe = info.fragmentation ? info.fragmentation.peak_live_event : -1;
      pl = info.fragmentation ? info.fragmentation.peak_live_bytes : 0;
    }
    if (pe >= 0) dots.push({ x: xOfEvent(run, xs, pe), y: pl, label: 'peak live ' + formatSize(pl) + ' at event ' + pe });
    var svg = lineChart({
      name: 'timeline-' + run.id + (dev === null ? '' : '-device' + dev), width: width, height: 300,
      x: range, y: [0, ymax], yFormat: 'bytes',
      xLabel: zoom.mode === 'event' ? 'event' : 'seconds since the first timed event',
      xFormat: zoom.mode === 'event' ? numLabel : function (v) { return v.toFixed(v < 10 ? 2 : 1) + ' s'; },
      // Requested bytes are live bytes before rounding, so the two lines
      // often coincide: requested is a wide pale band drawn first and live
      // a thin line over it, so that both stay visible.
      series: [
        { name: 'reserved', color: C.reserved, points: downsample(xs, t.max_reserved, a, b, range[0], range[1], columns) },
        { name: 'requested', color: C.requested, width: 6, opacity: 0.35, points: downsample(xs, t.requested, a, b, range[0], range[1], columns) },
        { name: 'live (allocated)', color: C.live, points: downsample(xs, t.max_live, a, b, range[0], range[1], columns) }
      ],
      markers: markers, dots: dots, hlines: hlines
    });
    item.host.replaceChildren(svg);
    attachTimelineMouse(item, svg, xs, a, b);
  }

  // noTimeline says why a run has no line to draw: the trace recorded no
  // event (or one), as a snapshot taken without _record_memory_history
  // does, and holds only the allocator's state.
  function noTimeline(r) {
    var ev = r.report.events, rc = r.report.reconstructed, f = r.report.fragmentation;
    if (ev >= 2) return 'No timeline was recorded for this run.';
    var s = ev === 0 ? 'No events recorded' : 'Only 1 event recorded';
    if (rc || f.peak_reserved_bytes > 0) {
      var what = rc ? rc.segments + ' segments, ' + formatSize(rc.segment_bytes) + ' reserved, ' + rc.live_blocks + ' live blocks of ' + formatSize(rc.live_bytes)
        : formatSize(f.peak_reserved_bytes) + ' reserved, ' + formatSize(f.peak_live_bytes) + ' live';
      return s + ': the trace holds the allocator\'s state (' + what + '), not its history, so there is nothing to draw over time. ' +
        'The figures above and the segment map below show that state.';
    }
    return s + ' and no state: there is nothing to draw.';
  }

  function redrawTimelines() {
    timelines.forEach(drawTimeline);
    var z = document.getElementById('zoom-state');
    if (z) {
      var r = zoom.range;
      z.textContent = r ? 'showing ' + (zoom.mode === 'event' ? 'events ' + Math.round(r[0]) + ' to ' + Math.round(r[1]) : r[0].toFixed(3) + ' s to ' + r[1].toFixed(3) + ' s') + ' (double-click or Reset to see all)' : 'drag across a chart to zoom';
    }
  }

  var tip;
  function showTip(x, y, lines) {
    if (!tip) { tip = h('div', { 'class': 'tip' }); document.body.appendChild(tip); }
    tip.textContent = lines.join('\n');
    tip.style.display = 'block';
    tip.style.left = Math.min(x + 14, window.innerWidth - 300) + 'px';
    tip.style.top = (y + 14) + 'px';
  }
  function hideTip() { if (tip) tip.style.display = 'none'; }

  function attachTimelineMouse(item, svg, xs, a, b) {
    var pa = svg.plotArea, run = item.run, t = run.timeline, c = item.dev || t;
    var cursor = el('line', { y1: pa.t, y2: pa.t + pa.h, stroke: '#888', 'stroke-width': 1, visibility: 'hidden' }, svg);
    var band = el('rect', { y: pa.t, height: pa.h, fill: 'rgba(31,119,180,0.15)', visibility: 'hidden' }, svg);
    var drag = null;
    var toX = function (ev) {
      var r = svg.getBoundingClientRect();
      var px = (ev.clientX - r.left) * (svg.viewBox.baseVal.width / r.width);
      return { px: px, x: pa.x0 + (px - pa.l) / pa.w * (pa.x1 - pa.x0) };
    };
    svg.addEventListener('mousedown', function (ev) { drag = toX(ev); ev.preventDefault(); });
    svg.addEventListener('mousemove', function (ev) {
      var p = toX(ev);
      if (p.px < pa.l || p.px > pa.l + pa.w) { cursor.setAttribute('visibility', 'hidden'); hideTip(); return; }
      cursor.setAttribute('x1', p.px); cursor.setAttribute('x2', p.px); cursor.setAttribute('visibility', 'visible');
      if (drag) {
        band.setAttribute('x', Math.min(drag.px, p.px)); band.setAttribute('width', Math.abs(p.px - drag.px));
        band.setAttribute('visibility', 'visible');
      }
      var i = Math.min(b - 1, Math.max(a, lowerBound(xs, p.x)));
      if (i < 0 || i >= xs.length) return;
      var lines = [run.label + (item.dev ? ', device ' + item.dev.index : ''), 'event ' + t.event[i] + (t.time_us[i] ? ' (' + ((t.time_us[i] - timeAxis(run)) / 1e6).toFixed(3) + ' s)' : '')];
      // Around the peak the columns hold every event (timeline.detail),
      // without the allocator's free blocks.
      var every = i >= t.detail[0] && i < t.detail[1];
      if (every) lines.push('every event around the peak');
      else if (run.sample_every > 1) lines.push('sample of ' + run.sample_every + ' events: maxima over it');
      lines.push('live ' + formatSize(c.max_live[i]), 'requested ' + formatSize(c.requested[i]), 'reserved ' + formatSize(c.max_reserved[i]));
      if (!item.dev && !every) lines.push('cached free ' + formatSize(t.free[i]) + ', largest block ' + formatSize(t.largest_free[i]));
      showTip(ev.clientX, ev.clientY, lines);
    });
    svg.addEventListener('mouseleave', function () { cursor.setAttribute('visibility', 'hidden'); band.setAttribute('visibility', 'hidden'); drag = null; hideTip(); });
    svg.addEventListener('mouseup', function (ev) {
      if (!drag) return;
      var p = toX(ev), lo = Math.min(drag.x, p.x), hi = Math.max(drag.x, p.x);
      var moved = Math.abs(p.px - drag.px);
      drag = null;
      band.setAttribute('visibility', 'hidden');
      if (moved < 4) return;
      var full = fullRange(run);
      lo = Math.max(lo, full[0]); hi = Math.min(hi, full[1]);
      if (zoom.mode === 'event' && hi - lo < 2) return;
      if (!(hi > lo)) return;
      zoom.range = [lo, hi];
      redrawTimelines();
    });
    svg.addEventListener('dblclick', function () { zoom.range = null; redrawTimelines(); });
  }

  // ---- the segment map ------------------------------------------------

  // drawSegments lays the capture's segments end to end, in address order,
  // as one strip wrapped over rows: each byte has the same width, so the
  // eye compares areas. Blocks are coloured by state; allocated blocks of
  // the largest sites by site.
  function drawSegments(run, cap, name) {
    var W = 960, rowH = 18, gapY = 6, sep = 2;
    var segs = cap.segments;
    var total = 0;
    segs.forEach(function (s) { total += s.size; });
    // Enough rows that segments and blocks stay distinguishable: about
    // three segments or eighty blocks a row.
    var nblocks = 0;
    segs.forEach(function (s) { nblocks += s.blocks.length; });
    var rows = Math.max(4, Math.min(32, Math.max(Math.ceil(segs.length / 3), Math.ceil(nblocks / 80))));
    var usable = W - 2;
    var perRow = Math.max(1, Math.ceil(total / rows));
    var states = [['allocated', C.allocated], ['stranded free (pinned segment)', C.stranded], ['cached free (releasable)', C.cached], ['pending free (record_stream)', C.pending]]
      .map(function (it) { return { name: it[0], color: it[1] }; });
    var siteNames = (run.colored_sites || []).map(function (st) { return (run.sites[st] || { name: '<no stack>' }).name; });
    var siteItems = shortLabels(siteNames, 48).map(function (label, i) {
      return { name: label, full: siteNames[i], color: SITES[i % SITES.length] };
    });
    var legend = legendRows(states, 4, W).concat(siteItems.length ? legendRows(siteItems, 4, W) : []);
    var legendH = 8 + 18 * legend.length;
    var Hh = legendH + rows * (rowH + gapY) + 4;
    var svg = newSVG(name, W, Hh);
    var siteColor = {};
    (run.colored_sites || []).forEach(function (st, i) { siteColor[st] = SITES[i % SITES.length]; });
    // place maps bytes [a, b) of the strip to rectangles over rows.
    var place = function (a, b, fill, g, tip) {
      while (a < b) {
        var row = Math.floor(a / perRow), end = Math.min(b, (row + 1) * perRow);
        var x = 1 + (a - row * perRow) / perRow * usable, w = (end - a) / perRow * usable;
        var r = el('rect', { x: x.toFixed(2), y: legendH + row * (rowH + gapY), width: Math.max(w, 0.6).toFixed(2), height: rowH, fill: fill }, g);
        if (tip) title(r, tip);
        a = end;
      }
    };
    var counts = { allocated: 0, pending: 0, stranded: 0, cached: 0 };
    var gBase = el('g', { 'class': 'series', 'data-series': 'free' }, svg);
    var gBlocks = el('g', { 'class': 'series', 'data-series': 'blocks' }, svg);
    var gSep = el('g', {}, svg);
    var pos = 0;
    segs.forEach(function (s) {
      var pinned = s.blocks.some(function (bl) { return bl.allocated; });
      var segDesc = 'segment ' + hex(s.address) + ', ' + formatSize(s.size) + (s.expandable ? ' (expandable, mapped run)' : '') + ', stream ' + s.stream + (data.multi_device ? ', device ' + s.device : '');
      // Free bytes: the gaps between blocks, stranded when a live block
      // pins the segment.
      var at = 0;
      var gap = function (from, to) {
        if (to <= from) return;
        counts[pinned ? 'stranded' : 'cached']++;
        place(pos + from, pos + to, pinned ? C.stranded : C.cached, gBase,
          (pinned ? 'stranded free block ' : 'cached free block ') + formatSize(to - from) + ' at offset ' + hex(from) + ' of ' + segDesc +
          (pinned ? '\nempty_cache cannot return it: live blocks pin the segment' : '\nempty_cache would return the segment'));
      };
      s.blocks.forEach(function (bl) {
        gap(at, bl.offset);
        var site = run.sites[bl.stack] || { name: '<no stack>', frames: [] };
        var fill = bl.allocated ? (siteColor[bl.stack] || C.allocated) : C.pending;
        counts[bl.allocated ? 'allocated' : 'pending']++;
        place(pos + bl.offset, pos + bl.offset + bl.size, fill, gBlocks,
          (bl.allocated ? 'allocated ' : 'freed, waiting for record_stream events: ') + formatSize(bl.size) + ' at offset ' + hex(bl.offset) + ' of ' + segDesc +
          (bl.allocated ? '\nsite: ' + site.name + (site.frames.length ? '\n  ' + site.frames.slice(0, 8).join('\n  ') : '') : ''));
        at = bl.offset + bl.size;
      });
      gap(at, s.size);
      pos += s.size;
      // Segment boundary.
      var row = Math.floor(pos / perRow);
      if (pos < total) {
        var x = 1 + (pos - row * perRow) / perRow * usable;
        el('rect', { x: (x - sep / 2).toFixed(2), y: legendH + row * (rowH + gapY) - 2, width: sep, height: rowH + 4, fill: '#222' }, gSep);
      }
    });
    drawLegend(svg, legend, 12, function (x, y, it) {
      el('rect', { x: x + 4, y: y - 6, width: 12, height: 12, fill: it.color }, svg);
    });
    svg.counts = counts;
    return svg;
  }

  // ---- bars: the settings side by side --------------------------------

  function barChart(name, categories, series, fmt) {
    var W = 960, rowH = 16, groupGap = 14, m = { l: 210, r: 90, t: 30 };
    var legend = legendRows(series, m.l, W - 10);
    m.t += 18 * (legend.length - 1);
    var H = m.t + categories.length * (series.length * rowH + groupGap) + 8;
    var svg = newSVG(name, W, H);
    var max = 1;
    series.forEach(function (s) { s.values.forEach(function (v) { max = Math.max(max, v); }); });
    var pw = W - m.l - m.r;
    var groups = series.map(function (s, si) {
      return el('g', { 'class': 'series', 'data-series': s.name }, svg);
    });
    categories.forEach(function (c, ci) {
      var y0 = m.t + ci * (series.length * rowH + groupGap);
      text(svg, m.l - 8, y0 + series.length * rowH / 2 + 4, c, { 'text-anchor': 'end' });
      series.forEach(function (s, si) {
        var v = s.values[ci], w = v / max * pw;
        var r = el('rect', { x: m.l, y: y0 + si * rowH, width: Math.max(w, 0.5).toFixed(1), height: rowH - 3, fill: s.color }, groups[si]);
        title(r, s.name + ': ' + c + ' ' + fmt(v));
        text(svg, m.l + w + 4, y0 + si * rowH + rowH - 6, fmt(v), { 'font-size': 10 });
      });
    });
    drawLegend(svg, legend, 14, function (x, y, s) {
      el('rect', { x: x + 4, y: y - 6, width: 12, height: 12, fill: s.color }, svg);
    });
    return svg;
  }

  // ---- page sections --------------------------------------------------

  var data = JSON.parse(document.getElementById('memreplay-data').textContent);

  function figureBox(svg, caption) {
    return h('figure', {}, [svg, caption ? h('figcaption', { text: caption }) : null]);
  }

  function summaryTable(runs) {
    var rows = [
      ['events', function (r) { return String(r.report.events) + (r.report.stopped ? ' (stopped at ' + r.report.stopped_at + ')' : ''); }],
      ['config', function (r) { return r.report.config || 'defaults'; }],
      ['policy', function (r) { return r.report.policy || 'pytorch'; }],
      ['capacity', function (r) {
        // As the terminal table says it (table.go).
        if (r.report.capacity_source === 'unknown') return 'not limited (the trace records none; --capacity sets one)';
        return formatSize(r.report.capacity) + (r.report.capacity_source ? ' (' + r.report.capacity_source + ')' : '');
      }],
      ['peak live', function (r) { return formatSize(r.report.fragmentation.peak_live_bytes) + ev(r.report.fragmentation.peak_live_event); }],
      ['peak reserved', function (r) { return formatSize(r.report.fragmentation.peak_reserved_bytes) + ev(r.report.fragmentation.peak_reserved_event); }],
      ['waste (1 - live/reserved)', function (r) { return percent(r.report.fragmentation.waste_ratio); }],
      ['reserved at peak live', function (r) { return formatSize(r.report.fragmentation.reserved_bytes_at_peak); }],
      ['largest free block at peak', function (r) { return formatSize(r.report.fragmentation.largest_free_block_bytes_at_peak); }],
      ['stranded at peak', function (r) { return formatSize(r.report.fragmentation.stranded_bytes_at_peak); }],
      ['external fragmentation at peak', function (r) { return percent(r.report.fragmentation.external_fragmentation_at_peak); }],
      ['internal waste at peak', function (r) { return formatSize(r.report.fragmentation.internal_waste_bytes_at_peak); }],
      ['alloc retries', function (r) { return String(r.report.device_calls.alloc_retries); }],
      ['OOMs', function (r) { return String(r.report.device_calls.ooms); }],
      ['cudaMalloc / cudaFree', function (r) { return r.report.device_calls.cuda_malloc + ' / ' + r.report.device_calls.cuda_free; }],
      ['cuMemMap / cuMemUnmap', function (r) { return r.report.device_calls.cu_mem_map + ' / ' + r.report.device_calls.cu_mem_unmap; }]
    ];
    function ev(e) { return e === null || e === undefined || e === 0 && false ? '' : e < 0 ? ' (initial state)' : ' (event ' + e + ')'; }
    var bestRow = 'peak reserved';
    if (data.multi_device) {
      rows = multiDeviceRows(runs, rows, ev);
      bestRow = rows.bestRow;
    }
    var head = h('tr', {}, [h('th', { text: 'figure' })].concat(runs.map(function (r) { return h('th', { text: r.label }); })));
    var body = rows.map(function (row) {
      return h('tr', {}, [h('td', { text: row[0] })].concat(runs.map(function (r) {
        var best = data.best === r.id && (row[0] === bestRow);
        return h('td', { 'class': 'num' + (best ? ' best' : ''), 'data-figure': row[0], text: row[1](r) });
      })));
    });
    return h('table', { 'class': 'figures' }, [h('thead', {}, [head]), h('tbody', {}, body)]);
  }

  // multiDeviceRows are the figures table's rows for runs on several
  // devices: each device's figures with its capacity first, then the sums
  // that mean something, labelled as sums: the peaks of the devices'
  // summed bytes at one moment, and the counts over all devices.
  function multiDeviceRows(runs, single, ev) {
    var idx = [];
    runs.forEach(function (r) { r.report.devices.forEach(function (d) { if (idx.indexOf(d.index) < 0) idx.push(d.index); }); });
    idx.sort(function (a, b) { return a - b; });
    var rows = single.slice(0, 2);
    var frag = function (name, fmt) {
      return function (d) { return d.fragmentation ? fmt(d.fragmentation[name], d.fragmentation) : '-'; };
    };
    var per = [
      ['capacity', function (d) { return capacityText(d); }],
      ['peak live', frag('peak_live_bytes', function (v, f) { return formatSize(v) + ev(f.peak_live_event); })],
      ['peak reserved', frag('peak_reserved_bytes', function (v, f) { return formatSize(v) + ev(f.peak_reserved_event); })],
      ['waste (1 - live/reserved)', frag('waste_ratio', percent)],
      ['reserved at peak live', frag('reserved_bytes_at_peak', formatSize)],
      ['largest free block at peak', frag('largest_free_block_bytes_at_peak', formatSize)],
      ['stranded at peak', frag('stranded_bytes_at_peak', formatSize)],
      ['external fragmentation at peak', frag('external_fragmentation_at_peak', percent)],
      ['OOMs', function (d) { return String(d.stats.num_ooms || 0); }]
    ];
    idx.forEach(function (i) {
      per.forEach(function (p) {
        rows.push(['device ' + i + ': ' + p[0], function (r) { var d = devInfo(r, i); return d ? p[1](d) : '-'; }]);
      });
    });
    var n = idx.length;
    rows.bestRow = 'peak reserved, ' + n + ' devices summed at one moment';
    rows.push(['peak live, ' + n + ' devices summed at one moment', function (r) { return formatSize(r.report.fragmentation.peak_live_bytes) + ev(r.report.fragmentation.peak_live_event); }]);
    rows.push([rows.bestRow, function (r) { return formatSize(r.report.fragmentation.peak_reserved_bytes) + ev(r.report.fragmentation.peak_reserved_event); }]);
    single.slice(-4).forEach(function (row) { rows.push([row[0] + ' (all devices)', row[1]]); });
    return rows;
  }

  function sitesTable(run, list, what) {
    if (!list.length) return h('p', { 'class': 'muted', text: 'no site ' + what + '.' });
    var head = h('tr', {}, ['#', 'site', 'live at peak', 'stranded at peak', 'allocs', 'allocated', 'max live'].map(function (s) { return h('th', { text: s }); }));
    var body = list.map(function (s, i) {
      var frames = s.frames.length ? h('details', {}, [h('summary', { text: s.name }), h('pre', { text: s.frames.join('\n') })]) : s.name;
      return h('tr', {}, [h('td', { 'class': 'num', text: String(i + 1) }), h('td', {}, [frames]),
        h('td', { 'class': 'num', text: formatSize(s.live_bytes_at_peak) }), h('td', { 'class': 'num', text: formatSize(s.stranded_bytes_at_peak) }),
        h('td', { 'class': 'num', text: String(s.alloc_count) }), h('td', { 'class': 'num', text: formatSize(s.alloc_bytes) }),
        h('td', { 'class': 'num', text: formatSize(s.max_live_bytes) })]);
    });
    return h('table', { 'class': 'sites' }, [h('thead', {}, [head]), h('tbody', {}, body)]);
  }

  function section(id, heading, kids) {
    return h('section', { id: id }, [h('h2', { text: heading })].concat(kids));
  }

  // deviceVerdict is the verdict of a run on several devices: each device
  // against its own capacity, then the sum at one moment, said as a sum.
  function deviceVerdict(r) {
    var f = r.report.fragmentation, devs = r.report.devices;
    var parts = devs.map(function (d) {
      var df = d.fragmentation;
      var live = df ? df.peak_live_bytes : d.stats['allocated_bytes.all.peak'];
      var res = df ? df.peak_reserved_bytes : d.stats['reserved_bytes.all.peak'];
      var p = 'device ' + d.index + ' (' + (d.capacity_source === 'unknown' ? 'capacity not limited' : formatSize(d.capacity)) + ') needed at most ' + formatSize(live) + ' live, the allocator reserved up to ' + formatSize(res);
      var n = d.stats.num_ooms || 0;
      if (n) p += ', ' + n + ' OOM' + (n > 1 ? 's' : '');
      return p;
    });
    var s = r.label + ', ' + devs.length + ' devices: ' + parts.join('; ') + '. Summed over the devices at one moment: at most ' +
      formatSize(f.peak_live_bytes) + ' live, ' + formatSize(f.peak_reserved_bytes) + ' reserved.';
    if (r.ooms.length) s += ' The first OOM at event ' + r.ooms[0].event + ' (device ' + r.ooms[0].device + ').';
    return s;
  }

  function verdict() {
    var runs = data.runs, out = [];
    runs.forEach(function (r) {
      var f = r.report.fragmentation;
      if (r.report.devices.length > 1) {
        out.push(deviceVerdict(r));
        return;
      }
      var s = r.label + ': the program needed at most ' + formatSize(f.peak_live_bytes) + ' live; the allocator reserved up to ' +
        formatSize(f.peak_reserved_bytes) + ' (waste ' + percent(f.waste_ratio) + ').';
      if (f.stranded_bytes_at_peak > 0) s += ' At the peak, ' + formatSize(f.stranded_bytes_at_peak) + ' were free but stranded in segments pinned by live blocks (largest free block ' + formatSize(f.largest_free_block_bytes_at_peak) + ').';
      if (r.report.device_calls.ooms > 0) s += ' ' + r.report.device_calls.ooms + ' OOM' + (r.report.device_calls.ooms > 1 ? 's' : '') + ', the first at event ' + r.ooms[0].event + '.';
      out.push(s);
    });
    var names = function (rs) {
      var l = rs.map(function (r) { return r.label; });
      return l.length > 1 ? l.slice(0, -1).join(', ') + ' and ' + l[l.length - 1] : l[0];
    };
    if (data.same_setting) {
      out.push('The runs replay one and the same setting (' + (runs[0].report.config || 'defaults') + '): ' + names(runs) + ' are the same allocator, so there is no best to pick.');
    } else if (data.tied && data.tied.length > 1) {
      var tied = data.tied.map(function (i) { return runs[i]; }), t0 = tied[0].report;
      out.push('No single best setting on this trace: ' + names(tied) + ' tie with the lowest peak reserved (' + formatSize(t0.fragmentation.peak_reserved_bytes) +
        ') among the runs with the fewest OOMs (' + t0.device_calls.ooms + ').');
    } else if (data.best !== null && data.best !== undefined && runs.length > 1) {
      var b = runs[data.best];
      out.push('Best setting on this trace: ' + b.label + ' \u2014 the lowest peak reserved' + (data.multi_device ? ', the devices summed,' : '') +
        ' (' + formatSize(b.report.fragmentation.peak_reserved_bytes) + ') among the runs with the fewest OOMs.');
    }
    return h('div', { 'class': 'verdict' }, out.map(function (s) { return h('p', { text: s }); }));
  }

  // checksSection: --check's decisions and --expect-stats' memory_stats(),
  // worded as the table report words them; null when neither ran.
  function checksSection() {
    var checked = data.runs.filter(function (r) { return r.report.check || r.report.stats_check; });
    if (checked.length) {
      var ck = [];
      checked.forEach(function (r) {
        ck.push(h('h3', { text: r.label }));
        var c = r.report.check;
        if (c && c.nothing_to_check) {
          ck.push(h('p', { 'data-check': 'decisions', 'class': 'nothing', text: 'nothing to check: the trace records no allocator decision (segment or oom entry) and no end state to compare with' }));
        } else if (c) {
          var lines = ['check ' + (c.passed ? 'PASSED' : 'FAILED') + ': ' + c.decisions_matched + ' of ' + c.decisions_expected + ' decisions matched'];
          if (c.first_divergence) {
            var d = c.first_divergence;
            lines.push('first divergence: device ' + d.device + ', event ' + d.event + ': expected ' + d.expected + ', got ' + d.actual);
          }
          lines.push(c.final_segments_match === null ? 'final segments: not recorded in the trace'
            : c.final_segments_match ? 'final segments: match' : 'final segments: differ: ' + c.final_difference);
          ck.push(h('ul', { 'data-check': 'decisions', 'class': c.passed ? 'passed' : 'failed' }, lines.map(function (l) { return h('li', { text: l }); })));
        }
        var sc = r.report.stats_check;
        if (sc) {
          ck.push(h('p', { 'data-check': 'stats', 'class': sc.passed ? 'passed' : 'failed',
            text: 'memory_stats() check ' + (sc.passed ? 'PASSED' : 'FAILED') + ': ' + sc.exact_matched + ' of ' + sc.exact_compared +
              ' exact keys match (' + sc.file + ', device ' + sc.device + ')' + (sc.replay_stopped ? '; the replay stopped early' : '') }));
          if (sc.differences.length) {
            var head = h('tr', {}, ['key', 'memory_stats()', 'replay', 'standard'].map(function (x) { return h('th', { text: x }); }));
            ck.push(h('table', { 'data-check': 'stats-differences' }, [head].concat(sc.differences.map(function (d) {
              return h('tr', { title: d.why || '' }, [h('td', { text: d.key }), h('td', { 'class': 'num', text: String(d.recorded) }),
                h('td', { 'class': 'num', text: String(d.replayed) }), h('td', { text: d.exact ? 'exact' : 'inferred' })]);
            }))));
          }
          var notes = sc.inferred_compared ? ['inferred keys: ' + sc.inferred_matched + ' of ' + sc.inferred_compared + ' match (a difference there does not fail the check)'] : [];
          if (sc.not_compared.length) notes.push('not compared: ' + sc.not_compared.length + (sc.not_compared.length === 1 ? ' key' : ' keys') +
            ' (' + sc.not_compared.map(function (k) { return k.key; }).slice(0, 8).join(', ') + (sc.not_compared.length > 8 ? ', ...' : '') + ')');
          ck.push(h('ul', { 'class': 'muted' }, notes.map(function (l) { return h('li', { text: l }); })));
        }
      });
      return section('checks', 'Checks', ck);
    }
    return null;
  }

  function render() {
    var root = document.getElementById('report');
    root.appendChild(verdict());

    // Settings side by side.
    if (data.runs.length > 1) {
      var cats = ['peak live', 'peak reserved', 'reserved at peak live', 'stranded at peak'];
      // Several devices: the bars are of the devices' summed bytes.
      if (data.multi_device) cats = cats.map(function (c) { return c + ' (summed)'; });
      var series = data.runs.map(function (r, i) {
        var f = r.report.fragmentation;
        return { name: r.label, color: PALETTE[i % PALETTE.length], values: [f.peak_live_bytes, f.peak_reserved_bytes, f.reserved_bytes_at_peak, f.stranded_bytes_at_peak] };
      });
      root.appendChild(section('compare', data.same_trace ? 'Settings side by side' : 'Runs side by side', [summaryTable(data.runs),
        figureBox(barChart('compare', cats, series, formatSize), data.same_trace ?
          'The same trace under each setting. Reserved bytes are what the GPU must have; live bytes are the program\'s own need, the same under every setting.' :
          'Reserved bytes are what the GPU must have; live bytes are the program\'s own need.')]));
    } else {
      root.appendChild(section('figures', 'Figures', [summaryTable(data.runs)]));
    }
    var checks = checksSection();
    if (checks) root.appendChild(checks);

    // Timelines.
    var tl = [];
    var controls = h('div', { 'class': 'controls' }, [
      h('button', { id: 'zoom-reset', type: 'button', text: 'Reset zoom' }),
      ' ',
      anyTime() ? h('label', {}, [h('input', { type: 'checkbox', id: 'time-axis' }), ' time on the x axis']) : null,
      anyTime() ? ' \u00b7 ' : null,
      h('span', { id: 'zoom-state', 'class': 'muted' })
    ]);
    var drawn = data.runs.filter(function (r) { return r.timeline.event.length >= 2; });
    if (drawn.length) tl.push(controls);
    data.runs.forEach(function (r) {
      tl.push(h('h3', { text: r.label }));
      if (r.timeline.event.length < 2) {
        tl.push(h('p', { 'class': 'no-timeline', text: noTimeline(r) }));
        return;
      }
      var devs = r.timeline.devices || [];
      if (devs.length > 1) {
        devs.forEach(function (dv) {
          var dh = h('div', { 'class': 'chart' });
          tl.push(h('h4', { text: 'device ' + dv.index + ', capacity ' + capacityText(devInfo(r, dv.index)) }), dh);
          timelines.push({ run: r, host: dh, dev: dv });
        });
        tl.push(h('h4', { text: 'all ' + devs.length + ' devices summed (no device holds this much; the job does, across its devices)' }));
      }
      var host = h('div', { 'class': 'chart' });
      tl.push(host);
      timelines.push({ run: r, host: host });
    });
    if (drawn.length) tl.push(h('p', { 'class': 'muted', text: 'Live: bytes of the blocks the program holds (the maximum within each sample). Requested (the wide pale line under it): the sizes the program asked for, before rounding. Reserved: what the allocator holds from the GPU. Red dashed lines: OOMs; orange ticks: alloc retries (the cache was released and cudaMalloc retried); circle: peak live.' +
      (data.runs.some(function (r) { return (r.report.markers || []).length > 0; }) ? ' Grey dotted lines: the record_function ranges the trace annotates, their START and END.' : '') + (data.multi_device ?
      ' Several devices: each is drawn on its own, with its capacity as a dashed line when the trace gives one, then their sum at each event.' : '') }));
    root.appendChild(section('timeline', 'Memory over the trace', tl));
    redrawTimelines();
    var zr = document.getElementById('zoom-reset');
    if (zr) zr.addEventListener('click', function () { zoom.range = null; redrawTimelines(); });
    var ta = document.getElementById('time-axis');
    if (ta) ta.addEventListener('change', function () { zoom.mode = ta.checked ? 'time' : 'event'; zoom.range = null; redrawTimelines(); });

    // Segment maps.
    var sm = [h('p', { 'class': 'muted', text: 'Each segment the allocator holds, in address order, laid end to end and wrapped over rows (black bars separate segments; every byte has the same width). Hover a block for its size, offset and allocation site.' })];
    data.runs.forEach(function (r) {
      if (!r.captures.length) return;
      var host = h('div', { 'class': 'chart' });
      var info = h('p', { 'class': 'capinfo' });
      var buttons = h('div', { 'class': 'controls' });
      var show = function (ci) {
        var cap = r.captures[ci];
        host.replaceChildren(drawSegments(r, cap, 'segments-' + r.id));
        info.textContent = cap.title + ': ' + cap.segments.length + ' segments, ' + formatSize(cap.reserved_bytes) + ' reserved, ' +
          formatSize(cap.live_bytes) + ' live, ' + formatSize(cap.free_bytes) + ' free of which ' + formatSize(cap.stranded_bytes) +
          ' stranded; largest free block ' + formatSize(cap.largest_free_block_bytes) + (cap.truncated ? ' (map shows the first ' + cap.segments.length + ' segments)' : '');
        Array.prototype.forEach.call(buttons.children, function (b, bi) { b.className = bi === ci ? 'on' : ''; });
      };
      r.captures.forEach(function (cap, ci) {
        var b = h('button', { type: 'button', text: cap.title });
        b.addEventListener('click', function () { show(ci); });
        buttons.appendChild(b);
      });
      sm.push(h('h3', { text: r.label }), buttons, info, host);
      show(0);
    });
    root.appendChild(section('segments', 'Segment map at the peak and at each OOM', sm));

    // Sites.
    var st = [];
    data.runs.forEach(function (r) {
      st.push(h('h3', { text: r.label + ': top sites by live bytes at the peak' }), sitesTable(r, r.top_live.map(function (k) { return r.sites[k]; }), 'held memory'));
      st.push(h('h3', { text: r.label + ': top sites by waste (stranded bytes their blocks pinned at the peak)' }), sitesTable(r, r.top_waste.map(function (k) { return r.sites[k]; }), 'stranded memory'));
    });
    root.appendChild(section('sites', 'Allocation sites', st));

    // OOMs.
    var oomRuns = data.runs.filter(function (r) { return r.ooms.length; });
    if (oomRuns.length) {
      var oo = [];
      oomRuns.forEach(function (r) {
        oo.push(h('h3', { text: r.label }));
        oo.push(h('ul', {}, r.ooms.slice(0, 20).map(function (o) {
          return h('li', {}, ['event ' + o.event + ', device ' + o.device + ': ' + formatSize(o.size) + ' requested' + (o.recorded ? ' (the recording failed here too)' : ''), o.message ? h('pre', { text: o.message }) : null]);
        })));
      });
      root.appendChild(section('ooms', 'Out of memory', oo));
    }

    if (data.par) root.appendChild(parSection(data.par));

    var notes = [];
    data.runs.forEach(function (r) { r.report.notes.forEach(function (n) { notes.push(r.label + ': ' + n); }); });
    if (notes.length) root.appendChild(section('notes', 'Notes', [h('ul', {}, notes.map(function (n) { return h('li', { text: n }); }))]));
  }

  // parSection: OOM probability and throughput against the number of
  // parallel trials, one line per setting.
  function parSection(par) {
    var kids = [];
    if (par.title) kids.push(h('p', { text: par.title }));
    var k = par.k, xr = [Math.min.apply(null, k), Math.max.apply(null, k)];
    if (xr[0] === xr[1]) { xr[0] -= 1; xr[1] += 1; }
    var pts = function (vals) {
      var out = [];
      vals.forEach(function (v, i) { if (v !== null) out.push([k[i], v]); });
      return out;
    };
    var series = function (grid) {
      return par.settings.map(function (s, i) { return { name: s, color: PALETTE[i % PALETTE.length], points: pts(grid[i]), dots: true }; });
    };
    kids.push(figureBox(lineChart({ name: 'par-poom', width: 960, height: 280, x: xr, y: [0, 1], yFormat: 'percent', xLabel: 'parallel trials (PAR)', xFormat: numLabel, series: series(par.p_oom) }), 'Probability that a trial runs out of memory'));
    var tmax = 0;
    par.throughput.forEach(function (row) { row.forEach(function (v) { if (v !== null) tmax = Math.max(tmax, v); }); });
    kids.push(figureBox(lineChart({ name: 'par-throughput', width: 960, height: 280, x: xr, y: [0, Math.max(tmax, 1e-9) * 1.1], yFormat: 'number', xLabel: 'parallel trials (PAR)', xFormat: numLabel, series: series(par.throughput) }), 'Throughput (' + (par.throughput_unit || 'trials per unit time') + ')'));
    var head = h('tr', {}, [h('th', { text: 'setting' }), h('th', { text: 'PAR' }), h('th', { text: 'P(OOM)' }), h('th', { text: 'throughput' })].concat(par.saturation ? [h('th', { text: 'saturates at' })] : []));
    var body = [];
    par.settings.forEach(function (s, i) {
      k.forEach(function (kk, j) {
        var p = par.p_oom[i][j], t = par.throughput[i][j];
        body.push(h('tr', {}, [h('td', { text: j === 0 ? s : '' }), h('td', { 'class': 'num', text: String(kk) }),
          h('td', { 'class': 'num', text: p === null ? '-' : percent(p) }), h('td', { 'class': 'num', text: t === null ? '-' : numLabel(t) })].concat(
          par.saturation ? [h('td', { 'class': 'num', text: j === 0 ? (par.saturation[i] > 0 ? 'PAR ' + par.saturation[i] : '-') : '' })] : [])));
      });
    });
    kids.push(h('table', { 'class': 'figures' }, [h('thead', {}, [head]), h('tbody', {}, body)]));
    (par.notes || []).forEach(function (n) { kids.push(h('p', { 'class': 'muted', text: n })); });
    return section('par', 'Parallel trials (PAR)', kids);
  }

  // selfCheck writes what was drawn into #memreplay-selfcheck: per chart,
  // its series and the points (path vertices, or rects) of each, read
  // back from the DOM; and every error logged. The browser test asserts on
  // it.
  function selfCheck() {
    var charts = [];
    Array.prototype.forEach.call(document.querySelectorAll('svg[data-chart]'), function (svg) {
      var series = [];
      Array.prototype.forEach.call(svg.querySelectorAll('.series'), function (s) {
        var n = s.tagName.toLowerCase() === 'path' ? (s.getAttribute('d').match(/[ML]/g) || []).length : s.querySelectorAll('rect').length;
        series.push({ name: s.getAttribute('data-series'), points: n });
      });
      charts.push({ chart: svg.getAttribute('data-chart'), series: series, markers: svg.querySelectorAll('.marker').length });
    });
    var out = document.getElementById('memreplay-selfcheck');
    out.textContent = JSON.stringify({ rendered: true, render_ms: Math.round(performance.now() - started), charts: charts, errors: errors });
  }

  // A fragment #zoom=LO,HI opens the timelines zoomed to events LO..HI
  // (links into a report; the browser test uses it too).
  var zm = /(?:^#|&)zoom=([0-9.e+-]+),([0-9.e+-]+)/.exec(location.hash);
  if (zm && +zm[2] > +zm[1]) zoom.range = [+zm[1], +zm[2]];

  var started = performance.now();
  try {
    render();
  } catch (e) {
    errors.push('render: ' + (e && e.stack ? e.stack : e));
  }
  selfCheck();
  window.memreplay = { formatSize: formatSize, downsample: downsample, zoom: zoom, redraw: function () { redrawTimelines(); selfCheck(); } };
})();
