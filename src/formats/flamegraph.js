// The flame-graph page's script (inlined by flamegraph.rs; no network).
// DATA: { title, subtitle, total, strings, kinds, threads: [{ label, samples,
// name[], parent[], value[], self[] }] }, nodes parents-first.
//
// Drawn top-down (an icicle): roots at the top, callees below, so the
// widest frames are on the first screen however deep the stacks go.
// Picking a thread redraws; the search is kept (and in the URL) across
// thread switches and zoom.
;(function () {
  'use strict'
  var D = JSON.parse(document.getElementById('data').textContent)
  var ROW = 18
  var graph = document.getElementById('graph')
  var picker = document.getElementById('thread')
  var search = document.getElementById('search')
  var matched = document.getElementById('matched')
  var details = document.getElementById('details')
  var resetBtn = document.getElementById('reset')
  var state = { thread: -1, zoom: null, term: '' }

  function pct(v, of) {
    return of > 0 ? ((100 * v) / of).toFixed(1) + '%' : '0.0%'
  }
  function esc(s) {
    return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;')
  }

  // Trees: one per thread; "all threads" puts every thread's tree under a
  // node of its own.
  function build(index) {
    var nodes = [] // { name, kind, value, self, children, parent, depth }
    function addThread(t, parent) {
      var th = D.threads[t]
      var base = nodes.length
      for (var i = 0; i < th.name.length; i++) {
        var p = th.parent[i] < 0 ? parent : base + th.parent[i]
        var n = {
          name: D.strings[th.name[i]],
          kind: D.kinds[th.name[i]],
          value: th.value[i],
          self: th.self[i],
          children: [],
          parent: p,
          depth: p < 0 ? 0 : nodes[p].depth + 1,
        }
        nodes.push(n)
        if (p >= 0) nodes[p].children.push(nodes.length - 1)
      }
    }
    if (index >= 0) {
      var root = { name: D.threads[index].label, kind: 't', value: D.threads[index].samples, self: 0, children: [], parent: -1, depth: 0 }
      nodes.push(root)
      addThread(index, 0)
    } else {
      nodes.push({ name: 'all threads', kind: 't', value: D.total, self: 0, children: [], parent: -1, depth: 0 })
      for (var t = 0; t < D.threads.length; t++) {
        var tn = { name: D.threads[t].label, kind: 't', value: D.threads[t].samples, self: 0, children: [], parent: 0, depth: 1 }
        nodes.push(tn)
        nodes[0].children.push(nodes.length - 1)
        addThread(t, nodes.length - 1)
      }
    }
    for (var k = 0; k < nodes.length; k++) {
      nodes[k].children.sort(function (a, b) {
        return nodes[b].value - nodes[a].value
      })
    }
    return nodes
  }

  var nodes = []
  function draw() {
    var width = graph.clientWidth || 1200
    var zoom = state.zoom === null ? 0 : state.zoom
    var top = nodes[zoom]
    var term = state.term.toLowerCase()
    var html = []
    var maxDepth = 0
    var hits = 0
    // Frames on the zoomed node's path are drawn full width above it.
    var path = []
    for (var a = top.parent; a >= 0; a = nodes[a].parent) path.unshift(a)
    path.forEach(function (i, d) {
      html.push(box(i, 0, width, d, term, true))
    })
    var base = path.length
    function walk(i, x, w) {
      var n = nodes[i]
      var d = n.depth - top.depth + base
      if (d > maxDepth) maxDepth = d
      html.push(box(i, x, w, d, term, false))
      var cx = x
      for (var c = 0; c < n.children.length; c++) {
        var child = nodes[n.children[c]]
        var cw = (w * child.value) / n.value
        if (cw >= 0.5) walk(n.children[c], cx, cw)
        cx += cw
      }
    }
    walk(zoom, 0, width)
    // Matched share: samples under matching frames, each counted once.
    if (term) {
      ;(function count(i, inMatch) {
        var n = nodes[i]
        var m = !inMatch && n.kind !== 't' && n.name.toLowerCase().indexOf(term) >= 0
        if (m) hits += n.value
        for (var c = 0; c < n.children.length; c++) count(n.children[c], inMatch || m)
      })(zoom, false)
    }
    graph.style.height = (maxDepth + 1) * ROW + 'px'
    graph.innerHTML = html.join('')
    matched.textContent = term ? 'Matched: ' + pct(hits, top.value) + ' of ' + top.name.slice(0, 60) : ''
    resetBtn.disabled = state.zoom === null
  }

  function box(i, x, w, d, term, ancestor) {
    var n = nodes[i]
    var cls = 'f k' + n.kind + (ancestor ? ' anc' : '')
    if (term && n.kind !== 't' && n.name.toLowerCase().indexOf(term) >= 0) cls += ' hit'
    var label = w > 28 ? esc(n.name) : ''
    var title = esc(n.name) + ' \u2014 ' + n.value.toLocaleString() + ' samples (' + pct(n.value, D.total) + ' of all' + (n.self ? ', self ' + n.self.toLocaleString() : '') + ')'
    return (
      '<div class="' + cls + '" data-i="' + i + '" style="left:' + x.toFixed(1) + 'px;width:' + Math.max(w - 1, 0.5).toFixed(1) +
      'px;top:' + d * ROW + 'px" title="' + title + '">' + label + '</div>'
    )
  }

  function saveUrl() {
    var q = []
    if (state.term) q.push('s=' + encodeURIComponent(state.term))
    if (state.thread >= 0) q.push('t=' + state.thread)
    try {
      history.replaceState(null, '', '#' + q.join('&'))
    } catch (e) {
      // file:// pages may refuse; the state still works.
    }
  }

  function pick(t) {
    state.thread = t
    state.zoom = null
    nodes = build(t)
    picker.value = String(t)
    saveUrl()
    draw()
  }

  graph.addEventListener('click', function (e) {
    var el = e.target.closest('.f')
    if (!el) return
    var i = Number(el.getAttribute('data-i'))
    state.zoom = i === 0 ? null : i
    draw()
  })
  graph.addEventListener('mousemove', function (e) {
    var el = e.target.closest('.f')
    details.textContent = el ? el.getAttribute('title') : ' '
  })
  resetBtn.addEventListener('click', function () {
    state.zoom = null
    draw()
  })
  picker.addEventListener('change', function () {
    pick(Number(picker.value))
  })
  search.addEventListener('input', function () {
    state.term = search.value
    saveUrl()
    draw()
  })
  document.addEventListener('keydown', function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === 'f') {
      e.preventDefault()
      search.focus()
    }
  })
  window.addEventListener('resize', draw)

  // Threads, busiest first, with their share.
  var opt = document.createElement('option')
  opt.value = '-1'
  opt.textContent = 'All threads (' + D.total.toLocaleString() + ' samples)'
  picker.appendChild(opt)
  D.threads.forEach(function (t, i) {
    var o = document.createElement('option')
    o.value = String(i)
    o.textContent = t.label + ' \u2014 ' + pct(t.samples, D.total)
    picker.appendChild(o)
  })
  // State from the URL: #s=term&t=thread (or ?s=term).
  var params = new URLSearchParams(location.hash.slice(1) || location.search.slice(1))
  state.term = params.get('s') || ''
  search.value = state.term
  var t = /^-?\d+$/.test(params.get('t') || '') ? Number(params.get('t')) : -1
  pick(t >= -1 && t < D.threads.length ? t : -1)
})()
