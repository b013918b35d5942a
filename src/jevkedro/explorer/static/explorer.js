/* jevkedro explorer: the question table of a run page or a comparison page.
   Reads the page's JSON documents (#jk-meta, #jk-data) and draws everything through DOM calls and
   textContent: no string from the data is ever parsed as HTML. No network, no storage. */
(function () {
  'use strict';
  var META = JSON.parse(document.getElementById('jk-meta').textContent);
  var D = JSON.parse(document.getElementById('jk-data').textContent);
  var S = D.strings, N = D.n, COMPARE = META.kind === 'compare';
  var SIDES = COMPARE ? [D.a, D.b] : [D];
  var LETTERS = COMPARE ? ['A', 'B'] : [''];
  var FLIPS = ['both_right', 'a_only', 'b_only', 'both_wrong'];
  var FLIP_TEXT = {both_right: 'both right', a_only: 'A right, B wrong', b_only: 'B right, A wrong', both_wrong: 'both wrong'};
  var RESERVED = ['q', 'open', 'status', 'correct', 'type', 'flip', 'search', 'sort', 'page', 'size'];
  var SORTS = COMPARE
    ? [['id', 'snapshot order'], ['loss_change', 'largest change in loss'], ['loss_a', 'loss of A, highest first'],
       ['loss_b', 'loss of B, highest first'], ['confidence_a', 'confidence of A, highest first'], ['confidence_b', 'confidence of B, highest first']]
    : [['id', 'snapshot order'], ['confidence', 'confidence, highest first'], ['confidence_asc', 'confidence, lowest first'],
       ['loss', 'loss, highest first'], ['loss_asc', 'loss, lowest first']];
  var SIZES = META.page_sizes || [50, 100, 200];
  var MAX_BARS = 8;

  // slices: "question" (its own column), then the data's slice columns; "type" has its own filter
  var SLICES = [{name: 'question', values: S.qids, codes: D.q}];
  Object.keys(D.slices).forEach(function (k) { SLICES.push({name: k, values: D.slices[k].values, codes: D.slices[k].codes}); });
  var SLICE_BY_NAME = Object.create(null);
  SLICES.forEach(function (s) { SLICE_BY_NAME[s.name] = s; });

  var RIDX = Object.create(null);
  D.request_ids.forEach(function (id, r) { RIDX[id] = r; });
  var QSTART = new Int32Array(D.requests + 1).fill(-1);
  for (var i0 = N - 1; i0 >= 0; i0--) QSTART[D.r[i0]] = i0;

  var st = blank();

  function blank() {
    return {q: '', open: '', openRow: -1, status: '', correct: '', type: '', flip: '', search: '', sort: 'id', page: 1,
            size: SIZES[0], slices: Object.create(null), unknown: Object.create(null)};
  }

  // -- small DOM helpers (text only) ----------------------------------------------------------------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) { for (var k = 1; k < arguments.length; k++) if (arguments[k]) parent.appendChild(arguments[k]); return parent; }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function fmt(x, d) { return x === null || x === undefined ? '—' : Number(x).toFixed(d === undefined ? 3 : d); }
  function prob(v) { return v === null || v === undefined ? null : v / 10000; }

  // -- the fragment: read on load and on hashchange, written on every change ------------------------
  function dec(s) { try { return decodeURIComponent(s.replace(/\+/g, ' ')); } catch (e) { return s; } }
  function readHash() {
    var next = blank(), h = (location.hash || '').replace(/^#/, '');
    h.split('&').forEach(function (part) {
      if (!part) return;
      var at = part.indexOf('='), k = dec(at < 0 ? part : part.slice(0, at)), v = at < 0 ? '' : dec(part.slice(at + 1));
      if (k === 'page') next.page = Math.max(1, parseInt(v, 10) || 1);
      else if (k === 'size') next.size = SIZES.indexOf(parseInt(v, 10)) >= 0 ? parseInt(v, 10) : SIZES[0];
      else if (k === 'sort') next.sort = SORTS.some(function (s) { return s[0] === v; }) ? v : 'id';
      else if (RESERVED.indexOf(k) >= 0) next[k] = v;
      else if (SLICE_BY_NAME[k]) next.slices[k] = v;
      else next.unknown[k] = v;
    });
    if (next.q && !next.open) next.open = next.q;
    st = next;
  }
  function hashOf(s) {
    var parts = [];
    function put(k, v) { parts.push(encodeURIComponent(k) + '=' + encodeURIComponent(v)); }
    ['q', 'status', 'correct', 'type', 'flip'].forEach(function (k) { if (s[k]) put(k, s[k]); });
    Object.keys(s.slices).sort().forEach(function (k) { put(k, s.slices[k]); });
    Object.keys(s.unknown).sort().forEach(function (k) { put(k, s.unknown[k]); });
    if (s.search) put('search', s.search);
    if (s.sort !== 'id') put('sort', s.sort);
    if (s.size !== SIZES[0]) put('size', s.size);
    if (s.page > 1) put('page', s.page);
    if (s.open && s.open !== s.q) put('open', s.open);
    return parts.join('&');
  }
  function writeHash() {
    var h = hashOf(st);
    if ((location.hash || '').replace(/^#/, '') === h) return;
    try { history.replaceState(null, '', h ? '#' + h : location.pathname + location.search); } catch (e) { /* sandboxed frame */ }
  }

  // -- filtering and sorting ------------------------------------------------------------------------
  var hay = null, qidLow = null, instrLow = null;
  function stateText(v) { return typeof v === 'string' ? v : JSON.stringify(v); }
  function ensureHay() {
    if (hay) return;
    hay = new Array(D.requests);
    for (var r = 0; r < D.requests; r++) {
      var d = D.details[r];
      hay[r] = (D.request_ids[r] + '\n' + (d ? stateText(d.req.state) : (D.excerpts[r] || ''))).toLowerCase();
    }
    qidLow = S.qids.map(function (s) { return String(s).toLowerCase(); });
    instrLow = S.instr.map(function (s) { return String(s).toLowerCase(); });
  }
  function statusIs(i, code) {
    for (var k = 0; k < SIDES.length; k++) if (SIDES[k].st[i] === code) return true;
    return false;
  }
  function matches() {
    var tests = [];
    if (st.q) { var qr = RIDX[st.q]; if (qr === undefined) return []; tests.push(function (i) { return D.r[i] === qr; }); }
    if (st.status) { var sc = S.statuses.indexOf(st.status); tests.push(function (i) { return statusIs(i, sc); }); }
    if (st.type) { var tc = S.types.indexOf(st.type); tests.push(function (i) { return D.t[i] === tc; }); }
    if (st.correct && !COMPARE) {
      var cc = st.correct === 'true' ? 1 : st.correct === 'false' ? 0 : -9;
      tests.push(function (i) { return D.ok[i] === cc; });
    }
    if (st.flip && COMPARE) { var fc = FLIPS.indexOf(st.flip); tests.push(function (i) { return D.flip[i] === fc; }); }
    Object.keys(st.slices).forEach(function (k) {
      var s = SLICE_BY_NAME[k], code = s.values.indexOf(st.slices[k]), codes = s.codes;
      tests.push(function (i) { return codes[i] === code; });
    });
    if (Object.keys(st.unknown).length) return [];
    var needle = st.search.trim().toLowerCase();
    if (needle) {
      ensureHay();
      tests.push(function (i) { return hay[D.r[i]].indexOf(needle) >= 0 || qidLow[D.q[i]].indexOf(needle) >= 0 || instrLow[D.ins[i]].indexOf(needle) >= 0; });
    }
    var out = [], nt = tests.length;
    outer: for (var i = 0; i < N; i++) {
      for (var t = 0; t < nt; t++) if (!tests[t](i)) continue outer;
      out.push(i);
    }
    return sortRows(out);
  }
  function conf(side, i) {
    var p = side.p[i];
    if (!p) return null;
    var m = 0;
    for (var k = 0; k < p.length; k++) if (p[k] > m) m = p[k];
    return m / 10000;
  }
  function lossChange(i) {
    var a = D.a.loss[i], b = D.b.loss[i];
    return a === null || b === null ? null : Math.abs(a - b);
  }
  function sortRows(rows) {
    var key = null, desc = true;
    switch (st.sort) {
      case 'confidence': key = function (i) { return conf(D, i); }; break;
      case 'confidence_asc': key = function (i) { return conf(D, i); }; desc = false; break;
      case 'loss': key = function (i) { return D.loss[i]; }; break;
      case 'loss_asc': key = function (i) { return D.loss[i]; }; desc = false; break;
      case 'loss_change': key = lossChange; break;
      case 'loss_a': key = function (i) { return D.a.loss[i]; }; break;
      case 'loss_b': key = function (i) { return D.b.loss[i]; }; break;
      case 'confidence_a': key = function (i) { return conf(D.a, i); }; break;
      case 'confidence_b': key = function (i) { return conf(D.b, i); }; break;
      default: return rows;
    }
    var keys = new Float64Array(N);
    rows.forEach(function (i) { var v = key(i); keys[i] = v === null || v === undefined ? NaN : v; });
    return rows.sort(function (x, y) {
      var a = keys[x], b = keys[y], na = a !== a, nb = b !== b;
      if (na || nb) return na && nb ? x - y : na ? 1 : -1;  // no value: last
      return a === b ? x - y : (desc ? b - a : a - b);
    });
  }

  // -- cells ----------------------------------------------------------------------------------------
  function statusCell(side, i) {
    var td = el('td'), s = S.statuses[side.st[i]];
    add(td, el('div', 'jk-status jk-st-' + s, s));
    if (side.why[i] >= 0) add(td, el('div', 'jk-reason', S.reasons[side.why[i]]));
    return td;
  }
  function correctCell(v) {
    return v === 1 ? el('td', 'jk-right', '✓ right') : v === 0 ? el('td', 'jk-wrong', '✗ wrong') : el('td', 'jk-none', '—');
  }
  function goldText(i) {
    var cands = S.cands[D.c[i]];
    if (D.lab[i] >= 0) return cands[D.lab[i]];
    var soft = D.soft[String(i)];
    if (!soft) return '—';
    var order = soft.map(function (v, k) { return k; }).sort(function (a, b) { return soft[b] - soft[a]; }).slice(0, 3);
    return 'soft: ' + order.map(function (k) { return cands[k] + ' ' + fmt(prob(soft[k]), 2); }).join(', ');
  }
  function top(p) {
    if (!p) return -1;
    var best = 0;
    for (var k = 1; k < p.length; k++) if (p[k] > p[best]) best = k;
    return best;
  }
  function bar(p, k, isTop, cls) {
    var track = el('span', 'jk-track'), fill = el('span', 'jk-fill ' + cls + (isTop ? ' jk-top' : ''));
    if (p) fill.style.width = Math.max(0, Math.min(100, p[k] / 100)) + '%';
    track.appendChild(fill);
    return track;
  }
  function bars(i, all) {
    var cands = S.cands[D.c[i]], lab = D.lab[i], box = el('div', 'jk-bars' + (COMPARE ? ' jk-pair' : ''));
    var ps = SIDES.map(function (s) { return s.p[i]; }), tops = ps.map(top);
    var order = cands.map(function (c, k) { return k; });
    var shown = order;
    if (!all && cands.length > MAX_BARS) {
      var ref = ps[0] || ps[1];
      shown = order.slice().sort(function (a, b) { return ref ? ref[b] - ref[a] : a - b; }).slice(0, MAX_BARS);
      if (lab >= 0 && shown.indexOf(lab) < 0) shown[shown.length - 1] = lab;
      shown.sort(function (a, b) { return a - b; });
    }
    shown.forEach(function (k) {
      var name = el('span', 'jk-cand' + (k === lab ? ' jk-gold' : ''), cands[k]);
      name.title = cands[k];
      box.appendChild(name);
      ps.forEach(function (p, s) {
        box.appendChild(bar(p, k, k === tops[s], s === 1 ? 'jk-b-fill' : ''));
        box.appendChild(el('span', 'jk-pv', p ? fmt(prob(p[k]), 2) : '—'));
      });
    });
    if (shown.length < cands.length) box.appendChild(el('span', 'jk-more', '+' + (cands.length - shown.length) + ' more candidates (open the row)'));
    if (!ps.some(Boolean)) box.appendChild(el('span', 'jk-more', 'no valid probabilities'));
    return box;
  }
  function slicesCell(i) {
    var td = el('td', 'jk-slicescell');
    Object.keys(D.slices).forEach(function (k) {
      var code = D.slices[k].codes[i];
      if (code >= 0 && D.slices[k].values[code] !== '') add(td, el('span', 'jk-slicechip', k + ': ' + D.slices[k].values[code]));
    });
    return td;
  }
  function excerptOf(r) {
    var d = D.details[r];
    var text = d ? stateText(d.req.state) : (D.excerpts[r] || '');
    return text.length > 200 ? text.slice(0, 200) + '…' : text;
  }
  function numCell(v, d) { return el('td', 'jk-num', v === null || v === undefined ? '—' : fmt(v, d)); }
  function flipCell(i) {
    var f = D.flip[i];
    return el('td', 'jk-flip', f < 0 ? '—' : FLIP_TEXT[FLIPS[f]]);
  }

  var HEAD = COMPARE
    ? ['#', 'request / question', 'type', 'slices', 'instructions', 'candidates · A | B', 'gold', 'A', 'B', 'flip', 'loss A', 'loss B', 'Δ loss B − A']
    : ['#', 'request / question', 'type', 'slices', 'instructions', 'candidates · probabilities', 'gold', 'status', 'correct', 'conf.', 'loss'];

  function row(i, n) {
    var tr = el('tr', 'jk-row'), r = D.r[i];
    tr.dataset.i = String(i);
    tr.dataset.rid = D.request_ids[r];
    add(tr, el('td', 'jk-num', n));
    var who = el('td');
    add(who, el('div', 'jk-rid', D.request_ids[r]), el('div', 'jk-qid', S.qids[D.q[i]]), el('div', 'jk-excerpt', excerptOf(r)));
    add(tr, who, el('td', null, S.types[D.t[i]]), slicesCell(i), el('td', 'jk-instr', S.instr[D.ins[i]]));
    var gold = el('td', 'jk-goldcell', goldText(i));
    gold.title = gold.textContent;
    add(tr, add(el('td'), bars(i, false)), gold);
    if (COMPARE) {
      add(tr, statusCorrect(D.a, i), statusCorrect(D.b, i), flipCell(i), numCell(D.a.loss[i]), numCell(D.b.loss[i]));
      var a = D.a.loss[i], b = D.b.loss[i];
      add(tr, el('td', 'jk-num', a === null || b === null ? '—' : (b - a >= 0 ? '+' : '') + (b - a).toFixed(3)));
    } else {
      add(tr, statusCell(D, i), correctCell(D.ok[i]), numCell(conf(D, i)), numCell(D.loss[i]));
    }
    tr.addEventListener('click', function () { toggle(i); });
    return tr;
  }
  function statusCorrect(side, i) {
    var td = statusCell(side, i), c = side.ok[i];
    add(td, el('div', c === 1 ? 'jk-right' : c === 0 ? 'jk-wrong' : 'jk-none', c === 1 ? '✓ right' : c === 0 ? '✗ wrong' : ''));
    return td;
  }

  // -- the detail of a request: every question, the request, the raw response(s) -------------------
  function detail(r) {
    var box = el('div', 'jk-detailbox'), rid = D.request_ids[r], d = D.details[r];
    var head = el('h3', null, 'Request ' + rid);
    add(box, head);
    var facts = el('p', 'jk-small');
    SIDES.forEach(function (side, s) {
      var lat = side.lat[r];
      facts.appendChild(document.createTextNode((s ? ' · ' : '') + (LETTERS[s] ? LETTERS[s] + ': ' : '') + 'request status ' +
        S.statuses[side.rst[r]] + (lat === null ? '' : ', latency ' + lat.toFixed(2) + ' ms')));
    });
    var link = el('a', null, 'link to this request');
    link.href = '#q=' + encodeURIComponent(rid);
    add(facts, document.createTextNode(' · '), link);
    add(box, facts);
    add(box, el('h3', null, 'Every question of this request'));
    var table = el('table', 'jk-subtable'), hr = el('tr');
    (COMPARE ? ['question', 'type', 'instructions', 'candidates · A | B', 'gold', 'A', 'B', 'loss A', 'loss B']
             : ['question', 'type', 'instructions', 'candidates · probabilities', 'gold', 'status', 'correct', 'loss'])
      .forEach(function (h) { hr.appendChild(el('th', null, h)); });
    add(table, add(el('thead'), hr));
    var body = el('tbody');
    for (var i = QSTART[r]; i < N && D.r[i] === r; i++) {
      var tr = el('tr');
      tr.dataset.q = S.qids[D.q[i]];
      add(tr, el('td', null, S.qids[D.q[i]]), el('td', null, S.types[D.t[i]]), el('td', 'jk-instr', S.instr[D.ins[i]]),
          add(el('td'), bars(i, true)), el('td', null, goldText(i)));
      if (COMPARE) add(tr, statusCorrect(D.a, i), statusCorrect(D.b, i), numCell(D.a.loss[i]), numCell(D.b.loss[i]));
      else add(tr, statusCell(D, i), correctCell(D.ok[i]), numCell(D.loss[i]));
      body.appendChild(tr);
    }
    add(box, add(table, body));
    if (!d) {
      var note = el('p', 'jk-note', 'The full request and raw response of ' + rid + ' are not in this page (size budget): look ' +
        'it up by its request id in ' + META.snapshot + ' and ' + META.predictions + '. The state begins:');
      add(box, note, add(el('pre', 'jk-request'), document.createTextNode(D.excerpts[r] || '')));
      return box;
    }
    var req = Object.assign({}, d.req);
    req.questions = D.qsets[d.req.questions];
    var mediaList = null;
    if (req.media !== undefined) {
      var list = el('ul', 'jk-media'), media = Array.isArray(req.media) ? req.media : Object.keys(req.media || {}).map(function (k) { return {name: k}; });
      media.forEach(function (m) {
        var name = m && typeof m === 'object' ? (m.path || m.name || m.file || m.url || JSON.stringify(m)) : String(m);
        list.appendChild(el('li', null, 'media: ' + name + (m && m.type ? ' (' + m.type + ')' : '')));
      });
      mediaList = list;
    }
    var reqBox = el('div');
    add(reqBox, el('h3', null, 'Request as the model saw it'));
    if (mediaList) add(reqBox, mediaList);
    add(reqBox, el('pre', 'jk-request', JSON.stringify(req, null, 2)));
    var cols = el('div', 'jk-cols');
    if (COMPARE) add(box, reqBox); else add(cols, reqBox);
    (COMPARE ? [['raw_a', 'A: ' + META.a], ['raw_b', 'B: ' + META.b]] : [['raw', '']]).forEach(function (pair) {
      var col = el('div');
      add(col, el('h3', null, 'Raw response as stored' + (pair[1] ? ' — ' + pair[1] : '') + ' (predictions.jsonl)'));
      var rec = whole(pair[0], d[pair[0]]);
      add(col, el('pre', 'jk-raw', rec === null ? 'no record: never asked (unattempted)' : JSON.stringify(rec, null, 2)));
      cols.appendChild(col);
    });
    add(box, cols);
    return box;
  }
  // a stored record, whole again: the fields every record shares are kept once (D.records)
  function whole(name, own) {
    if (own === null || own === undefined) return null;
    var shared = D.records[name].shared, order = D.records[name].order, out = Object.create(null);
    order.forEach(function (k) {
      if (Object.prototype.hasOwnProperty.call(own, k)) out[k] = own[k];
      else if (Object.prototype.hasOwnProperty.call(shared, k)) out[k] = shared[k];
    });
    Object.keys(own).forEach(function (k) { if (!(k in out)) out[k] = own[k]; });
    Object.keys(shared).forEach(function (k) { if (!(k in out)) out[k] = shared[k]; });
    return out;
  }
  function toggle(i) {
    var rid = D.request_ids[D.r[i]];
    if (st.open === rid && st.openRow === i) { st.open = ''; st.openRow = -1; }
    else { st.open = rid; st.openRow = i; }
    writeHash();
    render(false);
  }

  // -- controls, chips, pager ------------------------------------------------------------------------
  function counts(codesOf, n) {
    var c = new Int32Array(n);
    for (var i = 0; i < N; i++) { var v = codesOf(i); if (v >= 0) c[v]++; }
    return c;
  }
  var statusCounts = S.statuses.map(function (s, code) {
    var c = 0;
    for (var i = 0; i < N; i++) if (statusIs(i, code)) c++;
    return c;
  });
  var typeCounts = counts(function (i) { return D.t[i]; }, S.types.length);
  function select(label, key, options, value, onchange) {
    var lab = el('label', null, label), sel = el('select');
    sel.dataset.key = key;
    options.forEach(function (o) { var op = el('option', null, o[1]); op.value = o[0]; sel.appendChild(op); });
    sel.value = value;
    sel.addEventListener('change', function () { onchange(sel.value); });
    lab.appendChild(sel);
    return lab;
  }
  function set(key, value) { st[key] = value; st.page = 1; changed(); }
  function buildControls() {
    var box = clear(document.getElementById('jk-controls'));
    var search = el('input');
    search.type = 'search';
    search.id = 'jk-search';
    search.placeholder = 'ids, instructions, state…';
    search.value = st.search;
    var timer = null;
    search.addEventListener('input', function () {
      clearTimeout(timer);
      timer = setTimeout(function () { st.search = search.value; st.page = 1; changed(); }, 180);
    });
    add(box, add(el('label', null, 'search'), search));
    add(box, select('status' + (COMPARE ? ' (either model)' : ''), 'status', [['', 'any']].concat(S.statuses.map(function (s, k) {
      return [s, s + ' (' + statusCounts[k] + ')'];
    })), st.status, function (v) { set('status', v); }));
    if (COMPARE) {
      var fc = counts(function (i) { return D.flip[i]; }, FLIPS.length);
      add(box, select('right / wrong', 'flip', [['', 'any']].concat(FLIPS.map(function (f, k) {
        return [f, FLIP_TEXT[f] + ' (' + fc[k] + ')'];
      })), st.flip, function (v) { set('flip', v); }));
    } else {
      var cc = counts(function (i) { return D.ok[i]; }, 2);
      add(box, select('correct', 'correct', [['', 'any'], ['true', 'right (' + cc[1] + ')'], ['false', 'wrong (' + cc[0] + ')']],
        st.correct, function (v) { set('correct', v); }));
    }
    add(box, select('type', 'type', [['', 'any']].concat(S.types.map(function (t, k) { return [t, t + ' (' + typeCounts[k] + ')']; })),
      st.type, function (v) { set('type', v); }));
    SLICES.forEach(function (s) {
      if (s.values.length > 500 || s.values.length < 2) return;
      var c = counts(function (i) { return s.codes[i]; }, s.values.length);
      add(box, select(s.name, 'slice:' + s.name, [['', 'any']].concat(s.values.map(function (v, k) { return [v, (v === '' ? '(none)' : v) + ' (' + c[k] + ')']; })),
        st.slices[s.name] || '', function (v) { if (v) st.slices[s.name] = v; else delete st.slices[s.name]; st.page = 1; changed(); }));
    });
    add(box, select('sort', 'sort', SORTS, st.sort, function (v) { set('sort', v); }));
    add(box, select('rows per page', 'size', SIZES.map(function (n) { return [String(n), String(n)]; }), String(st.size),
      function (v) { set('size', parseInt(v, 10)); }));
    var reset = el('button', 'jk-reset', 'clear filters');
    reset.type = 'button';
    reset.addEventListener('click', function () { st = blank(); changed(); });
    add(box, reset);
  }
  function chips() {
    var box = clear(document.getElementById('jk-chips'));
    function chip(text, drop) {
      var c = el('span', 'jk-chip', text), x = el('button', null, '×');
      x.type = 'button';
      x.title = 'remove this filter';
      x.addEventListener('click', function () { drop(); st.page = 1; changed(); });
      c.appendChild(x);
      box.appendChild(c);
    }
    if (st.q) chip('request ' + st.q, function () { st.q = ''; });
    ['status', 'correct', 'type', 'flip'].forEach(function (k) {
      if (st[k]) chip(k + ' = ' + (k === 'flip' ? FLIP_TEXT[st[k]] || st[k] : st[k]), function () { st[k] = ''; });
    });
    Object.keys(st.slices).forEach(function (k) { chip(k + ' = ' + st.slices[k], function () { delete st.slices[k]; }); });
    Object.keys(st.unknown).forEach(function (k) { chip('no such filter: ' + k + ' = ' + st.unknown[k], function () { delete st.unknown[k]; }); });
    if (st.search) chip('search "' + st.search + '"', function () { st.search = ''; });
  }
  function pager(id, total, pages) {
    var box = clear(document.getElementById(id));
    function btn(text, page, disabled) {
      var b = el('button', null, text);
      b.type = 'button';
      b.disabled = disabled;
      b.addEventListener('click', function () { st.page = page; writeHash(); render(true); });
      return b;
    }
    var first = (st.page - 1) * st.size;
    var info = el('span', 'jk-count', total ? 'questions ' + (first + 1) + '–' + Math.min(total, first + st.size) + ' of ' + total +
      (total < N ? ' (filtered from ' + N + ')' : '') : 'no question matches (of ' + N + ')');
    var input = el('input');
    input.type = 'number';
    input.min = '1';
    input.max = String(pages);
    input.value = String(st.page);
    input.addEventListener('change', function () {
      st.page = Math.min(pages, Math.max(1, parseInt(input.value, 10) || 1));
      writeHash();
      render(true);
    });
    add(box, btn('« first', 1, st.page <= 1), btn('‹ previous', st.page - 1, st.page <= 1), el('span', null, 'page'), input,
        el('span', 'jk-pages', 'of ' + pages), btn('next ›', st.page + 1, st.page >= pages), btn('last »', pages, st.page >= pages), info);
  }

  // -- drawing ---------------------------------------------------------------------------------------
  var table = document.getElementById('jk-qtable');
  (function head() {
    var tr = el('tr');
    HEAD.forEach(function (h) { tr.appendChild(el('th', null, h)); });
    clear(table.tHead).appendChild(tr);
  })();

  function render(scroll) {
    var rows = matches();
    var pages = Math.max(1, Math.ceil(rows.length / st.size));
    var openRid = st.open;
    if (openRid && st.openRow < 0 && RIDX[openRid] !== undefined) {  // a deep link: the page holding that request
      var at = rows.indexOf(QSTART[RIDX[openRid]]);
      if (at < 0) at = rows.findIndex(function (i) { return D.request_ids[D.r[i]] === openRid; });
      if (at >= 0) { st.page = Math.floor(at / st.size) + 1; st.openRow = rows[at]; }
    }
    if (st.page > pages) st.page = pages;
    var body = clear(table.tBodies[0]), first = (st.page - 1) * st.size, opened = null;
    var slice = rows.slice(first, first + st.size);
    slice.forEach(function (i, k) {
      var tr = row(i, first + k + 1);
      body.appendChild(tr);
      if (openRid && D.request_ids[D.r[i]] === openRid && (st.openRow === i || (st.openRow < 0 && !opened))) {
        tr.classList.add('jk-open');
        var dr = el('tr', 'jk-detail'), td = el('td');
        td.colSpan = HEAD.length;
        td.appendChild(detail(D.r[i]));
        body.appendChild(add(dr, td));
        opened = dr;
      }
    });
    if (!slice.length) {
      var empty = el('td', 'jk-empty', 'No question matches these filters.');
      empty.colSpan = HEAD.length;
      body.appendChild(add(el('tr'), empty));
    }
    pager('jk-pager-top', rows.length, pages);
    pager('jk-pager', rows.length, pages);
    chips();
    table.dataset.rows = String(rows.length);
    if (scroll && opened) { opened.previousSibling.scrollIntoView({block: 'start'}); window.scrollBy(0, -90); }
    else if (scroll) document.getElementById('jk-questions').scrollIntoView({block: 'start'});
  }
  function changed() { writeHash(); buildControls(); render(false); }

  // -- sortable static tables (slices, paired differences) ---------------------------------------------
  Array.prototype.forEach.call(document.querySelectorAll('table.jk-sortable'), function (t) {
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th, col) {
      function sortBy() {
        var desc = th.dataset.sorted !== 'desc', num = th.dataset.kind === 'num';
        Array.prototype.forEach.call(t.tHead.rows[0].cells, function (o) { delete o.dataset.sorted; });
        th.dataset.sorted = desc ? 'desc' : 'asc';
        var rows = Array.prototype.slice.call(t.tBodies[0].rows);
        rows.sort(function (x, y) {
          var a = x.cells[col].dataset.v, b = y.cells[col].dataset.v;
          if (a === undefined) a = x.cells[col].textContent;
          if (b === undefined) b = y.cells[col].textContent;
          if (num) {
            var fa = a === '' ? NaN : parseFloat(a), fb = b === '' ? NaN : parseFloat(b);
            if (fa !== fa || fb !== fb) return (fa !== fa) - (fb !== fb);
            return desc ? fb - fa : fa - fb;
          }
          return desc ? String(b).localeCompare(String(a)) : String(a).localeCompare(String(b));
        });
        rows.forEach(function (r) { t.tBodies[0].appendChild(r); });
      }
      th.addEventListener('click', sortBy);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter') sortBy(); });
    });
  });

  window.addEventListener('hashchange', function () { readHash(); buildControls(); render(true); });
  readHash();
  buildControls();
  render(Boolean(st.q || st.open));
  writeHash();
  document.documentElement.dataset.ready = '1';
})();
